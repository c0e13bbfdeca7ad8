"""RayCluster scenarios driven through the real pipeline, whose histories ``raybus replay`` replays.

Used by ``tests/e2e/test_replay.py`` (live) and by ``record.py`` (which exports the golden files of this
folder). Each scenario returns the reconcile key it drove and leaves it deleted, so its history ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from schema.keys import ReconcileKey
from services.replay.history import KeyHistory
from services.replay.source import read_history
from services.runtime.settings import RaybusSettings
from tests.e2e.pipeline import Pipeline, load_yaml_docs
from tests.helpers import eventually, samples_dir

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
T = TypeVar("T")


async def until(probe: Callable[[], Awaitable[T | None]], *, timeout: float = 60, message: str) -> T:
    """``eventually`` for an async probe, typed: its result once truthy."""
    result: T | None = await eventually(probe, timeout=timeout, message=message)
    assert result is not None
    return result


def sample(file_name: str, *, name: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """The RayCluster of a KubeRay sample, optionally renamed."""
    body = next(d for d in load_yaml_docs(samples_dir() / file_name) if d.get("kind") == "RayCluster")
    body["metadata"]["namespace"] = namespace
    if name:
        body["metadata"]["name"] = name
    return body


class Driver:
    """Drives one RayCluster through the Kubernetes API (kubesim) and waits for its states."""

    def __init__(self, p: Pipeline, body: dict[str, Any]) -> None:
        self.p = p
        self.body = body
        self.name = str(body["metadata"]["name"])
        self.namespace = str(body["metadata"]["namespace"])
        self.key = ReconcileKey(kind="RayCluster", namespace=self.namespace, name=self.name)

    def _custom(self, method: str, *args: Any) -> Any:
        return getattr(self.p.custom(), method)(GROUP, VERSION, self.namespace, PLURAL, *args)

    async def call(self, method: str, *args: Any) -> Any:
        return await asyncio.to_thread(self._custom, method, *args)

    async def status(self) -> dict[str, Any]:
        obj = await self.call("get_namespaced_custom_object", self.name)
        return dict(obj.get("status") or {})

    async def pods(self) -> list[Any]:
        selector = f"ray.io/cluster={self.name}"
        found = await asyncio.to_thread(self.p.core().list_namespaced_pod, self.namespace, label_selector=selector)
        return list(found.items)

    async def create(self) -> None:
        await self.call("create_namespaced_custom_object", self.body)

    async def create_config_maps(self, file_name: str) -> None:
        """The ConfigMaps a sample ships beside its RayCluster (mounted by its pods)."""
        for doc in load_yaml_docs(samples_dir() / file_name):
            if doc.get("kind") == "ConfigMap":
                doc["metadata"]["namespace"] = self.namespace
                body: Any = doc  # the client accepts plain dicts
                await asyncio.to_thread(self.p.core().create_namespaced_config_map, self.namespace, body)

    async def patch(self, patch: dict[str, Any]) -> None:
        await self.call("patch_namespaced_custom_object", self.name, patch)

    async def scale(self, replicas: int) -> None:
        group = {**self.body["spec"]["workerGroupSpecs"][0], "replicas": replicas, "minReplicas": 0}
        await self.patch({"spec": {"workerGroupSpecs": [group]}})

    async def wait_ready(self, workers: int) -> None:
        async def probe() -> bool:
            self.p.check()
            pods = await self.pods()
            live = [x for x in pods if x.metadata.deletion_timestamp is None]
            worker_pods = [x for x in live if x.metadata.labels.get("ray.io/node-type") == "worker"]
            status = await self.status()
            return (
                status.get("state") == "ready"
                and len(worker_pods) == workers
                and len(live) == len(pods)
                and status.get("readyWorkerReplicas", 0) == workers
            )

        await until(probe, message=f"{self.key} never became ready with {workers} worker(s)")

    async def wait_suspended(self) -> None:
        async def probe() -> bool:
            self.p.check()
            return (await self.status()).get("state") == "suspended" and not await self.pods()

        await until(probe, message=f"{self.key} never became suspended")

    async def delete(self) -> None:
        await self.call("delete_namespaced_custom_object", self.name)

        async def gone() -> bool:
            self.p.check()
            services = await asyncio.to_thread(
                self.p.core().list_namespaced_service, self.namespace, label_selector=f"ray.io/cluster={self.name}"
            )
            return not await self.pods() and not services.items

        await until(gone, message=f"{self.key}'s children were not garbage-collected")


async def lifecycle(
    p: Pipeline, *, name: str = "replay-lifecycle", file_name: str = "ray-cluster.sample.yaml", scale_down: bool = True
) -> ReconcileKey:
    """Apply a sample, scale to 3, suspend, resume, scale to 1 (unless ``scale_down`` is off), delete.

    Run it in a pipeline started with :func:`without_withholding` (see there why).

    With in-tree autoscaling KubeRay never picks pods to remove itself (the autoscaler names them in
    ``workersToDelete``), so the autoscaler sample skips the scale-down.
    """
    cluster = Driver(p, sample(file_name, name=name))
    await cluster.create_config_maps(file_name)
    await cluster.create()
    await cluster.wait_ready(int(cluster.body["spec"]["workerGroupSpecs"][0].get("replicas", 0)))
    await cluster.scale(3)
    await cluster.wait_ready(3)
    await cluster.patch({"spec": {"suspend": True}})
    await cluster.wait_suspended()
    await cluster.patch({"spec": {"suspend": False}})
    await cluster.wait_ready(3)
    if scale_down:
        await cluster.scale(1)
        await cluster.wait_ready(1)
    await cluster.delete()
    return cluster.key


async def scaling(p: Pipeline, *, name: str = "replay-scaling") -> ReconcileKey:
    """Apply the sample, scale 1 → 4 → 2 → 0, delete (with the worker's in-flight withholding on)."""
    cluster = Driver(p, sample("ray-cluster.sample.yaml", name=name))
    await cluster.create()
    await cluster.wait_ready(1)
    for replicas in (4, 2, 0):
        await cluster.scale(replicas)
        await cluster.wait_ready(replicas)
    await cluster.delete()
    return cluster.key


def without_withholding(settings: RaybusSettings) -> RaybusSettings:
    """Pipeline settings with the worker's in-flight withholding off (``inflight_max_age=0``).

    TODO(issue 8): needed for suspend/resume only. With withholding on, a resumed cluster's worker
    Pods (same deterministic names and bodies as before the suspend) are withheld as "in flight"
    and the decision that withholds them asks for its next wake-up in 300 s, so the cluster stays
    without workers (`raybus replay` of such a run shows it: every step after the resume lists the
    creates as "withheld: in flight"). Drop this once the worker retries withheld commands sooner.
    """
    return dataclasses.replace(settings, partitions=dataclasses.replace(settings.partitions, inflight_max_age=0.0))


async def recreated(p: Pipeline, *, name: str = "replay-recreated") -> ReconcileKey:
    """The same name twice: create, delete, create again (a new uid), scale to 2, delete."""
    cluster = Driver(p, sample("ray-cluster.sample.yaml", name=name))
    await cluster.create()
    await cluster.wait_ready(1)
    await cluster.delete()
    await cluster.create()
    await cluster.wait_ready(1)
    await cluster.scale(2)
    await cluster.wait_ready(2)
    await cluster.delete()
    return cluster.key


async def settled_history(p: Pipeline, key: ReconcileKey, *, incarnations: int = 1) -> KeyHistory:
    """The key's history once every recorded input has been reconciled and the last owner is deleted."""
    nc = await p.nc()
    try:

        async def probe() -> KeyHistory | None:
            p.check()
            history = await read_history(nc, key)
            consumed = {seq for d in history.decisions for seq in d.batch.inputs}
            owner_events = [
                r.message
                for r in history.inputs
                if getattr(r.message, "entry_kind", "") == key.kind
                and r.message.object.get("metadata", {}).get("name") == key.name  # type: ignore[union-attr]
            ]
            uids = {e.object["metadata"].get("uid") for e in owner_events}  # type: ignore[union-attr]
            done = (
                bool(owner_events)
                and owner_events[-1].event_type == "DELETED"  # type: ignore[union-attr]
                and len(uids) == incarnations
                and all(r.seq in consumed for r in history.inputs)
            )
            return history if done else None

        return await until(probe, message=f"{key}'s history never settled")
    finally:
        await nc.close()
