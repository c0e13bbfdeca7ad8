"""The kubelet simulator: registers the one simulated node (``node``), binds Pods to it and plays their lives
(see ``podworker``).

This module is the controller: it subscribes to the store, gives each live pod a
:class:`~kubesim.sims.podworker.PodWorker`, pokes the workers when their pod (or any Secret/ConfigMap)
changes, and handles deletion. ``instant`` mode does a pod's whole start in one status write;
``realistic`` pauses between steps (see ``options``).

Deletion: the API server marks a scheduled, unfinished pod terminating (deletionTimestamp): kubesim's core
when the kubelet runs in it (``handles_pod_termination``) or has registered the pod's node, a real
kube-apiserver always; the kubelet then cancels the pod's worker (its containers stop, a
head's dashboard goes away), reports it not ready, and after ``min(termination_delay, grace)`` finishes the
deletion with ``delete(grace_period_seconds=0)``. Deliberately not modelled: resources and capacity,
several nodes, probes (readiness is a delay or an annotation), image pull errors, ephemeral containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, cast

from kubesim.dashboard import Clock
from kubesim.hooks import Store, StoreEvent
from kubesim.sims.dashboards import RayDashboards, is_head_pod
from kubesim.sims.loop import consume
from kubesim.sims.node import heartbeat, register_node
from kubesim.sims.objects import (
    CONFIGMAPS,
    PODS,
    RETRY_SECONDS,
    SECRETS,
    api_error_code,
    is_terminating,
    is_transient,
    meta,
    name_of,
    namespace_of,
    spec_of,
    status_of,
    uid_of,
)
from kubesim.sims.options import SimOptions
from kubesim.sims.podworker import TERMINAL_PHASES, IpAllocator, Node, PodWorker

logger = logging.getLogger(__name__)


def finish_pod_deletion(store: Store, *, namespace: str, name: str) -> None:
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
        self._workers: dict[str, PodWorker] = {}
        self._node: Node | None = None
        self._finished: set[str] = set()
        self._terminating: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.ips = IpAllocator(claim=options.heads_on_pod_ips)

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
        node = await self._register(store)
        self.spawn(heartbeat(store, self.options, self.clock, node=node))
        for pod in store.list(PODS):
            ip = status_of(pod).get("podIP")
            if ip:
                self.ips.reserve(str(ip))
        try:
            await consume(store, self._on_event, initial=[PODS], changes=[SECRETS, CONFIGMAPS])
        finally:
            await self._shutdown(store)

    async def _register(self, store: Store) -> dict[str, Any]:
        """Register the node, waiting for an API server that does not answer yet."""
        while True:
            try:
                return register_node(store, self.options, self.clock)
            except Exception as error:
                if not is_transient(error):
                    raise
                logger.warning("kubesim kubelet: cannot register node %s yet: %s", self.options.node_name, error)
            await asyncio.sleep(RETRY_SECONDS)

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
        self.ips.release_all()

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
        elif uid not in self._finished and status_of(pod).get("phase") not in TERMINAL_PHASES:
            self._workers[uid] = PodWorker(self._node_context(), pod)

    def _retire(self, task: asyncio.Task[None]) -> None:
        """Cancel a pod's task and keep it until it has ended: shutdown waits for it, so a worker cancelled
        while it stops its head's dashboard is not cut off by the event loop closing."""
        task.cancel()
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _node_context(self) -> Node:
        if self._node is None:
            self._node = Node(
                store=self.store,
                options=self.options,
                clock=self.clock,
                dashboards=self.dashboards,
                ips=self.ips,
                worker_done=self.worker_done,
            )
        return self._node

    def worker_done(self, uid: str) -> None:
        """A worker's lifecycle ended (terminal phase): never start another one for this pod."""
        self._workers.pop(uid, None)
        self._finished.add(uid)

    def _forget(self, uid: str, pod: Mapping[str, Any]) -> None:
        worker = self._workers.pop(uid, None)
        if worker is not None:
            self._retire(worker.task)
        terminator = self._terminating.pop(uid, None)
        if terminator is not None:
            self._retire(terminator)
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
        while True:
            try:
                finish_pod_deletion(self.store, namespace=namespace, name=name)
                return
            except Exception as error:
                if not is_transient(error):
                    raise
                logger.warning("kubesim kubelet: cannot finish deleting pod %s/%s yet: %s", namespace, name, error)
            await asyncio.sleep(RETRY_SECONDS)

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
