"""Serving one simulated Ray head: the dashboard, the dashboard agent and, while Serve runs, the Serve proxy,
each on a port of its own as on a real head.

By default they listen on loopback ports chosen by the OS (port 0), so any number of simulated clusters
coexist; given an address of their own (a Pod IP local to this machine) they listen on the real head's
ports there instead. The URLs are known once :meth:`DashboardServer.start` returns (the Serve proxy's
once Serve started). The agent's port opens when
its URL is first asked for: nothing of raybus talks to the agent, and a listener per head that nobody uses
would put thousands of simulated clusters past the process's open-files limit. Stopping closes the listeners
and every open connection, which is what a client of a Ray head that died would see; a Serve shutdown
closes the Serve port, so its health check is refused as on a real head.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping

from aiohttp import web

from kubesim.dashboard.app import DashboardState, Role, build_app
from schema.ray import conventions

logger = logging.getLogger(__name__)


class _Site:
    """One app on one port (``0``: any free one) of one address.

    A site opens either at once (:meth:`start`) or on first use (:meth:`reserve`): the port is bound and
    listening before the method returns, so its URL can be handed out synchronously, and the server starts
    accepting in a task of its own; a client that connects meanwhile waits in the listen backlog.
    """

    def __init__(self, state: DashboardState, role: Role, host: str, port: int) -> None:
        self._state = state
        self._role = role
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self._reserved: socket.socket | None = None
        """A bound, listening socket no server accepts on yet."""
        self._opening: asyncio.Task[None] | None = None
        self.url: str | None = None

    async def start(self) -> str:
        async with self._lock:
            if self.url is None:
                self._reserve_socket()
            reserved = self._reserved
            if reserved is not None:
                await self._serve_on(reserved)
            assert self.url is not None
            return self.url

    def reserve(self) -> str:
        """The site's URL, listening from now on; the server behind it starts in the background."""
        if self.url is not None:
            return self.url
        reserved = self._reserve_socket()
        self._opening = asyncio.ensure_future(self._open(reserved))
        return self._url_of(reserved)

    def _reserve_socket(self) -> socket.socket:
        sock = socket.create_server((self._host, self._port))
        sock.setblocking(False)
        self._reserved = sock
        self.url = self._url_of(sock)
        return sock

    def _url_of(self, sock: socket.socket) -> str:
        return f"http://{self._host}:{sock.getsockname()[1]}"

    async def _open(self, sock: socket.socket) -> None:
        try:
            async with self._lock:
                if self._reserved is not sock:  # stopped (and the socket closed) before it could open
                    return
                await self._serve_on(sock)
        except BaseException as exc:
            # Nobody awaits this task: close the port, so clients are refused rather than left waiting, and
            # a task cancelled with its event loop leaves no socket behind.
            if self._reserved is sock:
                self._reserved, self.url = None, None
                sock.close()
            if not isinstance(exc, Exception):
                raise
            logger.exception("kubesim: the %s port of a simulated Ray head did not open", self._role)

    async def _serve_on(self, sock: socket.socket) -> None:
        # A short shutdown timeout: a dying head drops its connections instead of draining them.
        runner = web.AppRunner(
            build_app(self._state, self._role), access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        try:
            await runner.setup()
            await web.SockSite(runner, sock).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._reserved = runner, None

    async def stop(self) -> None:
        async with self._lock:
            runner, self._runner = self._runner, None
            reserved, self._reserved = self._reserved, None
            self.url = None
            if reserved is not None:
                reserved.close()
            if runner is not None:
                await runner.cleanup()


class DashboardServer:
    """The aiohttp servers of one :class:`DashboardState`."""

    def __init__(
        self, state: DashboardState, *, host: str = "127.0.0.1", ports: Mapping[Role, int] | None = None
    ) -> None:
        """Serve ``state`` on ``host``; ``ports`` fixes a role's port (the others take any free port)."""
        self.state = state
        fixed = ports or {}
        self._dashboard = _Site(state, "dashboard", host, fixed.get("dashboard", 0))
        self._agent = _Site(state, "agent", host, fixed.get("agent", 0))
        self._serve = _Site(state, "serve", host, fixed.get("serve", 0))
        self._agent_port = fixed.get("agent", conventions.DEFAULT_DASHBOARD_AGENT_PORT)
        self._serve_port = fixed.get("serve", conventions.DEFAULT_SERVE_PORT)
        """The container ports that lead to the agent and the Serve proxy (any other: the dashboard)."""
        self._running = False
        self._generation = 0
        """Counts :meth:`stop` calls, so a start they overtook closes what it opened."""

    @property
    def url(self) -> str:
        """The dashboard's base URL (``http://HOST:PORT``).

        Raises:
            RuntimeError: the server is not started.
        """
        if self._dashboard.url is None:
            raise RuntimeError("the dashboard server is not started")
        return self._dashboard.url

    @property
    def running(self) -> bool:
        """True between start and stop."""
        return self._running

    def url_for(self, container_port: int | None) -> str | None:
        """Base URL of a head container port: the agent's, the Serve proxy's (None while Serve does not run)
        or, for any other HTTP port, the dashboard's."""
        if not self._running:
            return None
        if container_port == self._agent_port:
            return self._agent.reserve()
        if container_port == self._serve_port:
            return self._serve.url
        return self._dashboard.url

    async def start(self) -> str:
        """Listen on the head's ports; return the dashboard's base URL.

        Raises:
            RuntimeError: :meth:`stop` ran while the listeners were opening (none is left open).
        """
        # The listeners open in a task of their own that a cancelled start lets finish and then closes:
        # asyncio's create_server cancelled at its last step leaves a listening socket nobody holds.
        starting = asyncio.ensure_future(self._start())
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            await asyncio.gather(starting, return_exceptions=True)
            await self._stop_sites()
            raise

    async def _start(self) -> str:
        if not self._running:
            generation = self._generation
            try:
                await self._dashboard.start()
                self.state.on_serve_change = self._serve_changed
                if self.state.serve.started:
                    await self._serve.start()
            except BaseException:
                await self._stop_sites()
                raise
            if generation != self._generation:
                await self._stop_sites()
                raise RuntimeError("the dashboard server was stopped while it started")
            self._running = True
        return self.url

    async def _serve_changed(self, started: bool) -> None:
        if not self._running:
            return
        if started:
            await self._serve.start()
        if not started or not self._running:  # also when the head stopped while Serve was starting
            await self._serve.stop()

    async def stop(self) -> None:
        """Close the listeners and the open connections (idempotent)."""
        self._generation += 1
        self._running = False
        await self._stop_sites()

    async def _stop_sites(self) -> None:
        self.state.on_serve_change = None
        for site in (self._serve, self._agent, self._dashboard):
            await site.stop()
