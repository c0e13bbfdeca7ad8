"""Serve config submissions (docs/behaviour.md#6.1 step 12): whether (and what) to submit to a cluster's dashboard.

Role: convert ``serveConfigV2`` (YAML) into the JSON the dashboard's PUT takes, and apply KubeRay's
``checkIfNeedSubmitServeApplications`` against the durable record of the last submission and the
cluster's observed applications (``serve_observation``).

Durable serve-config record (KubeRay keeps it in an in-memory LRU): the digest of the last submitted
``serveConfigV2`` is the ``raybus.io/serve-config-hash`` annotation of the RayCluster, the ``record`` of
the PutServeConfig: the applier patches it only after the dashboard accepted the PUT, so a failed PUT is
retried on the next pass as in KubeRay (whose cache is updated only on success). A restarted or
rescheduled worker therefore does not resubmit an unchanged config; a cluster that lost its
applications (head restart without GCS FT) reports none and is resubmitted, exactly as in KubeRay.

Invariants: pure; a config that is not a YAML mapping is a :class:`ServeConfigError` for the caller to report.

Not here: target_capacity steps (``incremental``), when to reconcile which cluster (``reconcile_serve``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec
import yaml

from services.reconciler.rayservice.serve_observation import ServeObservation

TARGET_CAPACITY: Final = "target_capacity"
"""The one field of a Serve config raybus chooses (an incremental upgrade's step), not the user."""


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
        config[TARGET_CAPACITY] = target_capacity
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
