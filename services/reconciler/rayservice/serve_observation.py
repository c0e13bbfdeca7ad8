"""The prober's ``obs-serve`` observation of a cluster (docs/behaviour.md#6.1 step 12): its Serve applications and
whether they are ready.

Role: read the observation (the dashboard's ``GET /api/serve/applications/?api_type=declarative`` body,
or ``{"http_status": N, "error": ...}``) into KubeRay's application-status map.

Invariants: pure and total: malformed observations read as "no information" or as a dashboard error,
never raise.

Not here: whether to submit a config (``serve_config``), when to reconcile which cluster (``reconcile_serve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

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
