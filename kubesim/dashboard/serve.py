"""The simulated Ray Serve controller behind ``/api/serve/applications/``.

A PUT replaces the declarative config: new or changed applications go DEPLOYING and, after their deploy
delay, RUNNING (or DEPLOY_FAILED when scripted so, see ``rules``); unchanged ones keep their state; the
ones left out disappear. Like jobs, statuses are computed from the clock on read.

The GET body follows Ray's ``ServeInstanceDetails`` (``controller_info``, ``proxy_location``,
``http_options``, ``proxies``, ``deploy_mode``, ``applications``, ``target_capacity``), with each
application's ``deployments`` map. It deliberately does not model replicas, autoscaling or traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.dashboard.clock import Clock
from kubesim.dashboard.rules import ServeAppScript, parse_serve_app_script


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

    def status_at(self, now: float) -> str:
        """Ray's ApplicationStatus at monotonic time ``now``."""
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

    def __init__(self, clock: Clock, *, deploy_seconds: float = 0.2) -> None:
        self._clock = clock
        self._deploy_seconds = deploy_seconds
        self._apps: dict[str, ServeApp] = {}
        self._target_capacity: float | None = None
        self.started = False
        """True once a config was PUT (Serve is running on the cluster)."""

    def apply(self, config: Any) -> None:
        """Replace the declarative config with a PUT body.

        Raises:
            InvalidServeConfigError: the body is malformed.
        """
        apps = _validate(config)
        capacity = config.get("target_capacity")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int | float)):
            raise InvalidServeConfigError("target_capacity must be a number")
        self._target_capacity = None if capacity is None else float(capacity)
        now, wall = self._clock.monotonic(), self._clock.time()
        current: dict[str, ServeApp] = {}
        for app in apps:
            name = str(app["name"])
            previous = self._apps.get(name)
            if previous is not None and previous.config == app:
                current[name] = previous
                continue
            current[name] = ServeApp(
                name=name,
                config=app,
                script=parse_serve_app_script(app, default_deploy_seconds=self._deploy_seconds),
                deployed_mono=now,
                deployed_wall=wall,
            )
        self._apps = current
        self.started = True

    def delete_all(self) -> None:
        """``DELETE /api/serve/applications/``: shut every application down."""
        self._apps = {}

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
        now = self._clock.monotonic()
        return {
            "controller_info": {
                "node_id": "kubesim-head-node",
                "node_ip": "127.0.0.1",
                "actor_id": "kubesim-serve-controller",
                "actor_name": "SERVE_CONTROLLER_ACTOR",
                "worker_id": "kubesim-worker",
                "log_file_path": "/serve/controller.log",
            },
            "proxy_location": "EveryNode",
            "http_options": {
                "host": "0.0.0.0",
                "port": 8000,
                "root_path": "",
                "request_timeout_s": None,
                "keep_alive_timeout_s": 5,
            },
            "grpc_options": {"port": 9000, "grpc_servicer_functions": [], "request_timeout_s": None},
            "proxies": {"kubesim-head-node": "HEALTHY"} if self.started else {},
            "deploy_mode": "MULTI_APP",
            "applications": {name: self._app_details(app, now) for name, app in self._apps.items()},
            "target_capacity": self._target_capacity,
        }

    def _app_details(self, app: ServeApp, now: float) -> dict[str, Any]:
        status = app.status_at(now)
        deployment_status, trigger, message = {
            "DEPLOYING": ("UPDATING", "CONFIG_UPDATE_STARTED", ""),
            "RUNNING": ("HEALTHY", "CONFIG_UPDATE_COMPLETED", ""),
            "DEPLOY_FAILED": (
                "DEPLOY_FAILED",
                "REPLICA_STARTUP_FAILED",
                "kubesim: scripted deploy failure (kubesim-deploy-fail marker)",
            ),
        }[status]
        app_message = (
            f"Deploying app '{app.name}' failed with exception:\n{message}" if status == "DEPLOY_FAILED" else ""
        )
        overrides = {str(d.get("name")): d for d in app.config.get("deployments") or [] if isinstance(d, Mapping)}
        return {
            "name": app.name,
            "route_prefix": app.route_prefix,
            "docs_path": None,
            "status": status,
            "message": app_message,
            "last_deployed_time_s": app.deployed_wall,
            "deployed_app_config": app.config,
            "source": "declarative",
            "deployments": {
                name: {
                    "name": name,
                    "status": deployment_status,
                    "status_trigger": trigger,
                    "message": message,
                    "deployment_config": dict(overrides.get(name, {"name": name})),
                    "target_num_replicas": _replicas(overrides.get(name, {})),
                    "required_resources": {"CPU": 1},
                    "replicas": [],
                }
                for name in _deployment_names(app.config)
            },
        }
