"""The kubelet simulator: binds Pods to the one simulated node and plays their containers' lives.

Each live pod gets a worker task that walks the real kubelet's path and writes ``status`` (through the
status subresource) at each visible step: scheduled (``spec.nodeName``, PodScheduled, podIP/hostIP,
startTime) → config check (a missing non-optional Secret/ConfigMap keeps it waiting, like
``CreateContainerConfigError``) → init containers in order → containers started → Ready. ``instant`` mode
does it all in one write; ``realistic`` pauses between steps (see ``options``).

What a container does once running is decided from the pod: a Ray job submitter command plays the
submitter (``submitter_run``), a container of a batch Job pod exits 0 after a short run, the first
container follows the failure annotations (``annotations``), anything else runs until deleted. Exits go
through the restart policy (restartCount, lastState) and the pod phase follows (Succeeded / Failed).
A Ray head pod gets its dashboard simulator started just before it is reported Running, and stopped when
its Ray container dies or the pod goes.

Deletion: the core marks a scheduled pod terminating (deletionTimestamp) when the store's
``handles_pod_termination`` is on, which the kubelet turns on when it starts; the kubelet then stops the
pod's containers and, after ``min(termination_delay, grace)``, finishes the deletion with
``delete(grace_period_seconds=0)``. Deliberately not modelled: resources and capacity, multiple nodes,
probes (readiness is a delay or an annotation), image pull errors, ephemeral containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, cast

from kubesim.dashboard import Clock
from kubesim.hooks import Store, StoreEvent
from kubesim.sims.annotations import pod_faults
from kubesim.sims.dashboards import RayDashboards, cluster_key, is_head_pod
from kubesim.sims.envresolve import missing_volume, resolve_env
from kubesim.sims.loop import consume
from kubesim.sims.objects import (
    CONFIGMAPS,
    PODS,
    SECRETS,
    api_error_code,
    controller_owner_uid,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    spec_of,
    status_of,
    uid_of,
)
from kubesim.sims.options import SimOptions
from kubesim.sims.podmodel import ContainerSim, build_pod_sim
from kubesim.sims.submitter import parse_submitter
from kubesim.sims.submitter_run import run_submitter

logger = logging.getLogger(__name__)

_TERMINAL_PHASES = ("Succeeded", "Failed")


class _PodGone(Exception):
    """The pod was deleted or replaced while its worker ran."""


class IpAllocator:
    """Unique pod IPs in 10.244.0.0/16 (never reused within one run)."""

    def __init__(self) -> None:
        self._next = 0
        self._used: set[str] = set()

    def reserve(self, ip: str) -> None:
        """Mark an IP found on an existing pod as taken."""
        self._used.add(ip)

    def allocate(self) -> str:
        """A fresh IP."""
        while True:
            self._next += 1
            ip = f"10.244.{self._next // 250}.{self._next % 250 + 2}"
            if ip not in self._used:
                self._used.add(ip)
                return ip


async def finish_pod_deletion(store: Store, namespace: str, name: str) -> None:
    """Finish a terminating pod's deletion (the kubelet's ``grace_period_seconds=0`` delete)."""
    try:
        # The core's Store.delete takes the delete options as keywords; hooks.Store does not spell them yet.
        cast(Any, store).delete(PODS, namespace, name, grace_period_seconds=0)
    except TypeError:
        store.delete(PODS, namespace, name)
    except Exception as error:
        if api_error_code(error) != 404:
            raise


class Kubelet:
    """The kubelet simulator controller."""

    handles_pod_termination = True
    """Read by the server: with a kubelet, deleting a scheduled pod marks it terminating first."""

    def __init__(self, *, options: SimOptions, clock: Clock, dashboards: RayDashboards) -> None:
        self.options = options
        self.clock = clock
        self.dashboards = dashboards
        self._store: Store | None = None
        self._workers: dict[str, _PodWorker] = {}
        self._finished: set[str] = set()
        self._terminating: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.ips = IpAllocator()

    @property
    def store(self) -> Store:
        """The store (set by :meth:`run`).

        Raises:
            RuntimeError: before :meth:`run`.
        """
        if self._store is None:
            raise RuntimeError("the kubelet is not running")
        return self._store

    async def run(self, store: Store) -> None:
        """Run until cancelled."""
        self._store = store
        self.dashboards.attach(store)
        if hasattr(store, "handles_pod_termination"):
            # Tell the core a kubelet now finishes graceful pod deletion (else pods vanish at once).
            store.handles_pod_termination = True
        for pod in store.list(PODS):
            ip = status_of(pod).get("podIP")
            if ip:
                self.ips.reserve(str(ip))
        try:
            await consume(store, self._on_event, initial=[PODS])
        finally:
            await self._shutdown(store)

    async def _shutdown(self, store: Store) -> None:
        if hasattr(store, "handles_pod_termination"):
            store.handles_pod_termination = False
        tasks = [w.task for w in self._workers.values()] + list(self._terminating.values()) + list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._terminating.clear()
        await self.dashboards.stop_all()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a fire-and-forget coroutine that shutdown will cancel."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_event(self, event: StoreEvent) -> None:
        if event.gvr in (SECRETS, CONFIGMAPS):
            for each in self._workers.values():
                each.poke()
            return
        if event.gvr != PODS:
            return
        pod = event.object
        uid = uid_of(pod)
        if event.type == "DELETED":
            self._forget(uid, pod)
            return
        if is_terminating(pod):
            if uid not in self._terminating:
                self._terminating[uid] = asyncio.ensure_future(self._terminate(pod))
            return
        worker = self._workers.get(uid)
        if worker is not None:
            worker.poke()
        elif uid not in self._finished and status_of(pod).get("phase") not in _TERMINAL_PHASES:
            self._workers[uid] = _PodWorker(self, pod)

    def worker_done(self, uid: str) -> None:
        """A worker's lifecycle ended (terminal phase): never start another one for this pod."""
        self._workers.pop(uid, None)
        self._finished.add(uid)

    def _forget(self, uid: str, pod: Mapping[str, Any]) -> None:
        worker = self._workers.pop(uid, None)
        if worker is not None:
            worker.task.cancel()
        terminator = self._terminating.pop(uid, None)
        if terminator is not None:
            terminator.cancel()
        self._finished.discard(uid)
        if is_head_pod(pod):
            self.spawn(self.dashboards.stop_for(pod))

    async def _terminate(self, pod: Mapping[str, Any]) -> None:
        uid, namespace, name = uid_of(pod), namespace_of(pod), name_of(pod)
        worker = self._workers.pop(uid, None)
        if worker is not None:
            worker.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker.task
        if is_head_pod(pod):
            await self.dashboards.stop_for(pod)
        grace = meta(pod).get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec_of(pod).get("terminationGracePeriodSeconds", 30)
        delay = min(self.options.termination_delay, float(grace or 0))
        if delay > 0:
            self._mark_not_ready(namespace, name, uid)
            await asyncio.sleep(delay)
        await finish_pod_deletion(self.store, namespace, name)

    def _mark_not_ready(self, namespace: str, name: str, uid: str) -> None:
        pod = self.store.get(PODS, namespace, name)
        if pod is None or uid_of(pod) != uid:
            return
        status = status_of(pod)
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Ready", "ContainersReady") and condition.get("status") == "True":
                condition["status"] = "False"
        for container in status.get("containerStatuses") or []:
            container["ready"] = False
        pod["status"] = status
        with contextlib.suppress(Exception):
            self.store.update(PODS, pod, subresource="status")


