"""The aiohttp apps of one simulated Ray head: the dashboard (jobs and Serve REST API), the dashboard
agent's health and the Serve proxy, each on a port of its own as on a real head.

Routes:

- dashboard (8265): ``/api/version``, ``/api/gcs_healthz``, ``/api/jobs/`` (GET list, POST submit),
  ``/api/jobs/{id}`` (GET, DELETE), ``/api/jobs/{id}/stop``, ``/api/jobs/{id}/logs``,
  ``/api/serve/applications/`` (GET, PUT, DELETE); paths without the trailing slash are 404 as in Ray;
- dashboard agent (52365): ``/api/local_raylet_healthz``, ``/api/healthz``;
- Serve proxy (8000, listening only while Serve runs: from the first config PUT to a DELETE):
  ``/-/healthz``, ``/-/routes`` and the route prefixes of RUNNING applications.

Token auth (Ray ``RAY_AUTH_MODE=token``): with a token configured, every dashboard ``/api/`` request but
``/api/gcs_healthz`` needs ``x-ray-authorization: Bearer <token>`` (``Authorization`` is accepted too):
401 without one, 403 with a wrong one. The agent's health and the Serve proxy are not covered, as in Ray.

Error statuses follow Ray 2.60: 404 for an unknown job, 500 "... Please use a different submission_id" for
a reused id, 500 for a body that is not JSON, 400 (with Ray's ``TypeError`` text) for unknown fields or
non-string metadata values; an empty entrypoint is accepted. The state lives in :class:`DashboardState`,
which tests may poke directly (``serve_proxy_healthy``, ``gcs_healthy``). Latencies of a real head
(``first_submit_seconds``, ``first_put_seconds``) delay the answer when set.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

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
from kubesim.dashboard.timings import RayTimings

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
    first_submit_seconds: float = 0.0
    """Latency of the head's first job submission (a real head starts its job manager then)."""
    first_put_seconds: float = 0.0
    """Latency of a Serve config PUT that starts Serve (controller and proxy actors)."""
    on_serve_change: Callable[[bool], Awaitable[None]] | None = None
    """Called with ``serve.started`` after a PUT or DELETE (the server opens or closes the Serve port)."""


def new_state(
    *,
    clock: Clock | None = None,
    token: str | None = None,
    default_run_seconds: float = 0.2,
    serve_deploy_seconds: float = 0.2,
    ray_version: str = "2.52.0",
    timings: RayTimings | None = None,
) -> DashboardState:
    """Build a fresh dashboard state (a new Ray head: no jobs, no serve apps)."""
    used_clock = clock or SystemClock()
    times = timings or RayTimings()
    return DashboardState(
        jobs=JobTable(used_clock, default_run_seconds=default_run_seconds, timings=times),
        serve=ServeController(used_clock, deploy_seconds=serve_deploy_seconds, timings=times),
        token=token,
        ray_version=ray_version,
        first_submit_seconds=times.first_submit_seconds,
        first_put_seconds=times.first_put_seconds,
    )


STATE_KEY = web.AppKey("kubesim_dashboard_state", DashboardState)


def _state(request: web.Request) -> DashboardState:
    return request.app[STATE_KEY]


Role = Literal["dashboard", "agent", "serve"]
"""Which port of the head an app serves."""
_OPEN_PATHS = frozenset({"/api/gcs_healthz"})
"""Dashboard paths that answer without a token."""


def _presented_token(request: web.Request) -> str | None:
    for header in ("x-ray-authorization", "Authorization"):
        value = request.headers.get(header)
        if value is not None:
            return value.removeprefix("Bearer ").strip()
    return None


@web.middleware
async def _auth_middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
    token = _state(request).token
    if token is not None and request.path.startswith("/api/") and request.path not in _OPEN_PATHS:
        presented = _presented_token(request)
        if not presented:
            return web.Response(status=401, text="Unauthorized: Missing authentication token")
        if presented != token:
            return web.Response(status=403, text="Forbidden: Invalid authentication token")
    return await handler(request)


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        # Ray does not catch it: aiohttp's bare 500.
        raise web.HTTPInternalServerError(text="500 Internal Server Error\n\nServer got itself in trouble") from error


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
        raise web.HTTPBadRequest(text="TypeError: the request body must be a JSON object")
    state = _state(request)
    if state.first_submit_seconds > 0 and not state.jobs.any_submitted():
        await asyncio.sleep(state.first_submit_seconds)
    try:
        record = state.jobs.submit(body)
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
    state = _state(request)
    try:
        state.serve.validate(body)
    except InvalidServeConfigError as error:
        raise web.HTTPBadRequest(text=str(error)) from error
    if not state.serve.started:
        if state.first_put_seconds > 0:
            await asyncio.sleep(state.first_put_seconds)
        state.serve.start()
        await _serve_changed(state)
    state.serve.apply(body)
    return web.Response(text="")


async def _delete_serve(request: web.Request) -> web.Response:
    state = _state(request)
    state.serve.delete_all()
    await _serve_changed(state)
    return web.Response(text="")


async def _serve_changed(state: DashboardState) -> None:
    if state.on_serve_change is not None:
        await state.on_serve_change(state.serve.started)


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


def build_app(state: DashboardState, role: Role = "dashboard") -> web.Application:
    """Build the aiohttp application of one port of a head.

    Args:
        state: the simulated head's state (shared with whoever created it, e.g. tests or the registry).
        role: the dashboard, the dashboard agent or the Serve proxy.

    Returns:
        An application ready for an ``AppRunner`` or the aiohttp test client.
    """
    if role == "agent":
        agent = web.Application()
        agent[STATE_KEY] = state
        agent.router.add_get("/api/local_raylet_healthz", _health)
        agent.router.add_get("/api/healthz", _health)
        return agent
    if role == "serve":
        proxy = web.Application()
        proxy[STATE_KEY] = state
        proxy.router.add_get("/-/healthz", _proxy_health)
        proxy.router.add_get("/-/routes", _proxy_routes)
        proxy.router.add_route("*", "/{tail:.*}", _serve_route)
        return proxy
    app = web.Application(middlewares=[_auth_middleware])
    app[STATE_KEY] = state
    app.router.add_get("/api/version", _version)
    app.router.add_get("/api/gcs_healthz", _health)
    app.router.add_get("/api/jobs/", _list_jobs)
    app.router.add_post("/api/jobs/", _submit_job)
    app.router.add_get("/api/jobs/{job_id}", _get_job)
    app.router.add_delete("/api/jobs/{job_id}", _delete_job)
    app.router.add_post("/api/jobs/{job_id}/stop", _stop_job)
    app.router.add_get("/api/jobs/{job_id}/logs", _job_logs)
    app.router.add_get("/api/serve/applications/", _get_serve)
    app.router.add_put("/api/serve/applications/", _put_serve)
    app.router.add_delete("/api/serve/applications/", _delete_serve)
    return app
