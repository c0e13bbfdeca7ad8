"""Ordered status writes with the real parts: the reconciler worker, the applier, kubesim, nats-server.

A status patch carries the resourceVersion its decision saw, so an older decision that reaches the API
server after a newer one is refused (409) and never overwrites it; and a refused write is no silent drop:
the worker that published it decides the key again from a fresh snapshot, even when no event follows.
Nor is a write withheld as the twin of one of the same version in flight, when that one changed nothing.
The test plays the watch side (it projects objects into KV and publishes their events itself) so that
it can lose an edge on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, ParamSpec, cast

import msgspec
import nats
from kubernetes import client
from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch, decode_input, decode_results, encode
from schema.config import OperatorConfig
from schema.decision import Decision, ReconcileFn, Snapshot
from schema.keys import ReconcileKey
from schema.messages import CONFLICT, LANDED, CommandBatch, ObjectRef, PatchStatus, TimerTick, WatchEvent
from services.edge.apply.applier import Applier
from services.edge.kubeapi import KubeApi, load_configuration
from services.reconciler.worker.service import run_reconciler
from services.runtime.bus import publish
from services.runtime.health import HealthServer
from services.runtime.leases import Membership
from services.runtime.settings import BusSettings, NatsSettings, PartitionSettings, RaybusSettings
from services.runtime.topology import ensure_topology
from tests.fixtures.kubesim import KubeSimHandle, kubesim_namespace, kubesim_server  # noqa: F401
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually, stored_messages

PARTITIONS = 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)
P = ParamSpec("P")


def settings(server: NatsServer) -> RaybusSettings:
    return RaybusSettings(
        nats=NatsSettings(url=server.url),
        bus=BusSettings(partitions=PARTITIONS, ack_wait=5.0, max_deliver=3),
        partitions=PartitionSettings(
            worker_id="w1", lease_ttl=3.0, renew_interval=0.5, exit_timeout=5.0, inflight_grace=0.5, resync_period=0
        ),
    )


def write_step(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Copy the RayCluster's ``step`` label into its status (``reason``, a field of the CRD's status schema),
    guarded by the version it saw."""
    owner = snapshot.owner()
    if owner is None:
        return Decision()
    metadata = owner["metadata"]
    step = metadata.get("labels", {}).get("step", "")
    if (owner.get("status") or {}).get("reason") == step:
        return Decision()
    target = ObjectRef(
        api_version="ray.io/v1", kind="RayCluster", namespace=metadata["namespace"], name=metadata["name"]
    )
    patch = PatchStatus(target=target, status={"reason": step}, resource_version=metadata["resourceVersion"])
    return Decision(commands=(patch,))


def write_step_and_pods(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
    """Write the step label and the number of the key's Pods into the status at every decision, as a
    status write that only carries transitions is sent even when nothing else changed."""
    owner = snapshot.owner()
    if owner is None:
        return Decision()
    metadata = owner["metadata"]
    reason = f"{metadata.get('labels', {}).get('step', '')}/{len(snapshot.entries.get('Pod', {}))}"
    target = ObjectRef(
        api_version="ray.io/v1", kind="RayCluster", namespace=metadata["namespace"], name=metadata["name"]
    )
    return Decision(
        commands=(PatchStatus(target=target, status={"reason": reason}, resource_version=metadata["resourceVersion"]),)
    )


def raycluster(name: str, step: str) -> dict[str, Any]:
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"step": step}},
        "spec": {"headGroupSpec": head},
    }


