"""One pod's life on the simulated node: the kubelet's per-pod worker and the programs its containers run.

A :class:`PodWorker` walks the real kubelet's path and writes ``status`` (through the status subresource)
at each visible step: scheduled (a Binding to the node sets ``spec.nodeName`` and PodScheduled; podIP,
hostIP, startTime) → config check (a missing non-optional Secret/ConfigMap keeps it waiting, like
``CreateContainerConfigError``) → init containers in order (``wait-gcs-ready`` waits for its cluster's head
dashboard) → containers started → Ready after the readiness delay. Between steps it pauses only when a
delay is configured, so ``instant`` mode writes once.

What a container does once running is decided from the pod: a Ray job submitter command plays the
submitter (``submitter_run``; with real Ray heads its real command runs, ``realsubmit``), a container of a
batch Job pod exits 0 after a short run, the first container follows the failure annotations
(``annotations``), anything else runs until the pod goes.
Exits go through the restart policy (restartCount, lastState) and the pod phase follows.
A Ray head pod's dashboard is started just before the pod is reported Running and stopped when its Ray
container (``containers[0]``) dies; a restart brings a fresh one.

The worker is cancelled when its pod is deleted or starts terminating; it never handles deletion itself.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.dashboard import Clock
from kubesim.hooks import Store
from kubesim.sims.annotations import pod_faults
from kubesim.sims.dashboards import RayDashboards, cluster_key, is_head_pod
from kubesim.sims.envresolve import missing_volume, resolve_env
from kubesim.sims.headurls import REFRESH_SECONDS as HEAD_URLS_REFRESH
from kubesim.sims.headurls import head_urls, publish_head_urls
from kubesim.sims.objects import (
    BINDINGS,
    PODS,
    RETRY_SECONDS,
    api_error_code,
    controller_owner_uid,
    create_in,
    is_terminating,
    is_transient,
    name_of,
    namespace_of,
    spec_of,
    status_of,
    uid_of,
    update_in,
)
from kubesim.sims.options import SimOptions
from kubesim.sims.podmodel import ContainerSim, build_pod_sim
from kubesim.sims.podnetwork import claim, pod_ip
from kubesim.sims.realray import RealRayUnavailableError
from kubesim.sims.realsubmit import run_real_submitter
from kubesim.sims.submitter import parse_submitter
from kubesim.sims.submitter_run import run_submitter

logger = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class _PodGone(Exception):
    """The pod was deleted, replaced or marked terminating while its worker ran."""


class IpAllocator:
    """Unique pod IPs of the Pod network (``podnetwork``), never reused within one run.

    With ``claim`` (heads listen on Pod IPs) each IP is also held on this machine while its pod's worker
    runs (``podnetwork.claim``), so two simulators of one machine never give out the same address.
    """

    def __init__(self, *, claim: bool = False) -> None:
        self._next = 0
        self._used: set[str] = set()
        self._claim = claim
        self._claims: dict[str, socket.socket] = {}

    def reserve(self, ip: str) -> None:
        """Mark an IP found on an existing pod as taken."""
        self._used.add(ip)

    def allocate(self) -> str:
        """A fresh IP.

        Raises:
            ValueError: the Pod network has no address left.
        """
        while True:
            self._next += 1
            ip = pod_ip(self._next)
            if ip in self._used:
                continue
            self._used.add(ip)
            if not self._claim:
                return ip
            held = claim(ip)
            if held is not None:
                self._claims[ip] = held
                return ip

    def release(self, ip: str) -> None:
        """Let go of an IP's claim (its pod's life ended); the IP is not given out again."""
        held = self._claims.pop(ip, None)
        if held is not None:
            held.close()

    def release_all(self) -> None:
        """Let go of every claim (the kubelet stops)."""
        for ip in list(self._claims):
            self.release(ip)


@dataclass(frozen=True, kw_only=True)
class Node:
    """What every pod worker of the simulated node shares."""

    store: Store
    options: SimOptions
    clock: Clock
    dashboards: RayDashboards
    ips: IpAllocator
    worker_done: Callable[[str], None]
    """Called with a pod uid when its life ended (terminal phase)."""


class PodWorker:
    """Plays one pod's life; cancelled when the pod is deleted or starts terminating."""

    def __init__(self, node: Node, pod: Mapping[str, Any]) -> None:
        self.node = node
        self.options = node.options
        self.uid, self.namespace, self.name = uid_of(pod), namespace_of(pod), name_of(pod)
        self.head = is_head_pod(pod)
        self.sim = build_pod_sim(pod)
        self.wake = asyncio.Event()
        self.exits: list[tuple[int, int]] = []
        self.programs: dict[int, asyncio.Task[None]] = {}
        self.dashboard_up = False
        self.crash_looping = False
        self.unwritten = False
        """The last status write failed transiently (``objects.is_transient``): write again soon."""
        self.last_pod: Mapping[str, Any] = pod
        self.task = asyncio.ensure_future(self._run())

    def poke(self) -> None:
        """Something about the pod (or a Secret/ConfigMap) changed: re-evaluate."""
        self.wake.set()

    # --- store access ------------------------------------------------------------------------

    def _get(self) -> Mapping[str, Any]:
        # The stored Pod itself, read many times in a Pod's life: a copy of its 4 KB each time was the
        # largest single cost of a kubelet-heavy burst.
        pod = self.node.store.view(PODS, self.namespace, self.name)
        if pod is None or uid_of(pod) != self.uid or is_terminating(pod):
            raise _PodGone
        self.last_pod = pod
        return pod

    async def _write(self) -> None:
        pod = self._get()
        previous = status_of(pod)
        status = self.sim.render(now=self.node.clock.time(), previous=previous)
        if status == previous:
            return
        body = {"metadata": pod["metadata"], "status": status}
        try:
            await update_in(self.node.store, PODS, body, subresource="status")
        except Exception as error:
            if api_error_code(error) == 404:
                raise _PodGone from error
            if not is_transient(error):
                raise
            # The API server (reached over HTTP) did not take it: the next pass writes the state again.
            logger.warning("kubesim kubelet: status of pod %s/%s not written: %s", self.namespace, self.name, error)
            self.unwritten = True
            return
        self.unwritten = False

    async def _pause(self, delay: float) -> None:
        """Show the current state, then let ``delay`` seconds pass (nothing at all when 0)."""
        if delay > 0:
            await self._write()
            await asyncio.sleep(delay)

    async def _wait(self, timeout: float | None = None) -> bool:
        """Wait for a poke, a program exit or the timeout; True when woken before the timeout."""
        woken = True
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except TimeoutError:
            woken = False
        self.wake.clear()
        return woken

    # --- the life of a pod --------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._lifecycle()
            self.node.worker_done(self.uid)
        except _PodGone:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("kubesim kubelet: pod %s/%s failed", self.namespace, self.name)
        finally:
            await self._stop_programs()
            if self.dashboard_up:
                self.dashboard_up = False
                await self.node.dashboards.stop_for(self.last_pod)
            if self.sim.pod_ip:
                self.node.ips.release(self.sim.pod_ip)

    async def _stop_programs(self) -> None:
        programs = list(self.programs.values())
        self.programs.clear()
        for task in programs:
            task.cancel()
        await asyncio.gather(*programs, return_exceptions=True)

    async def _lifecycle(self) -> None:
        await self._schedule()
        await self._wait_for_config()
        await self._run_init_containers()
        await self._start_containers()
        await self._supervise()

    async def _schedule(self) -> None:
        pod = self._get()
        if not spec_of(pod).get("nodeName"):
            while pod_faults(pod).stay_pending:
                self.sim.unschedulable = (
                    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector "
                    "(kubesim.raybus.io/stay-pending)."
                )
                await self._write()
                await self._wait()
                pod = self._get()
            self.sim.unschedulable = None
            await asyncio.sleep(self.options.schedule_delay)
            pod = await self._bind()
        self.sim.scheduled = True
        self.sim.host_ip = self.options.host_ip
        self.sim.pod_ip = str(status_of(pod).get("podIP") or self.node.ips.allocate())
        self.sim.start_time = self.node.clock.time()
        for container in self.sim.containers:
            container.wait("PodInitializing" if self.sim.init_containers else "ContainerCreating")

    async def _bind(self) -> Mapping[str, Any]:
        """Bind the pod to the node (a Binding, as a scheduler does); returns the pod as last read."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.options.node_name},
        }
        while True:
            pod = self._get()
            if spec_of(pod).get("nodeName"):
                return pod  # bound meanwhile (what this worker read was older than the binding)
            try:
                await create_in(self.node.store, BINDINGS, binding)
                return pod
            except Exception as error:
                code = api_error_code(error)
                if code == 404:
                    raise _PodGone from error
                if code != 409 and not is_transient(error):
                    raise
            # 409: bound already, terminating, or replaced: look again once the pod's next event is in.
            await self._wait(timeout=RETRY_SECONDS)

    async def _wait_for_config(self) -> None:
        while True:
            pod = self._get()
            problem = self._config_problem(pod)
            if problem is None:
                break
            reason, message = problem
            for container in self.sim.containers:
                container.wait(reason, message)
            await self._write()
            await self._wait()
        for container in self.sim.containers:
            container.wait("PodInitializing" if self.sim.init_containers else "ContainerCreating")

    def _config_problem(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        store = self.node.store
        volume_error = missing_volume(store, pod)
        if volume_error is not None:
            return "ContainerCreating", volume_error
        spec = spec_of(pod)
        for raw in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            _, error = resolve_env(store, pod, container=raw)
            if error is not None:
                return "CreateContainerConfigError", error
        return None

    async def _run_init_containers(self) -> None:
        raws = spec_of(self.last_pod).get("initContainers") or []
        for container, raw in zip(self.sim.init_containers, raws, strict=False):
            await self._pause(self.options.image_pull_delay)
            container.start(self.node.clock.time())
            if container.sidecar:
                container.ready = True
                continue
            if self.options.wait_gcs_ready and _waits_for_gcs(raw):
                namespace, cluster = cluster_key(self.last_pod)
                while not self.node.dashboards.gcs_ready(namespace, cluster):
                    await self._write()
                    await self._wait(timeout=self.options.submitter_poll_interval * 4)
                    self._get()
            container.terminate(0, self.node.clock.time())

    async def _start_containers(self) -> None:
        for container in self.sim.containers:
            container.wait("ContainerCreating")
        await self._pause(self.options.image_pull_delay)
        pod = self._get()
        faults = pod_faults(pod)
        now = self.node.clock.time()
        for index, container in enumerate(self.sim.containers):
            if index == 0 and faults.crash_loop:
                self._crash(container, now)
                continue
            container.start(now)
            self._launch(index, pod)
        if self.head and self.sim.containers and self.sim.containers[0].state == "running":
            await self._start_dashboard(pod)
        ready_delay = faults.ready_after_seconds
        await self._pause(self.options.readiness_delay if ready_delay is None else ready_delay)
        self.sim.readiness_passed = True

    def _crash(self, container: ContainerSim, now: float) -> None:
        self.crash_looping = True
        container.start(now)
        container.terminate(1, now)
        container.restart_count += 1
        container.wait("CrashLoopBackOff", f"back-off 10s restarting failed container={container.name}")

    async def _start_dashboard(self, pod: Mapping[str, Any]) -> None:
        self.dashboard_up = True
        try:
            await self.node.dashboards.start_for(pod, pod_ip=self.sim.pod_ip)
        except (RealRayUnavailableError, OSError) as error:
            # A head that cannot start (a real one, or ports that cannot be bound) is a Ray container that
            # exits: the restart policy decides.
            logger.warning("kubesim kubelet: head pod %s/%s: %s", self.namespace, self.name, error)
            self.dashboard_up = False
            self.exits.append((0, 1))
            self.wake.set()

    async def _stop_dashboard(self) -> None:
        if self.dashboard_up:
            self.dashboard_up = False
            await self.node.dashboards.stop_for(self.last_pod)

    async def _supervise(self) -> None:
        while True:
            pod = self._get()
            faults = pod_faults(pod)
            if self.head:
                self.node.dashboards.refresh(pod)
                if self.options.publish_head_urls:
                    await publish_head_urls(self.node.store, pod, head_urls(self.node.dashboards, pod))
            await self._handle_exits(pod)
            if self.crash_looping and not faults.crash_loop and self.sim.containers:
                # The annotation was removed: the container starts for good.
                self.crash_looping = False
                self.sim.containers[0].start(self.node.clock.time())
                self._launch(0, pod)
                if self.head:
                    await self._start_dashboard(pod)
            for container in self.sim.containers:
                container.ready = container.state == "running" and self.sim.readiness_passed and not faults.never_ready
            await self._write()
            if self.sim.phase() in TERMINAL_PHASES:
                return
            woken = await self._wait(self._supervise_timeout())
            if self.crash_looping and not woken and self.sim.containers:
                self.sim.containers[0].restart_count += 1

    def _supervise_timeout(self) -> float | None:
        if self.unwritten:
            return RETRY_SECONDS
        if self.crash_looping:
            return self.options.crash_loop_interval
        if self.head and self.options.publish_head_urls:
            return HEAD_URLS_REFRESH  # Serve starts and stops without an event on the pod
        return None

    async def _handle_exits(self, pod: Mapping[str, Any]) -> None:
        exits, self.exits = self.exits, []
        for index, code in exits:
            container = self.sim.containers[index]
            self.programs.pop(index, None)
            container.terminate(code, self.node.clock.time())
            if index == 0 and self.head:
                await self._stop_dashboard()
            if not container.will_restart():
                continue
            await self._write()
            await asyncio.sleep(self.options.image_pull_delay)
            container.restart(self.node.clock.time())
            self._launch(index, pod)
            if index == 0 and self.head:
                await self._start_dashboard(pod)

    # --- container programs ------------------------------------------------------------------

    def _launch(self, index: int, pod: Mapping[str, Any]) -> None:
        program = self._program_for(index, pod)
        if program is None:
            return  # runs until the pod goes away

        async def run() -> None:
            code = await program
            self.exits.append((index, code))
            self.wake.set()

        self.programs[index] = asyncio.ensure_future(run())

    def _program_for(self, index: int, pod: Mapping[str, Any]) -> Coroutine[Any, Any, int] | None:
        raws = spec_of(pod).get("containers") or []
        if index >= len(raws):
            return None
        raw = raws[index]
        faults = pod_faults(pod)
        if index == 0 and faults.fail_after_seconds is not None:
            return _exit_after(faults.fail_after_seconds, faults.exit_code)
        env, _ = resolve_env(self.node.store, pod, container=raw)
        command = parse_submitter(
            [str(c) for c in raw.get("command") or []], [str(a) for a in raw.get("args") or []], env=env
        )
        if command is not None and self.node.dashboards.real_ray:
            real_dashboards = self.node.dashboards

            def resolve_real(host: str, port: int) -> str | None:
                return real_dashboards.resolve_address(self.last_pod, host=host, port=port)

            argv = [str(c) for c in raw.get("command") or []] + [str(a) for a in raw.get("args") or []]
            return run_real_submitter(
                argv, env=env, resolve=resolve_real, poll_interval=self.options.submitter_poll_interval
            )
        if command is not None:
            dashboards = self.node.dashboards

            def resolve() -> str | None:
                return dashboards.resolve_address(self.last_pod, host=command.host, port=command.port)

            return run_submitter(
                command,
                resolve=resolve,
                token=env.get("RAY_AUTH_TOKEN") or None,
                poll_interval=self.options.submitter_poll_interval,
            )
        if controller_owner_uid(pod, "Job") is not None:
            return _exit_after(self.options.batch_container_run_seconds, 0)
        return None


async def _exit_after(seconds: float, code: int) -> int:
    await asyncio.sleep(seconds)
    return code


def _waits_for_gcs(container: Mapping[str, Any]) -> bool:
    text = " ".join(str(part) for part in (container.get("command") or []) + (container.get("args") or []))
    return container.get("name") == "wait-gcs-ready" or "ray health-check" in text
