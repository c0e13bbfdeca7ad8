"""The simulated Ray Serve controller behind ``/api/serve/applications/``.

Serve starts with the first config PUT and stops with a DELETE. A PUT replaces the declarative config:
new or changed applications go DEPLOYING and, after their deploy delay, RUNNING (or DEPLOY_FAILED when
scripted so, see ``rules``); unchanged ones keep their state; the ones left out are DELETING for the
head's delete delay, then gone. A deploying application lists no deployments at first (Ray builds the
application before it knows them), and one whose import failed never does. Like jobs, statuses are
computed from the clock on read.

The GET body follows Ray 2.60's ``ServeInstanceDetails``: before Serve runs only ``controller_info``,
``proxies``, ``applications`` (all empty) and ``target_capacity`` (null); then also ``proxy_location``,
``http_options`` and ``grpc_options``, with each proxy and each application's deployments as objects.
Deployment names are the ``deployments`` entries of the config, else the last part of the import path
(real Ray names them after the classes in the code, which the simulator does not read). It deliberately
does not model replicas, autoscaling or traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.dashboard.clock import Clock
from kubesim.dashboard.rules import ServeAppScript, parse_serve_app_script
from kubesim.dashboard.timings import INSTANT_RAY, RayTimings
from schema.ray import conventions

_NODE_ID = "kubesim-head-node"


class InvalidServeConfigError(Exception):
    """The PUT body is not a valid multi-application serve config (Ray answers 400)."""


@dataclass(kw_only=True)
class ServeApp:
    """One deployed application."""

    name: str
    config: dict[str, Any]
    script: ServeAppScript
    deployed_mono: float
    deployed_wall: float
    deleting_mono: float | None = None
    """When a PUT left the application out (it is DELETING from then on)."""

    def status_at(self, now: float) -> str:
        """Ray's ApplicationStatus at monotonic time ``now``."""
        if self.deleting_mono is not None:
            return "DELETING"
        if now < self.deployed_mono + self.script.deploy_seconds:
            return "DEPLOYING"
        return "DEPLOY_FAILED" if self.script.fails else "RUNNING"

    @property
    def route_prefix(self) -> str | None:
        """The HTTP route prefix (Ray's default is ``/``)."""
        value = self.config.get("route_prefix", "/")
        return value if isinstance(value, str) else None


def _deployment_names(app: Mapping[str, Any]) -> list[str]:
    names = [str(d["name"]) for d in app.get("deployments") or [] if isinstance(d, Mapping) and "name" in d]
    if names:
        return names
    # Without overrides, Ray reports the deployments the code defines; the import path's last part is
    # the best stand-in there is.
    import_path = str(app.get("import_path", "app"))
    return [import_path.replace(":", ".").rsplit(".", 1)[-1] or "app"]


def _replicas(deployment: Mapping[str, Any]) -> int:
    value = deployment.get("num_replicas", 1)
    # "auto" (autoscaling) and other non-integers count as one replica here.
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _validate(config: Any) -> list[dict[str, Any]]:
    if not isinstance(config, dict) or not isinstance(config.get("applications"), list):
        raise InvalidServeConfigError("the config must be an object with an 'applications' list")
    apps: list[dict[str, Any]] = []
    names: set[str] = set()
    prefixes: set[str] = set()
    for entry in config["applications"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("import_path"), str):
            raise InvalidServeConfigError("every application needs an 'import_path' string")
        app = dict(entry)
        app.setdefault("name", "default")
        name = str(app["name"])
        if name in names:
            raise InvalidServeConfigError(f"Found multiple configs for application '{name}'.")
        names.add(name)
        prefix = app.get("route_prefix", "/")
        if isinstance(prefix, str):
            if prefix in prefixes:
                raise InvalidServeConfigError(f"Found duplicate route prefix '{prefix}'.")
            prefixes.add(prefix)
        apps.append(app)
    return apps