class Cluster:
    """One RayCluster on kubesim, through the official client."""

    def __init__(self, kube: KubeSimHandle, namespace: str, name: str) -> None:
        self._api = client.CustomObjectsApi(kube.api_client)
        self.namespace = namespace
        self.name = name

    async def _call(self, method: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """``method`` in a thread; the client declares an object, and a custom object comes back as its JSON."""
        return cast(dict[str, Any], await asyncio.to_thread(method, *args, **kwargs))

    async def create(self, step: str) -> dict[str, Any]:
        return await self._call(
            self._api.create_namespaced_custom_object,
            "ray.io",
            "v1",
            self.namespace,
            "rayclusters",
            raycluster(self.name, step),
        )

    async def label(self, step: str) -> dict[str, Any]:
        return await self._call(
            self._api.patch_namespaced_custom_object,
            "ray.io",
            "v1",
            self.namespace,
            "rayclusters",
            self.name,
            {"metadata": {"labels": {"step": step}}},
        )

    async def write_status(self, status: dict[str, Any]) -> dict[str, Any]:
        return await self._call(
            self._api.patch_namespaced_custom_object_status,
            "ray.io",
            "v1",
            self.namespace,
            "rayclusters",
            self.name,
            {"status": status},
        )

    async def get(self) -> dict[str, Any]:
        return await self._call(
            self._api.get_namespaced_custom_object, "ray.io", "v1", self.namespace, "rayclusters", self.name
        )


async def project(nc: Client, key: ReconcileKey, obj: dict[str, Any], *, event: bool, kind: str | None = None) -> int:
    """Write ``obj`` (the key's own resource, or an object of ``kind``) to its KV entry under the key, as
    the projection does; publish its event only with ``event`` (without it the edge is lost)."""
    kind = kind or key.kind
    kv = await nc.jetstream().key_value(subjects.OBJECTS_BUCKET)
    revision = await kv.put(subjects.entry_key(key, kind, obj["metadata"]["name"]), msgspec.json.encode(obj))
    if event:
        message = WatchEvent(
            key=key,
            event_type="MODIFIED",
            entry_kind=kind,
            object=obj,
            resource_version=obj["metadata"]["resourceVersion"],
            observed_at=T0,
            kv_revision=revision,
        )
        await nc.jetstream().publish(subjects.events_subject(key), encode(message))
    return revision


@contextlib.asynccontextmanager
async def stack(
    server: NatsServer, kube: KubeSimHandle, reconcile: ReconcileFn = write_step, *, grace: float = 0.5
) -> AsyncIterator[Client]:
    """nats topology, a reconciler worker running ``reconcile`` (its in-flight grace ``grace``) and an
    applier on kubesim."""
    nc = await nats.connect(server.url)
    config = settings(server)
    config = dataclasses.replace(config, partitions=dataclasses.replace(config.partitions, inflight_grace=grace))
    buckets = await ensure_topology(nc, bus=config.bus, partitions=config.partitions)
    api = KubeApi(load_configuration(str(kube.kubeconfig)), concurrency=4)
    stop = asyncio.Event()
    applier = Applier(
        nc,
        api,
        membership=Membership(nc, buckets.leases, "applier", PARTITIONS, config.partitions),
        concurrency=4,
    )
    tasks = [
        asyncio.create_task(applier.run(stop)),
        asyncio.create_task(
            run_reconciler(config, stop, HealthServer(host="127.0.0.1", port=0), reconcilers={"RayCluster": reconcile})
        ),
    ]
    try:
        yield nc
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        await api.close()
        await nc.close()


async def results(nc: Client, key: ReconcileKey) -> list[Any]:
    stored = await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM)
    return [r for m in stored for r in decode_results(m.data) if r.key == key]


async def test_a_refused_status_write_is_decided_again_from_a_fresh_snapshot_without_an_event(
    nats_server: NatsServer,
    kubesim_server: KubeSimHandle,  # noqa: F811
    kubesim_namespace: str,  # noqa: F811
) -> None:
    key = ReconcileKey(kind="RayCluster", namespace=kubesim_namespace, name="c1")
    cluster = Cluster(kubesim_server, kubesim_namespace, "c1")
    first = await cluster.create(step="1")
    current = await cluster.label(step="2")  # the server moved on; the watch has not shown it yet
    async with stack(nats_server, kubesim_server) as nc:
        await project(nc, key, first, event=True)  # decided on the older version: its write is refused

        async def refused() -> bool:
            return any(r.outcome == "dropped" and r.status_code == 409 for r in await results(nc, key))

        await eventually(refused, timeout=30, message="the stale status write refused with 409")
        await project(nc, key, current, event=False)  # the newer version reaches the KV; its event is lost

        async def written() -> dict[str, Any] | None:
            found = await cluster.get()
            return found if (found.get("status") or {}).get("reason") == "2" else None

        await eventually(written, timeout=60, message="the status written from the fresh snapshot")
        inputs = await stored_messages(nc.jetstream(), subjects.EVENTS_STREAM, subjects.stored_events_filter(key))
        ticks = [m for m in (decode_input(msg.data) for msg in inputs) if isinstance(m, TimerTick)]
        assert ticks and all(t.reason == CONFLICT for t in ticks)  # no event came: a conflict tick did it
        outcomes = [(r.outcome, r.status_code) for r in await results(nc, key)]
        assert outcomes[0] == ("dropped", 409) and outcomes[-1] == ("applied", 200)


