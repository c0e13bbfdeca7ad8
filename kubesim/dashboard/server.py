"""Serving one simulated Ray head on a loopback port.

The port is chosen by the OS (port 0) so any number of simulated clusters coexist; ``url`` is known once
:meth:`DashboardServer.start` returns. Stopping closes the listener and every open connection, which is
what a client of a Ray head that died would see.
"""

from __future__ import annotations

from aiohttp import web

from kubesim.dashboard.app import DashboardState, build_app


class DashboardServer:
    """An aiohttp server for one :class:`DashboardState`."""

    def __init__(self, state: DashboardState, *, host: str = "127.0.0.1") -> None:
        self.state = state
        self._host = host
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Base URL (``http://127.0.0.1:PORT``).

        Raises:
            RuntimeError: the server is not started.
        """
        if self._url is None:
            raise RuntimeError("the dashboard server is not started")
        return self._url

    @property
    def running(self) -> bool:
        """True between start and stop."""
        return self._runner is not None

    async def start(self) -> str:
        """Listen on a free loopback port; return the base URL."""
        if self._runner is not None:
            return self.url
        # A short shutdown timeout: a dying head drops its connections instead of draining them.
        runner = web.AppRunner(build_app(self.state), access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, self._host, 0)
        await site.start()
        self._runner = runner
        port = _bound_port(runner)
        self._url = f"http://{self._host}:{port}"
        return self._url

    async def stop(self) -> None:
        """Close the listener and the open connections (idempotent)."""
        runner, self._runner = self._runner, None
        self._url = None
        if runner is not None:
            await runner.cleanup()


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the dashboard server has no bound address")
