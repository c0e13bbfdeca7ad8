"""``/healthz``, ``/readyz`` and ``/metrics`` on a small aiohttp server per service.

Liveness means the process's loops are running; readiness means it is connected and doing its job
(each service registers its own readiness check). Neither endpoint reveals configuration.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from aiohttp import web

from services.runtime.clock import Monotonic
from services.runtime.listen import serve_app
from services.runtime.metrics import render_prometheus

ReadinessCheck = Callable[[], str | None]
"""Returns None when ready, else a short reason."""

STALL_AFTER: Final = 300.0
"""Seconds one unit of work (a fetched batch, a command batch) may take before its stage counts as
stuck: far above a slow API server's retries, far below "nobody noticed"."""


class Progress:
    """Whether a stage is moving: it is stuck while a unit of work has been running for longer than
    ``stall_after`` seconds. Idle is not stuck; a finished unit is forgotten."""

    def __init__(self, name: str, *, stall_after: float = STALL_AFTER, clock: Monotonic = time.monotonic):
        self._name = name
        self._stall_after = stall_after
        self._clock = clock
        self._running: dict[int, float] = {}
        self._tokens = itertools.count()

    @contextmanager
    def working(self) -> Iterator[None]:
        """Mark the enclosed block as one unit of work."""
        token = next(self._tokens)
        self._running[token] = self._clock()
        try:
            yield
        finally:
            del self._running[token]

    def stalled(self) -> str | None:
        """A :data:`ReadinessCheck`: None while moving or idle, else how long the oldest unit has run."""
        if not self._running:
            return None
        waited = self._clock() - min(self._running.values())
        if waited <= self._stall_after:
            return None
        return f"{self._name}: {len(self._running)} unit(s) of work running, the oldest for {waited:.0f}s"


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
        ports = [self._port]
        if self._metrics_port is not None and self._metrics_port != self._port:
            # Same app: /metrics is also answered there, so the probes' port needs no scrape access.
            ports.append(self._metrics_port)
        self._runner, bound = await serve_app(app, self._host, ports)
        self.port = bound[0]

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