class _PodWorker:
    """Plays one pod's life; cancelled when the pod is deleted or starts terminating."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.options = kubelet.options
        self.uid, self.namespace, self.name = uid_of(pod), namespace_of(pod), name_of(pod)
        self.head = is_head_pod(pod)
        self.sim = build_pod_sim(pod)
        self.wake = asyncio.Event()
        self.exits: list[tuple[int, int]] = []
        self.programs: dict[int, asyncio.Task[None]] = {}
        self.dashboard_up = False
        self.crash_looping = False
        self.last_pod: dict[str, Any] = pod
        self.task = asyncio.ensure_future(self._run())

    def poke(self) -> None:
        """Something about the pod (or a Secret/ConfigMap) changed: re-evaluate."""
        self.wake.set()

    # --- store access ------------------------------------------------------------------------

    def _get(self) -> dict[str, Any]:
        pod = self.kubelet.store.get(PODS, self.namespace, self.name)
        if pod is None or uid_of(pod) != self.uid or is_terminating(pod):
            raise _PodGone
        self.last_pod = pod
        return pod

    def _write(self) -> None:
        pod = self._get()
        previous = status_of(pod)
        status = self.sim.render(now=self.kubelet.clock.time(), previous=previous)
        if status == previous:
            return
        pod["status"] = status
        try:
            self.kubelet.store.update(PODS, pod, subresource="status")
        except Exception as error:
            if api_error_code(error) == 404:
                raise _PodGone from error
            raise

    async def _pause(self, delay: float) -> None:
        """Show the current state, then let ``delay`` seconds pass (nothing at all when 0)."""
        if delay > 0:
            self._write()
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
            self.kubelet.worker_done(self.uid)
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
                await self.kubelet.dashboards.stop_for(self.last_pod)

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
                self._write()
                await self._wait()
                pod = self._get()
            self.sim.unschedulable = None
            await asyncio.sleep(self.options.schedule_delay)
            pod = self._get()
            pod.setdefault("spec", {})["nodeName"] = self.options.node_name
            self.kubelet.store.update(PODS, pod)
        self.sim.scheduled = True
        self.sim.host_ip = self.options.host_ip
        self.sim.pod_ip = str(status_of(pod).get("podIP") or self.kubelet.ips.allocate())
        self.sim.start_time = self.kubelet.clock.time()
        for container in self.sim.containers:
            container.wait("PodInitializing" if self.sim.init_containers else "ContainerCreating")

    async def _wait_for_config(self) -> None:
        while True:
            pod = self._get()
            problem = self._config_problem(pod)
            if problem is None:
                break
            reason, message = problem
            for container in self.sim.containers:
                container.wait(reason, message)
            self._write()
            await self._wait()
        for container in self.sim.containers:
            container.wait("PodInitializing" if self.sim.init_containers else "ContainerCreating")

    def _config_problem(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        store = self.kubelet.store
        volume_error = missing_volume(store, pod)
        if volume_error is not None:
            return "ContainerCreating", volume_error
        spec = spec_of(pod)
        for raw in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            _, error = resolve_env(store, pod, raw)
            if error is not None:
                return "CreateContainerConfigError", error
        return None

    async def _run_init_containers(self) -> None:
        raws = spec_of(self.last_pod).get("initContainers") or []
        for container, raw in zip(self.sim.init_containers, raws, strict=False):
            await self._pause(self.options.image_pull_delay)
            container.start(self.kubelet.clock.time())
            if container.sidecar:
                container.ready = True
                continue
            if self.options.wait_gcs_ready and _waits_for_gcs(raw):
                namespace, cluster = cluster_key(self.last_pod)
                while not self.kubelet.dashboards.has_dashboard(namespace, cluster):
                    self._write()
                    await self._wait(timeout=self.options.submitter_poll_interval * 4)
                    self._get()
            container.terminate(0, self.kubelet.clock.time())

    async def _start_containers(self) -> None:
        for container in self.sim.containers:
            container.wait("ContainerCreating")
        await self._pause(self.options.image_pull_delay)
        pod = self._get()
        faults = pod_faults(pod)
        now = self.kubelet.clock.time()
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
        await self.kubelet.dashboards.start_for(pod)
        self.dashboard_up = True

    async def _stop_dashboard(self) -> None:
        if self.dashboard_up:
            self.dashboard_up = False
            await self.kubelet.dashboards.stop_for(self.last_pod)

    async def _supervise(self) -> None:
        while True:
            pod = self._get()
            faults = pod_faults(pod)
            if self.head:
                self.kubelet.dashboards.refresh(pod)
            await self._handle_exits(pod)
            if self.crash_looping and not faults.crash_loop and self.sim.containers:
                # The annotation was removed: the container starts for good.
                self.crash_looping = False
                self.sim.containers[0].start(self.kubelet.clock.time())
                self._launch(0, pod)
                if self.head:
                    await self._start_dashboard(pod)
            for container in self.sim.containers:
                container.ready = container.state == "running" and self.sim.readiness_passed and not faults.never_ready
            self._write()
            if self.sim.phase() in _TERMINAL_PHASES:
                return
            woken = await self._wait(self.options.crash_loop_interval if self.crash_looping else None)
            if self.crash_looping and not woken and self.sim.containers:
                self.sim.containers[0].restart_count += 1

    async def _handle_exits(self, pod: Mapping[str, Any]) -> None:
        exits, self.exits = self.exits, []
        for index, code in exits:
            container = self.sim.containers[index]
            self.programs.pop(index, None)
            container.terminate(code, self.kubelet.clock.time())
            if index == 0 and self.head:
                await self._stop_dashboard()
            if not container.will_restart():
                continue
            self._write()
            await asyncio.sleep(self.options.image_pull_delay)
            container.restart(self.kubelet.clock.time())
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
        env, _ = resolve_env(self.kubelet.store, pod, raw)
        command = parse_submitter(
            [str(c) for c in raw.get("command") or []], [str(a) for a in raw.get("args") or []], env
        )
        if command is not None:
            dashboards = self.kubelet.dashboards

            def resolve() -> str | None:
                return dashboards.resolve_address(self.last_pod, command.host, command.port)

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
