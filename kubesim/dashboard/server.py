"""Serving one simulated Ray head on loopback ports: the dashboard, the dashboard agent and, while Serve
runs, the Serve proxy, each on a port of its own as on a real head.

Ports are chosen by the OS (port 0) so any number of simulated clusters coexist; the URLs are known once
:meth:`DashboardServer.start` returns (the Serve proxy's once Serve started). Stopping closes the listeners
and every open connection, which is what a client of a Ray head that died would see; a Serve shutdown
closes the Serve port, so its health check is refused as on a real head.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from kubesim.dashboard.app import DashboardState, Role, build_app
from schema.ray import conventions


class _Site:
    """One app on one loopback port."""

    def __init__(self, state: DashboardState, role: Role, host: str) -> None:
        self._state = state
        self._role = role
        self._host = host
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self.url: str | None = None

    async def start(self) -> str:
        async with self._lock:
            return await self._start()

    async def _start(self) -> str:
        if self._runner is None or self.url is None:
            # A short shutdown timeout: a dying head drops its connections instead of draining them.
            runner = web.AppRunner(
                build_app(self._state, self._role), access_log=None, handle_signals=False, shutdown_timeout=0.1
            )
            await runner.setup()
            site = web.TCPSite(runner, self._host, 0)
            await site.start()
            self._runner = runner
            self.url = f"http://{self._host}:{_bound_port(runner)}"
        return self.url

    async def stop(self) -> None:
        async with self._lock:
            runner, self._runner = self._runner, None
            self.url = None
            if runner is not None:
                await runner.cleanup()


class DashboardServer:
    """The aiohttp servers of one :class:`DashboardState`."""

    def __init__(self, state: DashboardState, *, host: str = "127.0.0.1") -> None:
        self.state = state
        self._dashboard = _Site(state, "dashboard", host)
        self._agent = _Site(state, "agent", host)
        self._serve = _Site(state, "serve", host)
        self._running = False
        self._generation = 0
        """Counts :meth:`stop` calls, so a start they overtook closes what it opened."""

    @property
    def url(self) -> str:
        """The dashboard's base URL (``http://127.0.0.1:PORT``).

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
        if container_port == conventions.DEFAULT_DASHBOARD_AGENT_PORT:
            return self._agent.url
        if container_port == conventions.DEFAULT_SERVE_PORT:
            return self._serve.url
        return self._dashboard.url

    async def start(self) -> str:
        """Listen on free loopback ports; return the dashboard's base URL.

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
                await self._agent.start()
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


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the dashboard server has no bound address")
