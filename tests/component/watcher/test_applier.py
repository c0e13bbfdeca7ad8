"""The applier against kubesim and a real nats-server: outcomes, idempotency, dead letters, results."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from kubernetes import client

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandBatch,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    ObjectRef,
    PatchObject,
    PatchStatus,
    Transition,
)
from services.edge.apply.applier import Applier
from services.edge.kubeapi import KubeApi
from services.runtime.backoff import Backoff
from services.runtime.bus import publish
from tests.component.watcher.conftest import (
    Bus,
    create_custom,
    create_pod,
    in_thread,
    partition_of,
    pod,
    raycluster,
    until,
)
from tests.fixtures.kubesim import KubeSimHandle

NOW = datetime(2025, 1, 1, tzinfo=UTC)


@contextlib.asynccontextmanager
async def running_applier(bus: Bus, api: KubeApi) -> AsyncIterator[Applier]:
    applier = Applier(
        bus.nc, api, membership=bus.membership(), concurrency=4, api_backoff=Backoff(base=0.01, cap=0.02, retries=2)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(applier.run(stop))
    try:
        yield applier
    finally:
        stop.set()
        await task


def sa_ref(ns: str, name: str) -> ObjectRef:
    return ObjectRef(api_version="v1", kind="ServiceAccount", namespace=ns, name=name)


async def send(bus: Bus, key: ReconcileKey, batch_id: str, commands: list[Command]) -> None:
    batch = CommandBatch(id=batch_id, key=key, issued_at=NOW, commands=tuple(commands))
    await publish(bus.js, subjects.command_subject(key), codec.encode(batch), msg_id=batch_id)


async def results_of(bus: Bus, key: ReconcileKey, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        found = await bus.results(key)
        return found if len(found) >= count else None

    return await until(enough, message=f"{count} results for {key}")


async def test_a_batch_of_commands_and_its_outcomes(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="c1")
    cluster = await in_thread(create_custom, kube.api_client, ns, "rayclusters", raycluster("c1"))
    stale_rv = cluster["metadata"]["resourceVersion"]
    await in_thread(
        lambda: client.CustomObjectsApi(kube.api_client).patch_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "c1", {"metadata": {"labels": {"bump": "1"}}}
        )
    )
    await in_thread(create_pod, kube.api_client, ns, pod("c1-head", "c1"))
    transition = Transition(
        kind="RayCluster", uid="u", namespace=ns, name="c1", field="state", from_value="", to_value="ready", at=NOW
    )
    cluster_ref = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=ns, name="c1")
    generated = {"metadata": {"name": "c1", "annotations": {"raybus.io/generate": "auth_token"}}}
    commands: list[Command] = [
        CreateObject(id="create", target=sa_ref(ns, "sa"), body={"metadata": {"name": "sa"}}),
        CreateObject(id="create-again", target=sa_ref(ns, "sa"), body={"metadata": {"name": "sa"}}),
        DeleteObject(id="delete-missing", target=sa_ref(ns, "nope"), propagation="Background"),
        PatchObject(
            id="stale-patch", target=cluster_ref, patch={"metadata": {"labels": {"x": "y"}}}, resource_version=stale_rv
        ),
        PatchStatus(
            id="stale-status",
            target=cluster_ref,
            status={"state": "ready"},
            resource_version=stale_rv,
            transitions=(transition,),
        ),
        PatchStatus(id="status", target=cluster_ref, status={"state": "ready"}, transitions=(transition,)),
        PatchObject(
            id="bad-patch",
            target=sa_ref(ns, "sa"),
            patch=[{"op": "remove", "path": "/metadata/nothing/here"}],
            patch_type="json",
        ),
        EmitEvent(id="event", regarding=cluster_ref, event_type="Normal", reason="Created", message="hello"),
        CreateObject(
            id="secret", target=ObjectRef(api_version="v1", kind="Secret", namespace=ns, name="c1"), body=generated
        ),
        DeleteCollection(id="pods", api_version="v1", kind="Pod", namespace=ns, label_selector="ray.io/cluster=c1"),
    ]
    async with running_applier(bus, kube_api):
        await send(bus, key, "batch-1", commands)
        results = await results_of(bus, key, len(commands))
        await send(
            bus,
            key,
            "batch-2",
            [EmitEvent(id="event", regarding=cluster_ref, event_type="Normal", reason="Created", message="hello")],
        )
        more = await results_of(bus, key, len(commands) + 1)

    outcomes = {r["command_id"]: r for r in results}
    assert [r["command_id"] for r in results] == [c.id for c in commands]
    assert {cid: r["outcome"] for cid, r in outcomes.items()} == {
        "create": "applied",
        "create-again": "already_done",
        "delete-missing": "already_done",
        "stale-patch": "dropped",
        "stale-status": "dropped",
        "status": "applied",
        "bad-patch": "failed",
        "event": "applied",
        "secret": "applied",
        "pods": "applied",
    }
    assert outcomes["create"]["resource_version"]
    assert outcomes["stale-patch"]["status_code"] == 409
    assert outcomes["stale-status"]["transitions"] == []
    assert outcomes["status"]["transitions"][0]["to_value"] == "ready"
    assert outcomes["bad-patch"]["status_code"] == 422
    assert "nothing" in outcomes["bad-patch"]["error"]
    assert all(r["batch_id"] == "batch-1" and r["batch_seq"] > 0 for r in results)
    assert all(r["verb"] for r in results)
    assert more[-1]["outcome"] == "already_done"  # the same Event name: AlreadyExists

    status = await in_thread(
        lambda: client.CustomObjectsApi(kube.api_client).get_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "c1"
        )
    )
    assert status["status"]["state"] == "ready"
    secret = await in_thread(lambda: client.CoreV1Api(kube.api_client).read_namespaced_secret("c1", ns))
    token = base64.b64decode(secret.data["auth_token"]).decode()
    assert len(base64.b64decode(token)) == 32
    assert token not in msgspec.json.encode(results).decode()
    pods = await in_thread(lambda: client.CoreV1Api(kube.api_client).list_namespaced_pod(ns))
    assert pods.items == []


async def test_garbage_goes_to_the_dead_letter_stream_and_the_next_batch_is_applied(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayJob", namespace=ns, name="rj")
    async with running_applier(bus, kube_api) as applier:
        await bus.js.publish(subjects.command_subject(key), b'{"type": "command_batch", "id": 3}')
        await send(bus, key, "good", [CreateObject(id="sa", target=sa_ref(ns, "after-garbage"), body={})])
        results = await results_of(bus, key, 1)
        assert results[0]["outcome"] == "applied"
        letters = await until(
            lambda: bus.messages(subjects.DEADLETTER_STREAM, subjects.deadletter_subject(subjects.COMMANDS_STREAM)),
            message="a dead letter",
        )
        assert applier.dead_letters == 1
    letter = codec.decode_deadletter(msgspec.json.encode(letters[0]))
    assert letter.stream == subjects.COMMANDS_STREAM
    assert letter.subject == subjects.stored_commands_filter(key).replace("*", str(partition_of(key)))
    assert "malformed command batch" in letter.error
    assert letter.payload == b'{"type": "command_batch", "id": 3}'
    info = await bus.js.consumer_info(subjects.COMMANDS_STREAM, subjects.applier_consumer(partition_of(key)))
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_a_batch_redelivered_too_often_is_dead_lettered(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayJob", namespace=ns, name="poison")
    await send(bus, key, "poison-1", [CreateObject(id="sa", target=sa_ref(ns, "never"), body={})])
    sub = await bus.js.pull_subscribe_bind(
        durable=subjects.applier_consumer(partition_of(key)), stream=subjects.COMMANDS_STREAM
    )
    for _ in range(2):  # two appliers died on it
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.nak()
    await sub.unsubscribe()
    applier = Applier(bus.nc, kube_api, membership=bus.membership(), concurrency=1, max_deliver=2)
    stop = asyncio.Event()
    task = asyncio.create_task(applier.run(stop))
    try:
        letters = await until(
            lambda: bus.messages(subjects.DEADLETTER_STREAM, subjects.deadletter_subject(subjects.COMMANDS_STREAM)),
            message="the poison batch dead-lettered",
        )
    finally:
        stop.set()
        await task
    assert "delivered 3 times" in letters[0]["error"]
    assert await bus.results(key) == []


class _BreaksOn(Applier):
    """An applier whose worker for the key named ``breaks`` fails outside the batch's guard: a fault of the
    applier's own code, which nothing of the batch can cause."""

    async def _may_apply(self, key: ReconcileKey) -> bool:
        if key.name == "breaks":
            raise RuntimeError("a fault in the key's worker")
        return await super()._may_apply(key)