async def test_an_older_status_decision_applied_after_a_newer_one_is_refused(
    nats_server: NatsServer,
    kubesim_server: KubeSimHandle,  # noqa: F811
    kubesim_namespace: str,  # noqa: F811
) -> None:
    """Two decisions of one key made on the same version: the newer reaches the API server first (the
    older was redelivered after its applier died), so the older one's write is refused and the newer one's
    status stays."""
    key = ReconcileKey(kind="RayCluster", namespace=kubesim_namespace, name="c2")
    cluster = Cluster(kubesim_server, kubesim_namespace, "c2")
    created = await cluster.create(step="1")
    version = created["metadata"]["resourceVersion"]
    target = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=kubesim_namespace, name="c2")

    def decision(batch_id: str, ready: int, revision: int) -> CommandBatch:
        patch = PatchStatus(
            id=f"{batch_id}-status", target=target, status={"readyWorkerReplicas": ready}, resource_version=version
        )
        return CommandBatch(id=batch_id, key=key, issued_at=T0, commands=(patch,), snapshot_revision=revision)

    async with stack(nats_server, kubesim_server) as nc:
        js = nc.jetstream()
        newer, older = decision("newer", ready=4, revision=20), decision("older", ready=2, revision=10)
        for batch in (newer, older):  # stream order: the newer first
            await publish(js, subjects.command_subject(key), encode(batch), msg_id=batch.id)

        async def both() -> dict[str, Any] | None:
            found = {r.batch_id: r for r in await results(nc, key)}
            return found if {"newer", "older"} <= found.keys() else None

        found = await eventually(both, timeout=30, message="both decisions applied or refused")
        assert (found["newer"].outcome, found["older"].outcome) == ("applied", "dropped")
        assert found["older"].status_code == 409
        status = (await cluster.get()).get("status") or {}
        assert status.get("readyWorkerReplicas") == 4


async def test_a_write_withheld_as_the_twin_of_one_that_changed_nothing_is_decided_again(
    nats_server: NatsServer,
    kubesim_server: KubeSimHandle,  # noqa: F811
    kubesim_namespace: str,  # noqa: F811
) -> None:
    """Two decisions on one version: the first writes what the status already holds, so the server keeps
    the version and sends no event; the second, decided while the first was in flight on a snapshot that
    holds more (a Pod), is withheld as its twin. Once the first is out of flight the key is decided again
    and the second's status is written, though no event came."""
    key = ReconcileKey(kind="RayCluster", namespace=kubesim_namespace, name="c3")
    cluster = Cluster(kubesim_server, kubesim_namespace, "c3")
    await cluster.create(step="1")
    current = await cluster.write_status({"reason": "1/0"})
    async with stack(nats_server, kubesim_server, write_step_and_pods, grace=5.0) as nc:
        js = nc.jetstream()
        await project(nc, key, current, event=True)

        async def decided() -> bool:
            return bool(await stored_messages(js, subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key)))

        await eventually(decided, timeout=30, message="the first decision published")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p1", "namespace": kubesim_namespace, "resourceVersion": "1"},
        }
        await project(nc, key, pod, event=True, kind="Pod")

        async def written() -> dict[str, Any] | None:
            found = await cluster.get()
            return found if (found.get("status") or {}).get("reason") == "1/1" else None

        found = await eventually(written, timeout=60, message="the withheld status written")
        assert found["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
        stored = await stored_messages(js, subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key))
        batches = [decode_batch(m.data) for m in stored]
        assert [(len(b.commands), len(b.suppressed)) for b in batches] == [(1, 0), (0, 1), (1, 0)]
        inputs = await stored_messages(js, subjects.EVENTS_STREAM, subjects.stored_events_filter(key))
        ticks = [m for m in (decode_input(msg.data) for msg in inputs) if isinstance(m, TimerTick)]
        assert [t.reason for t in ticks] == [LANDED]  # no event came: the look did it
