"""``/healthz``, ``/readyz`` and ``/metrics`` on a small aiohttp server per service.

Liveness means the process's loops are running; readiness means it is connected and doing its job
(each service registers its own readiness check). Neither endpoint reveals configuration.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from services.runtime.metrics import render_prometheus

ReadinessCheck = Callable[[], str | None]
"""Returns None when ready, else a short reason."""


class HealthServer:
    """Serves the health and metrics endpoints until stopped."""

    def __init__(self, *, host: str, port: int, metrics_port: int | None = None) -> None:
        self._host = host
        self._port = port
        self._metrics_port = metrics_port
        self._checks: dict[str, ReadinessCheck] = {}
        self._alive = True
        self._runner: web.AppRunner | None = None
        self.port = port

    def add_readiness(self, name: str, check: ReadinessCheck) -> None:
        """Register a readiness check."""
        self._checks[name] = check

    def readiness(self) -> dict[str, str]:
        """Failing checks by name; also failing ("starting") while no check is registered yet."""
        if not self._checks:
            return {"service": "starting"}
        return {name: reason for name, check in self._checks.items() if (reason := check()) is not None}

    def set_alive(self, alive: bool) -> None:
        """Mark the process dead (a crashed loop) so the kubelet restarts it."""
        self._alive = alive

    async def start(self) -> None:
        """Bind and serve."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        if self._metrics_port is not None and self._metrics_port != self._port:
            # Same app: /metrics is also answered here, so the probes' port needs no scrape access.
            await web.TCPSite(self._runner, self._host, self._metrics_port).start()

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok" if self._alive else "dead", status=200 if self._alive else 500)

    async def _readyz(self, _: web.Request) -> web.Response:
        failing = self.readiness()
        if failing:
            return web.json_response({"ready": False, "checks": failing}, status=503)
        return web.json_response({"ready": True})

    async def _metrics(self, _: web.Request) -> web.Response:
        body, content_type = render_prometheus()
        return web.Response(body=body, headers={"Content-Type": content_type})
