"""RayCluster scenarios driven through the real pipeline, whose histories ``raybus replay`` replays.

Used by ``tests/e2e/test_replay.py`` (live) and by ``record.py`` (which exports the golden files of this
folder). Each scenario returns the reconcile key it drove and leaves it deleted, so its history ends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from schema.keys import KeyKind, ReconcileKey
from schema.messages import unrecorded_when_unchanged
from services.replay.history import KeyHistory
from services.replay.source import read_history
from tests.e2e.pipeline import Pipeline, load_yaml_docs
from tests.helpers import eventually, samples_dir

GROUP, VERSION = "ray.io", "v1"
T = TypeVar("T")


async def until(probe: Callable[[], Awaitable[T | None]], *, timeout: float = 60, message: str) -> T:
    """``eventually`` for an async probe, typed: its result once truthy."""
    result: T | None = await eventually(probe, timeout=timeout, message=message)
    assert result is not None
    return result


PLURALS: dict[KeyKind, str] = {
    "RayCluster": "rayclusters",
    "RayJob": "rayjobs",
    "RayService": "rayservices",
    "RayCronJob": "raycronjobs",
}


def sample(
    file_name: str, *, name: str | None = None, namespace: str = "default", kind: KeyKind = "RayCluster"
) -> dict[str, Any]:
    """The custom resource of a KubeRay sample, optionally renamed."""
    body = next(d for d in load_yaml_docs(samples_dir() / file_name) if d.get("kind") == kind)
    body["metadata"]["namespace"] = namespace
    if name:
        body["metadata"]["name"] = name
    return body


class Driver:
    """Drives one custom resource through the Kubernetes API (kubesim) and waits for its states."""

    def __init__(self, p: Pipeline, body: dict[str, Any]) -> None:
        self.p = p
        self.body = body
        self.name = str(body["metadata"]["name"])
        self.namespace = str(body["metadata"]["namespace"])
        kind: KeyKind = body["kind"]
        self.key = ReconcileKey(kind=kind, namespace=self.namespace, name=self.name)
        self.plural = PLURALS[kind]

    def _custom(self, method: str, *args: Any) -> Any:
        return getattr(self.p.custom(), method)(GROUP, VERSION, self.namespace, self.plural, *args)

    async def call(self, method: str, *args: Any) -> Any:
        return await asyncio.to_thread(self._custom, method, *args)

    async def status(self) -> dict[str, Any]:
        obj = await self.call("get_namespaced_custom_object", self.name)
        return dict(obj.get("status") or {})

    async def pods_of_any(self) -> list[Any]:
        """Pods of every cluster labelled as originating from this custom resource."""
        found: Any = await asyncio.to_thread(self.p.core().list_namespaced_pod, self.namespace)
        return [x for x in found.items if self.name in (x.metadata.labels or {}).get("ray.io/cluster", "")]

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
        group = dict(self.body["spec"]["workerGroupSpecs"][0])
        group.update(replicas=replicas, minReplicas=0, maxReplicas=max(replicas, int(group.get("maxReplicas", 0))))
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

    async def wait_status(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> None:
        async def probe() -> bool:
            self.p.check()
            return predicate(await self.status())

        await until(probe, message=f"{self.key} never {what}")

    async def wait_gone(self) -> None:
        async def gone() -> bool:
            self.p.check()
            found: Any = await asyncio.to_thread(
                self.p.custom().list_namespaced_custom_object, GROUP, VERSION, self.namespace, self.plural
            )
            return all(item["metadata"]["name"] != self.name for item in found.get("items", []))

        await until(gone, message=f"{self.key} was never deleted")

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


async def rayjob(p: Pipeline, *, name: str = "replay-rayjob") -> ReconcileKey:
    """The RayJob sample: its cluster comes up, the job runs on the dashboard simulator and succeeds,
    then the RayJob is deleted (its cluster goes with it)."""
    job = Driver(p, sample("ray-job.sample.yaml", name=name, kind="RayJob"))
    await job.create_config_maps("ray-job.sample.yaml")
    await job.create()
    await job.wait_status(lambda s: s.get("jobDeploymentStatus") == "Complete", "completed")
    await job.call("delete_namespaced_custom_object", job.name)
    await job.wait_gone()
    return job.key


async def rayservice(p: Pipeline, *, name: str = "replay-rayservice") -> ReconcileKey:
    """The RayService sample until its cluster's head is up (the serve flow then waits for dashboard
    observations), then deleted."""
    service = Driver(p, sample("ray-service.sample.yaml", name=name, kind="RayService"))
    await service.create()
    await service.wait_status(
        lambda s: bool(s.get("pendingServiceStatus", {}).get("rayClusterName") or s.get("activeServiceStatus")),
        "named a cluster",
    )

    async def head_running() -> bool:
        pods = await service.pods_of_any()
        return any(x.metadata.labels.get("ray.io/node-type") == "head" and x.status.phase == "Running" for x in pods)

    await until(head_running, message=f"{service.key}'s cluster never got a running head")
    await service.call("delete_namespaced_custom_object", service.name)
    await service.wait_gone()
    return service.key


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
                and all(r.seq in consumed for r in history.inputs if not unrecorded_when_unchanged(r.message))
            )
            return history if done else None

        return await until(probe, message=f"{key}'s history never settled")
    finally:
        await nc.close()


_REPLAYED = re.compile(r"(\d+) decision\(s\): (\d+) match, 0 diverged")


def assert_every_decision_matched(out: str, history: KeyHistory) -> None:
    """The replay command's ``out`` says that every decision it replayed matched, and it replayed at least
    the decisions of ``history``: the key's children, deleted after it, can still bring its history
    decisions (on nothing left) between the settled read and the command's own."""
    found = _REPLAYED.search(out)
    assert found is not None, out
    replayed, matched = int(found[1]), int(found[2])
    assert replayed == matched >= len(history.decisions), out
