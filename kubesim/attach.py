"""kubesim's node-side simulators attached to an API server over HTTP (``python -m kubesim attach``).

An :class:`Attachment` runs the controllers of :func:`kubesim.sims.build_simulation` (kubelet, batch Job
controller, EndpointSlices, Gateway status, Ray heads) on a :class:`~kubesim.remote.RemoteStore`, so an API
server without a scheduler or a kubelet (kubesim serving with ``--kubelet off``, or a real kube-apiserver)
gets its Pods bound, run and Ready, its Jobs completed and its Ray heads answering. The kubelet registers
its Node; the API server then leaves a deleted bound Pod terminating until the kubelet finishes it.

By default the simulated heads listen on loopback ports of this machine, which no API server proxies to:
the kubelet records them on each head Pod (annotation ``kubesim.raybus.io/head-urls``, see
:mod:`kubesim.sims.headurls`). With ``heads_on_pod_ips`` (the Pod network local to this machine, see
:mod:`kubesim.sims.podnetwork`) each head listens on its Pod's IP and the real ports instead, so a real
kube-apiserver's service and pod proxies reach it as they reach a real head.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from types import TracebackType

from kubesim.apiclient import ApiConnection
from kubesim.remote import RemoteStore
from kubesim.sims import Simulation, build_simulation
from kubesim.sims.options import KubeletMode, RayMode, SimOptions, options_for
from kubesim.sims.podnetwork import pod_network_problem

log = logging.getLogger(__name__)


class Attachment:
    """The simulators of one kubelet mode running against an API server; ``async with`` starts and stops them."""

    def __init__(
        self,
        connection: ApiConnection,
        *,
        kubelet: KubeletMode = "instant",
        ray: RayMode = "sim",
        options: SimOptions | None = None,
        heads_on_pod_ips: bool = False,
    ) -> None:
        """Build the simulators (nothing runs before :meth:`start`).

        Args:
            connection: the API server.
            kubelet: "instant" or "realistic" (see :mod:`kubesim.sims.options`).
            ray: "sim" (dashboard simulators) or "real" (real Ray heads).
            options: simulator settings (default: the kubelet mode's preset).
            heads_on_pod_ips: simulated heads listen on their Pod's IP (``SimOptions.heads_on_pod_ips``).

        Raises:
            ValueError: for kubelet mode "off" (nothing to attach), an unknown mode, or heads on Pod IPs
                where the Pod network is not local to this machine (the message says how to make it so).
        """
        if kubelet == "off":
            raise ValueError("kubelet mode 'off' attaches nothing (instant, realistic)")
        if heads_on_pod_ips and (problem := pod_network_problem()) is not None:
            raise ValueError(f"heads cannot listen on Pod IPs: {problem}")
        opts = replace(options or options_for(kubelet), publish_head_urls=True, heads_on_pod_ips=heads_on_pod_ips)
        self.store = RemoteStore(connection)
        self.simulation: Simulation = build_simulation(kubelet, options=opts, ray=ray)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self.errors: list[BaseException] = []
        """Exceptions that ended a simulator (each is also logged)."""
        self.failed = asyncio.Event()
        """Set when a simulator ended with an exception."""

    async def start(self) -> None:
        """Start every simulator as a task on the running loop."""
        for controller in self.simulation.controllers:
            task = asyncio.create_task(controller.run(self.store), name=f"kubesim-attach:{type(controller).__name__}")
            task.add_done_callback(self._done)
            self._tasks.append(task)

    def _done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.errors.append(error)
            self.failed.set()
            log.error("kubesim simulator %s crashed", task.get_name(), exc_info=error)

    async def stop(self) -> None:
        """Stop the simulators (their Ray heads included), then the watches and the connection (once)."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.store.close()

    async def __aenter__(self) -> Attachment:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
