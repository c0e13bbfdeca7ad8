"""The aiohttp app of one simulated Ray head: dashboard, jobs and serve REST API, agent and proxy health.

Routes (all on one port; the kubesim proxies map every Ray HTTP port of the cluster here):

- dashboard: ``/api/version``, ``/api/gcs_healthz``, ``/api/jobs/`` (GET list, POST submit),
  ``/api/jobs/{id}`` (GET, DELETE), ``/api/jobs/{id}/stop``, ``/api/jobs/{id}/logs``,
  ``/api/serve/applications/`` (GET, PUT, DELETE);
- dashboard agent: ``/api/local_raylet_healthz``, ``/api/healthz``;
- serve proxy: ``/-/healthz``, ``/-/routes`` and the route prefixes of RUNNING applications.

Token auth (Ray ``RAY_AUTH_MODE=token``): with a token configured, every ``/api/`` request needs
``x-ray-authorization: Bearer <token>`` (``Authorization`` is accepted too) or gets 401. The serve proxy
paths are not covered: in Ray they are a separate server that token auth does not protect.

Error statuses follow Ray: 404 for an unknown job, 500 "... Please use a different submission_id" for a
reused id, 400 for malformed bodies. The state lives in :class:`DashboardState`, which tests may poke
directly (``serve_proxy_healthy``, ``gcs_healthy``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from kubesim.dashboard.clock import Clock, SystemClock
from kubesim.dashboard.jobs import (
    InvalidSubmissionError,
    JobExistsError,
    JobNotTerminalError,
    JobRecord,
    JobTable,
)
from kubesim.dashboard.serve import InvalidServeConfigError, ServeController

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(kw_only=True)
class DashboardState:
    """Everything one simulated Ray head knows."""

    jobs: JobTable
    serve: ServeController
    token: str | None = None
    """Required bearer token, or None for no auth."""
    ray_version: str = "2.52.0"
    gcs_healthy: bool = True
    """False: ``/api/gcs_healthz`` and the agent health answer 503."""
    serve_proxy_healthy: bool = True
    """False: ``/-/healthz`` answers 503 (set from the head pod's failure annotation)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Free-form identification (namespace, cluster, pod) for logs and tests."""


def new_state(
    *,
    clock: Clock | None = None,
    token: str | None = None,
    default_run_seconds: float = 0.2,
    serve_deploy_seconds: float = 0.2,
    ray_version: str = "2.52.0",
) -> DashboardState:
    """Build a fresh dashboard state (a new Ray head: no jobs, no serve apps)."""
    used_clock = clock or SystemClock()
    return DashboardState(
        jobs=JobTable(used_clock, default_run_seconds=default_run_seconds),
        serve=ServeController(used_clock, deploy_seconds=serve_deploy_seconds),
        token=token,
        ray_version=ray_version,
    )


STATE_KEY = web.AppKey("kubesim_dashboard_state", DashboardState)


def _state(request: web.Request) -> DashboardState:
    return request.app[STATE_KEY]


def _authorized(request: web.Request, token: str) -> bool:
    expected = f"Bearer {token}"
    return expected in (request.headers.get("x-ray-authorization"), request.headers.get("Authorization"))


@web.middleware
async def _auth_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    token = _state(request).token
    if token is not None and request.path.startswith("/api/") and not _authorized(request, token):
        return web.Response(status=401, text="Unauthorized: missing or invalid authentication token")
    return await handler(request)


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise web.HTTPBadRequest(text=f"invalid JSON body: {error}") from error


def _job_or_404(request: web.Request) -> JobRecord:
    job_id = request.match_info["job_id"]
    record = _state(request).jobs.get(job_id)
    if record is None:
        raise web.HTTPNotFound(text=f"Job {job_id} does not exist")
    return record


async def _version(request: web.Request) -> web.Response:
    state = _state(request)
    return web.json_response(
        {"version": "4", "ray_version": state.ray_version, "ray_commit": "kubesim", "session_name": "kubesim"}
    )


async def _health(request: web.Request) -> web.Response:
    if not _state(request).gcs_healthy:
        return web.Response(status=503, text="GCS is not healthy")
    return web.Response(text="success")


async def _list_jobs(request: web.Request) -> web.Response:
    return web.json_response(_state(request).jobs.list_details())


async def _submit_job(request: web.Request) -> web.Response:
    body = await _read_json(request)
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the request body must be a JSON object")
    try:
        record = _state(request).jobs.submit(body)
    except InvalidSubmissionError as error:
        raise web.HTTPBadRequest(text=str(error)) from error
    except JobExistsError as error:
        # Ray turns the ValueError into a 500 carrying the traceback text; KubeRay matches the text.
        text = f"Traceback (most recent call last):\nValueError: {error}"
        raise web.HTTPInternalServerError(text=text) from error
    return web.json_response({"job_id": record.submission_id, "submission_id": record.submission_id})


async def _get_job(request: web.Request) -> web.Response:
    record = _job_or_404(request)
    return web.json_response(_state(request).jobs.details(record))


async def _delete_job(request: web.Request) -> web.Response:
    record = _job_or_404(request)
    try:
        _state(request).jobs.delete(record)
    except JobNotTerminalError as error:
        raise web.HTTPBadRequest(text=str(error)) from error
    return web.json_response({"deleted": True})


async def _stop_job(request: web.Request) -> web.Response:
    record = _job_or_404(request)
    return web.json_response({"stopped": _state(request).jobs.stop(record)})


async def _job_logs(request: web.Request) -> web.Response:
    record = _job_or_404(request)
    return web.json_response({"logs": _state(request).jobs.logs(record)})


async def _get_serve(request: web.Request) -> web.Response:
    return web.json_response(_state(request).serve.details())


async def _put_serve(request: web.Request) -> web.Response:
    body = await _read_json(request)
    try:
        _state(request).serve.apply(body)
    except InvalidServeConfigError as error:
        raise web.HTTPBadRequest(text=str(error)) from error
    return web.Response(text="")


async def _delete_serve(request: web.Request) -> web.Response:
    _state(request).serve.delete_all()
    return web.Response(text="")


async def _proxy_health(request: web.Request) -> web.Response:
    if not _state(request).serve_proxy_healthy:
        return web.Response(status=503, text="This node is being drained.")
    return web.Response(text="success")


async def _proxy_routes(request: web.Request) -> web.Response:
    serve = _state(request).serve.details()
    return web.json_response(
        {app["route_prefix"]: name for name, app in serve["applications"].items() if app["route_prefix"]}
    )


async def _serve_route(request: web.Request) -> web.Response:
    app = _state(request).serve.app_for_path(request.path)
    if app is None:
        text = f"Path '{request.path}' not found. Ping http://.../-/routes for available routes."
        return web.Response(status=404, text=text)
    return web.Response(text=f"kubesim serve application {app.name}\n")


def build_app(state: DashboardState) -> web.Application:
    """Build the aiohttp application serving ``state``.

    Args:
        state: the simulated head's state (shared with whoever created it, e.g. tests or the registry).

    Returns:
        An application ready for an ``AppRunner`` or the aiohttp test client.
    """
    app = web.Application(middlewares=[_auth_middleware])
    app[STATE_KEY] = state
    app.router.add_get("/api/version", _version)
    app.router.add_get("/api/gcs_healthz", _health)
    app.router.add_get("/api/local_raylet_healthz", _health)
    app.router.add_get("/api/healthz", _health)
    for path in ("/api/jobs/", "/api/jobs"):
        app.router.add_get(path, _list_jobs)
        app.router.add_post(path, _submit_job)
    app.router.add_get("/api/jobs/{job_id}", _get_job)
    app.router.add_delete("/api/jobs/{job_id}", _delete_job)
    app.router.add_post("/api/jobs/{job_id}/stop", _stop_job)
    app.router.add_get("/api/jobs/{job_id}/logs", _job_logs)
    for path in ("/api/serve/applications/", "/api/serve/applications"):
        app.router.add_get(path, _get_serve)
        app.router.add_put(path, _put_serve)
        app.router.add_delete(path, _delete_serve)
    app.router.add_get("/-/healthz", _proxy_health)
    app.router.add_get("/-/routes", _proxy_routes)
    app.router.add_route("*", "/{tail:.*}", _serve_route)
    return app