class ServeController:
    """The serve applications of one simulated Ray cluster."""

    def __init__(self, clock: Clock, *, deploy_seconds: float = 0.2, timings: RayTimings = INSTANT_RAY) -> None:
        self._clock = clock
        self._deploy_seconds = deploy_seconds
        self._timings = timings
        self._apps: dict[str, ServeApp] = {}
        self._target_capacity: float | None = None
        self.started = False
        """True from the first config PUT until a DELETE (Serve runs on the cluster)."""

    def start(self) -> None:
        """Start Serve (the controller and the proxy), as the first config PUT does."""
        self.started = True

    @staticmethod
    def validate(config: Any) -> None:
        """Check a PUT body.

        Raises:
            InvalidServeConfigError: the body is malformed.
        """
        _validate(config)
        capacity = config.get("target_capacity")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int | float)):
            raise InvalidServeConfigError("target_capacity must be a number")

    def apply(self, config: Any) -> None:
        """Replace the declarative config with a PUT body (Serve starts if it does not run).

        Raises:
            InvalidServeConfigError: the body is malformed.
        """
        self.validate(config)
        apps = _validate(config)
        capacity = config.get("target_capacity")
        self._target_capacity = None if capacity is None else float(capacity)
        now, wall = self._clock.monotonic(), self._clock.time()
        self._forget_deleted(now)
        current: dict[str, ServeApp] = {}
        for app in apps:
            name = str(app["name"])
            previous = self._apps.get(name)
            if previous is not None and previous.config == app and previous.deleting_mono is None:
                current[name] = previous
                continue
            current[name] = ServeApp(
                name=name,
                config=app,
                script=parse_serve_app_script(app, default_deploy_seconds=self._deploy_seconds),
                deployed_mono=now,
                deployed_wall=wall,
            )
        if self._timings.serve_delete_seconds > 0:
            for name, left_out in self._apps.items():
                if name not in current:
                    if left_out.deleting_mono is None:
                        left_out.deleting_mono = now
                    current[name] = left_out
        self._apps = current
        self.started = True

    def _forget_deleted(self, now: float) -> None:
        delay = self._timings.serve_delete_seconds
        self._apps = {
            name: app
            for name, app in self._apps.items()
            if app.deleting_mono is None or now < app.deleting_mono + delay
        }

    def delete_all(self) -> None:
        """``DELETE /api/serve/applications/``: shut Serve down with every application."""
        self._apps = {}
        self._target_capacity = None
        self.started = False

    def app_for_path(self, path: str) -> ServeApp | None:
        """The RUNNING application whose route prefix is the longest match for ``path``."""
        now = self._clock.monotonic()
        best: ServeApp | None = None
        for app in self._apps.values():
            prefix = app.route_prefix
            if prefix is None or app.status_at(now) != "RUNNING":
                continue
            matches = path == prefix or path.startswith(prefix.rstrip("/") + "/")
            if matches and (best is None or len(prefix) > len(best.route_prefix or "")):
                best = app
        return best

    def details(self) -> dict[str, Any]:
        """Ray's ``ServeInstanceDetails`` JSON for ``GET /api/serve/applications/``."""
        if not self.started:
            return {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}
        now = self._clock.monotonic()
        self._forget_deleted(now)
        return {
            "controller_info": _actor("SERVE_CONTROLLER_ACTOR", "/serve/controller.log"),
            "proxy_location": "EveryNode",
            "http_options": {
                "host": "0.0.0.0",
                "port": conventions.DEFAULT_SERVE_PORT,
                "root_path": "",
                "request_timeout_s": None,
                "keep_alive_timeout_s": 90,
                "ssl_keyfile": None,
                "ssl_certfile": None,
                "ssl_keyfile_password": None,
                "ssl_ca_certs": None,
            },
            "grpc_options": {
                "port": 9000,
                "grpc_servicer_functions": [],
                "request_timeout_s": None,
                "enable_reflection": True,
            },
            "proxies": {
                _NODE_ID: {
                    **_actor(f"SERVE_PROXY_ACTOR-{_NODE_ID}", "/serve/proxy_127.0.0.1.log"),
                    "status": "HEALTHY",
                }
            },
            "applications": {name: self._app_details(app, now) for name, app in self._apps.items()},
            "target_capacity": self._target_capacity,
            "target_groups": [],
            "controller_health_metrics": {},
            "restores_unset_config_options": True,
        }

    def _app_details(self, app: ServeApp, now: float) -> dict[str, Any]:
        status = app.status_at(now)
        script = app.script
        names = _deployment_names(app.config)
        listed = (
            status == "RUNNING"
            or (status == "DEPLOY_FAILED" and not script.import_failure)
            or (status == "DEPLOYING" and now >= app.deployed_mono + self._timings.deployments_after_seconds)
        )
        message = ""
        if status == "DEPLOY_FAILED" and script.import_failure:
            module = str(app.config.get("import_path", "")).replace(":", ".").rsplit(".", 1)[0]
            message = (
                f"Deploying app '{app.name}' failed with exception:\nTraceback (most recent call last):\n"
                f"ModuleNotFoundError: No module named '{module}'"
            )
        elif status == "DEPLOY_FAILED":
            message = f"Failed to update the deployments {names}."
        overrides = {str(d.get("name")): d for d in app.config.get("deployments") or [] if isinstance(d, Mapping)}
        return {
            "name": app.name,
            "route_prefix": None if status == "DEPLOY_FAILED" and script.import_failure else app.route_prefix,
            "docs_path": None,
            "status": status,
            "message": message,
            "last_deployed_time_s": app.deployed_wall,
            "deployed_app_config": app.config,
            "source": "declarative",
            "deployments": (
                {name: _deployment(name, status, overrides.get(name, {})) for name in names} if listed else {}
            ),
            "external_scaler_enabled": False,
            "deployment_topology": {
                "app_name": app.name,
                "nodes": {
                    name: {"name": name, "app_name": app.name, "outbound_deployments": [], "is_ingress": i == 0}
                    for i, name in enumerate(names)
                }
                if listed
                else {},
                "ingress_deployment": names[0] if listed else None,
            },
        }


def _actor(name: str, log_file: str) -> dict[str, Any]:
    return {
        "node_id": _NODE_ID,
        "node_ip": "127.0.0.1",
        "node_instance_id": "",
        "actor_id": f"kubesim-{name.lower()}",
        "actor_name": name,
        "worker_id": "kubesim-worker",
        "log_file_path": log_file,
    }


def _deployment(name: str, app_status: str, override: Mapping[str, Any]) -> dict[str, Any]:
    status, trigger, message = {
        "DEPLOYING": ("UPDATING", "CONFIG_UPDATE_STARTED", ""),
        "RUNNING": ("HEALTHY", "CONFIG_UPDATE_COMPLETED", ""),
        "DEPLOY_FAILED": (
            "DEPLOY_FAILED",
            "REPLICA_STARTUP_FAILED",
            "The deployment failed to start 3 times in a row. This may be due to a problem with its "
            "constructor or initial health check failing. See controller logs for details. "
            "kubesim: scripted failure (KUBESIM_DEPLOY_FAIL)",
        ),
    }[app_status]
    return {
        "name": name,
        "status": status,
        "status_trigger": trigger,
        "message": message,
        "deployment_config": dict(override or {"name": name}),
        "target_num_replicas": _replicas(override),
        "required_resources": {"CPU": 1},
        "replicas": [],
        "recent_dead_replicas": [],
    }