async def test_a_key_worker_that_crashes_halts_the_applier(bus: Bus, kube_api: KubeApi, kubesim_namespace: str) -> None:
    """A crash of a key's worker is never silent: the applier stops taking batches, drains the others and
    raises with the crash as its cause; the batch stays unacknowledged, for the next holder of the
    partition."""
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayJob", namespace=ns, name="breaks")
    await send(bus, key, "breaks", [CreateObject(id="sa-breaks", target=sa_ref(ns, "breaks"), body={})])
    applier = _BreaksOn(bus.nc, kube_api, membership=bus.membership())
    with pytest.raises(RuntimeError, match="crashed") as raised:
        await applier.run(asyncio.Event())
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "a fault in the key's worker"
    assert applier.batches_applied == 0
    consumer = await bus.js.consumer_info(subjects.COMMANDS_STREAM, subjects.applier_consumer(partition_of(key)))
    assert consumer.num_ack_pending + consumer.num_pending == 1


async def test_a_full_applier_fetches_again_as_soon_as_a_batch_is_settled(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """With as many batches outstanding as its bound (four per API slot), no partition fetches more until
    one is settled; then the fetches go on, and every batch is applied."""
    ns = kubesim_namespace
    keys = [ReconcileKey(kind="RayJob", namespace=ns, name=f"full-{i}") for i in range(12)]
    for i, key in enumerate(keys):
        await send(bus, key, f"full-{i}", [CreateObject(id=f"sa-{i}", target=sa_ref(ns, f"full-{i}"), body={})])
    applier = Applier(bus.nc, kube_api, membership=bus.membership(), concurrency=1)
    stop = asyncio.Event()
    task = asyncio.create_task(applier.run(stop))
    try:
        for key in keys:
            results = await results_of(bus, key, 1)
            assert results[0]["outcome"] == "applied"

        async def all_settled() -> bool | None:
            return (applier.batches_applied == len(keys) and applier.busy == 0) or None

        await until(all_settled, message="every batch acknowledged")
    finally:
        stop.set()
        await task
