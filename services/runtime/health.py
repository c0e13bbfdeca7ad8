"""``/healthz``, ``/readyz`` and ``/metrics`` on a small HTTP server per service.

Liveness means the process's loops are running; readiness means it is connected and doing its job
(each service registers its own readiness check). Neither endpoint reveals configuration.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from services.runtime.clock import Monotonic
from services.runtime.listen import start_cleanly
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
    """Serves the health and metrics endpoints until stopped.

    Plain HTTP/1.1 on asyncio's streams, one request per connection: three GET endpoints for the kubelet
    and a Prometheus scraper need no web framework, and the reconciler, which serves nothing else, then
    never loads aiohttp (about 12 MB resident).
    """

    def __init__(self, *, host: str, port: int, metrics_port: int | None = None) -> None:
        self._host = host
        self._port = port
        self._metrics_port = metrics_port
        self._checks: dict[str, ReadinessCheck] = {}
        self._alive = True
        self._servers: list[asyncio.Server] = []
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
        ports = [self._port]
        if self._metrics_port is not None and self._metrics_port != self._port:
            # The same endpoints: /metrics is also answered there, so the probes' port needs no scrape access.
            ports.append(self._metrics_port)
        self._servers = await start_cleanly(self._bind(ports), _close_servers)
        self.port = int(self._servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving."""
        await _close_servers(self._servers)
        self._servers = []

    async def _bind(self, ports: list[int]) -> list[asyncio.Server]:
        servers: list[asyncio.Server] = []
        try:
            for port in ports:
                servers.append(await asyncio.start_server(self._serve, self._host, port, limit=REQUEST_LIMIT))
        except BaseException:
            await _close_servers(servers)
            raise
        return servers

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, content_type, body = self._answer(head)
            writer.write(_response(status, content_type, b"" if head.startswith(b"HEAD ") else body, len(body)))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass  # a caller that went away, sent too much or too little: nothing to answer
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        """Status, content type and body for a request's head (its request line and headers)."""
        method, _, rest = head.partition(b"\r\n")[0].decode("latin-1").partition(" ")
        target, _, version = rest.partition(" ")
        if not version.startswith("HTTP/1."):
            return 400, TEXT, b"bad request"
        route = ROUTES.get(target.partition("?")[0])
        if route is None:
            return 404, TEXT, b"not found"
        if method not in ("GET", "HEAD"):
            return 405, TEXT, b"method not allowed"
        if route == "metrics":
            body, content_type = render_prometheus()
            return 200, content_type, body
        if route == "healthz":
            return (200, TEXT, b"ok") if self._alive else (500, TEXT, b"dead")
        failing = self.readiness()
        if failing:
            return 503, JSON, json.dumps({"ready": False, "checks": failing}).encode()
        return 200, JSON, json.dumps({"ready": True}).encode()


ROUTES: Final = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}
TEXT: Final = "text/plain; charset=utf-8"
JSON: Final = "application/json; charset=utf-8"
REQUEST_LIMIT: Final = 16 * 1024
"""Bytes a request's head may take: a probe's or a scraper's is a few hundred."""
REQUEST_TIMEOUT: Final = 10.0
"""Seconds a caller has to send its request's head; a probe's own timeout is shorter."""
REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _response(status: int, content_type: str, body: bytes, length: int) -> bytes:
    """The response's bytes; ``length`` is the body's, also when a HEAD request's answer leaves it out."""
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def _close_servers(servers: list[asyncio.Server]) -> None:
    for server in servers:
        server.close()
    for server in servers:
        await server.wait_closed()
