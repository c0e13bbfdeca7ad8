"""Serve applications (docs/behaviour.md#6.1 step 12): what the prober saw, whether a cluster is ready, and whether
(and what) to submit to its dashboard.

Role: read the ``obs-serve`` observation of a cluster (the dashboard's
``GET /api/serve/applications/?api_type=declarative`` body, or ``{"http_status": N, "error": ...}``)
into KubeRay's application-status map, convert ``serveConfigV2`` (YAML) into the JSON the dashboard's
PUT takes, and apply KubeRay's ``checkIfNeedSubmitServeApplications`` against the durable record of
the last submission.

Durable serve-config record (KubeRay keeps it in an in-memory LRU): the digest of the last submitted
``serveConfigV2`` is the ``raybus.io/serve-config-hash`` annotation of the RayCluster, the ``record`` of
the PutServeConfig: the applier patches it only after the dashboard accepted the PUT, so a failed PUT is
retried on the next pass as in KubeRay (whose cache is updated only on success). A restarted or
rescheduled worker therefore does not resubmit an unchanged config; a cluster that lost its
applications (head restart without GCS FT) reports none and is resubmitted, exactly as in KubeRay.

Invariants: pure and total: malformed observations read as "no information" or as a dashboard error,
never raise.

Not here: target_capacity steps (``incremental``), when to reconcile which cluster (``reconcile``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import yaml

from schema.objects import integer, mapping, text

DEFAULT_APP_NAME: Final = "default"
RUNNING: Final = "RUNNING"


class ServeObservation(msgspec.Struct, frozen=True, kw_only=True):
    """One cluster's Serve applications as last observed (or the dashboard error)."""

    applications: dict[str, dict[str, Any]]
    error: str = ""

    @property
    def ready(self) -> bool:
        """KubeRay's ``isReady``: at least one application, and every one RUNNING."""
        return bool(self.applications) and all(app.get("status") == RUNNING for app in self.applications.values())


def read_observation(data: Mapping[str, Any] | None) -> ServeObservation | None:
    """The observation's application statuses (wire shape of ``applicationStatuses``); None if absent."""
    if data is None:
        return None
    status_code = integer(data.get("http_status"))
    if data.get("error") or (status_code is not None and not 200 <= status_code < 300):
        return ServeObservation(
            applications={}, error=text(data.get("error")) or f"dashboard answered HTTP {status_code}"
        )
    applications: dict[str, dict[str, Any]] = {}
    raw_apps = mapping(data.get("applications"))
    for raw_name, raw_app in raw_apps.items():
        app = mapping(raw_app)
        name = raw_name if isinstance(raw_name, str) and raw_name else DEFAULT_APP_NAME
        deployments: dict[str, dict[str, str]] = {}
        for deployment_name, raw_deployment in mapping(app.get("deployments")).items():
            deployment = mapping(raw_deployment)
            entry = {"status": text(deployment.get("status")), "message": text(deployment.get("message"))}
            deployments[str(deployment_name)] = {k: v for k, v in entry.items() if v}
        status: dict[str, Any] = {"status": text(app.get("status")), "message": text(app.get("message"))}
        status = {k: v for k, v in status.items() if v}
        if deployments:
            status["serveDeploymentStatuses"] = deployments
        applications[name] = status
    return ServeObservation(applications=applications)


class ServeConfigError(Exception):
    """``serveConfigV2`` is not a YAML mapping (KubeRay: the submission fails, event, requeue)."""


def serve_config_json(serve_config_v2: str, *, target_capacity: int | None = None) -> dict[str, Any]:
    """``serveConfigV2`` converted YAML→JSON (plus ``target_capacity`` when given), ready for the PUT.

    Raises:
        ServeConfigError: the text is not YAML, or not a mapping.
    """
    try:
        loaded = yaml.safe_load(serve_config_v2) if serve_config_v2 else {}
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        raise ServeConfigError(f"error converting YAML to JSON: {exc}") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ServeConfigError(f"error unmarshaling JSON: cannot unmarshal {type(loaded).__name__} into a map")
    try:
        # Through JSON: YAML timestamps and other non-JSON scalars become strings, keys become strings.
        config: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(_jsonable(loaded)))
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ServeConfigError(f"error converting YAML to JSON: {exc}") from exc
    if target_capacity is not None:
        config["target_capacity"] = target_capacity
    return config


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def config_hash(serve_config_v2: str) -> str:
    """The digest recorded as ``raybus.io/serve-config-hash`` (of the raw text, as KubeRay compares it)."""
    return hashlib.sha256(serve_config_v2.encode("utf-8")).hexdigest()[:32]


def submit_reason(*, recorded: str, wanted: str, observation: ServeObservation) -> str | None:
    """KubeRay's ``checkIfNeedSubmitServeApplications``: why to submit, or None."""
    if not recorded:
        return "Nothing has been cached for the cluster."
    if not observation.applications:
        return (
            "No Serve application found in the RayCluster. "
            "A possible reason is that the head Pod crashed and GCS FT was not enabled."
        )
    if recorded != wanted:
        return "Current V2 Serve config doesn't match cached Serve config."
    return None
