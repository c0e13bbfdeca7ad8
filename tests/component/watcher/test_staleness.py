"""Only decisions that still hold are applied: superseded batches and creates for deleted owners."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
from kubernetes import client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CreateObject, EmitEvent, ObjectRef, PatchStatus
from services.edge.apply.applier import Applier
from services.edge.apply.staleness import DecisionCheck
from services.edge.kubeapi import KubeApi
from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Change, Scope, make_change
from services.edge.watch.projection import Projection
from services.runtime.bus import publish
from tests.component.watcher.conftest import Bus, in_thread, partition_of, until
from tests.component.watcher.test_applier import results_of, running_applier, sa_ref
from tests.fixtures.kubesim import KubeSimHandle

NOW = datetime(2025, 1, 1, tzinfo=UTC)


async def send(bus: Bus, batch: CommandBatch) -> int:
    ack = await publish(bus.js, subjects.command_subject(batch.key), codec.encode(batch), msg_id=batch.id)
    return int(ack.seq)


def batch(
    key: ReconcileKey, batch_id: str, *commands: Any, suppressed: tuple[str, ...] = (), rev: int = 0
) -> CommandBatch:
    return CommandBatch(
        id=batch_id, key=key, issued_at=NOW, commands=tuple(commands), suppressed=suppressed, snapshot_revision=rev
    )


def service_accounts(kube: KubeSimHandle, ns: str) -> set[str]:
    names = set()
    for account in client.CoreV1Api(kube.api_client).list_namespaced_service_account(ns).items:
        assert account.metadata is not None and account.metadata.name is not None  # a stored object is named
        names.add(account.metadata.name)
    return names


async def test_a_superseded_batch_sends_only_what_the_newer_decision_still_wants(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="c")
    # The old decision creates x and y and patches a status at a resourceVersion; the newer one no longer
    # wants x, withheld y (in flight in the old batch), and creates z.
    guarded = PatchStatus(
        id="status", target=ObjectRef(api_version="v1", kind="ServiceAccount", namespace=ns, name="y"), status={}
    )
    guarded = msgspec.structs.replace(guarded, resource_version="1")
    old = batch(
        key,
        "old",
        CreateObject(id="x", target=sa_ref(ns, "x"), body={}),
        CreateObject(id="y", target=sa_ref(ns, "y"), body={}),
        guarded,
    )
    newer = batch(key, "newer", CreateObject(id="z", target=sa_ref(ns, "z"), body={}), suppressed=("y",))
    await send(bus, old)
    await send(bus, newer)
    async with running_applier(bus, kube_api):
        results = await results_of(bus, key, 4)
    outcomes = {(r["batch_id"], r["command_id"]): (r["outcome"], r["error"]) for r in results}
    assert outcomes[("old", "x")] == ("superseded", "superseded by the newer decision (command batch newer)")
    assert outcomes[("old", "y")][0] == "applied"
    assert outcomes[("old", "status")][0] != "superseded"  # a stale resourceVersion fails on its own
    assert outcomes[("newer", "z")][0] == "applied"
    names = await in_thread(service_accounts, kube, ns)
    assert {"y", "z"} <= names and "x" not in names


async def test_a_redelivered_batch_looks_up_the_latest_decision_of_its_key(bus: Bus, kubesim_namespace: str) -> None:
    key = ReconcileKey(kind="RayCluster", namespace=kubesim_namespace, name="redelivered")
    await send(bus, batch(key, "first", CreateObject(id="a", target=sa_ref(kubesim_namespace, "a"), body={})))
    sub = await bus.js.pull_subscribe_bind(
        durable=subjects.applier_consumer(partition_of(key)), stream=subjects.COMMANDS_STREAM
    )
    try:
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.nak()  # the watcher holding it died
        check = DecisionCheck(bus.js, None)
        first = codec.decode_batch(msg.data)
        (again,) = await sub.fetch(1, timeout=5)
        assert again.metadata.num_delivered == 2
        assert (await check.review(again, first, [])).stale(first.commands[0]) == ""  # still the latest
        await send(bus, batch(key, "second", suppressed=()))
        review = await check.review(again, first, [])
        assert review.stale(first.commands[0]).startswith("superseded by the newer decision")
        assert check.lookups == 2
        await again.ack()
    finally:
        await sub.unsubscribe()


def cluster_change(rv: int, *, type_: str = "MODIFIED", deleting: bool = False) -> Change:
    metadata: dict[str, Any] = {"name": "owner", "namespace": "ns", "uid": "u-owner", "resourceVersion": str(rv)}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        metadata["finalizers"] = ["ray.io/gcs-ft-redis-cleanup-finalizer"]
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata}
    resource = by_kind("RayCluster")
    assert resource is not None
    return make_change(resource, type_, msgspec.json.encode(obj))  # type: ignore[arg-type]


def owned_create(ns: str, name: str) -> CreateObject:
    ref = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "owner", "uid": "u-owner", "controller": True}
    return CreateObject(id=name, target=sa_ref(ns, name), body={"metadata": {"ownerReferences": [ref]}})


async def test_creates_for_an_owner_deleted_after_the_decision_are_never_sent(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    resource = by_kind("RayCluster")
    assert resource is not None
    scope = Scope(resource, "ns")
    projection = Projection(bus.js)
    await projection.project(Batch(scope, (cluster_change(1, type_="ADDED"),)))
    await projection.drain()
    owner_key = ReconcileKey(kind="RayCluster", namespace="ns", name="owner")
    before = max(e["kv_revision"] for e in await bus.events(owner_key))
    await projection.project(Batch(scope, (cluster_change(2, deleting=True),)))
    await projection.drain()
    deleting_at = max(e["kv_revision"] for e in await bus.events(owner_key))
    assert deleting_at > before

    key = ReconcileKey(kind="RayCluster", namespace=ns, name="owner")
    applier = Applier(bus.nc, kube_api, membership=bus.membership(), concurrency=2, owners=projection)
    stop = asyncio.Event()
    task = asyncio.create_task(applier.run(stop))
    try:
        # decided before the deletion showed: not sent; decided knowing it (KubeRay's Redis cleanup Job
        # of a deleting RayCluster): sent
        await send(bus, batch(key, "blind", owned_create(ns, "blind"), rev=before))
        await results_of(bus, key, 1)  # one at a time: a queued later batch would supersede the first
        await send(bus, batch(key, "aware", owned_create(ns, "aware"), rev=deleting_at))
        results = await results_of(bus, key, 2)
        assert [(r["command_id"], r["outcome"]) for r in results] == [("blind", "superseded"), ("aware", "applied")]
        assert "was deleted after the decision" in results[0]["error"]

        await projection.project(Batch(scope, (cluster_change(3, type_="DELETED", deleting=True),)))
        await projection.drain()
        await send(bus, batch(key, "after", owned_create(ns, "after"), rev=deleting_at + 100))
        results = await until(
            lambda: _enough(bus, key, 3), message="the create for a deleted owner has its result", timeout=20
        )
        assert (results[2]["command_id"], results[2]["outcome"]) == ("after", "superseded")
    finally:
        stop.set()
        await task


async def _enough(bus: Bus, key: ReconcileKey, count: int) -> list[dict[str, Any]] | None:
    found = await bus.results(key)
    return found if len(found) >= count else None


async def test_parts_of_one_decision_do_not_supersede_each_other(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """A decision in parts is applied whole, also when a newer decision exists (and never superseded by
    its own later parts)."""
    from schema.parts import part_msg_id, split_batch

    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="parts")
    old = batch(key, "old", *(CreateObject(id=f"o{i}", target=sa_ref(ns, f"o{i}"), body={}) for i in range(6)))
    newer = batch(key, "newer", CreateObject(id="n", target=sa_ref(ns, "n"), body={}), suppressed=("o5",))
    old_parts, newer_parts = split_batch(old, 700), split_batch(newer, 200)
    assert len(old_parts) > 2 and len(newer_parts) == 2 and newer_parts[0].suppressed == ("o5",)
    alone = ReconcileKey(kind="RayCluster", namespace=ns, name="alone")
    alone_parts = split_batch(msgspec.structs.replace(old, key=alone, id="alone"), 700)
    for part in [*old_parts, *newer_parts, *alone_parts]:
        await publish(bus.js, subjects.command_subject(part.key), codec.encode(part), msg_id=part_msg_id(part))
    async with running_applier(bus, kube_api):
        results = await results_of(bus, key, 7)
        alone_results = await results_of(bus, alone, 6)
    outcomes = {r["command_id"]: r["outcome"] for r in results}
    assert sorted(outcomes) == ["n", *(f"o{i}" for i in range(6))]
    assert set(outcomes.values()) <= {"applied", "already_done"}  # the other key creates the same names
    assert len({r["command_id"] for r in alone_results}) == 6
    assert {r["outcome"] for r in alone_results} <= {"applied", "already_done"}


def cluster_version(ns: str, name: str, rv: int) -> Change:
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "resourceVersion": str(rv)},
        "spec": {},
    }
    resource = by_kind("RayCluster")
    assert resource is not None
    return make_change(resource, "ADDED" if rv == 1 else "MODIFIED", msgspec.json.encode(obj))


async def two_versions(bus: Bus, key: ReconcileKey) -> tuple[Projection, list[int]]:
    """A projection that saw two versions of the RayCluster ``key``, and the KV revision of each."""
    resource = by_kind("RayCluster")
    assert resource is not None
    projection = Projection(bus.js)
    revisions = []
    for rv in (1, 2):
        await projection.project(Batch(Scope(resource, key.namespace), (cluster_version(key.namespace, key.name, rv),)))
        await projection.drain()
        revisions.append(max(e["kv_revision"] for e in await bus.events(key)))
    return projection, revisions


async def applier_of(
    bus: Bus, kube_api: KubeApi, projection: Projection, key: ReconcileKey
) -> tuple[Applier, JetStreamContext.PullSubscription]:
    """An applier on ``projection``'s facts, not running, and the key's partition's consumer to hand it
    batches from (as a running one would)."""
    applier = Applier(
        bus.nc, kube_api, membership=bus.membership(), facts=projection, owners=projection, applied=bus.buckets.applied
    )
    sub = await bus.js.pull_subscribe_bind(
        durable=subjects.applier_consumer(partition_of(key)), stream=subjects.COMMANDS_STREAM
    )
    return applier, sub


async def test_a_batch_that_comes_after_a_newer_decision_was_applied_is_superseded_not_denied(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """An applier stopped while it held a batch: the batch is delivered again, behind a newer decision of
    its key that the next applier applied first. No replay (the newer decision is on the stream), so no
    denial; the same bytes published again as the newest message are one."""
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="late")
    projection, revisions = await two_versions(bus, key)
    regarding = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=ns, name=key.name)

    # The old decision's status patch is guarded by a resourceVersion: a newer decision does not supersede
    # such a patch by itself (a stale one fails with Conflict), but one already applied does.
    status = PatchStatus(id="old", target=regarding, status={"state": "ready"}, resource_version="1")
    old = batch(key, "old", status, rev=revisions[0])
    event = EmitEvent(id="newer", regarding=regarding, event_type="Normal", reason="Created", message="m")
    newer = batch(key, "newer", event, rev=revisions[1])
    for sent in (old, newer):
        await send(bus, sent)
    applier, sub = await applier_of(bus, kube_api, projection, key)
    try:
        held, waiting = await fetched(sub, 2)
        await applier.apply_batch(waiting, newer)
        await waiting.ack()
        await held.nak()  # the applier that held it stopped
        (again,) = await fetched(sub, 1)
        assert again.metadata.num_delivered == 2
        await applier.apply_batch(again, old)
        await again.ack()
        decided = [r for r in await results_of(bus, key, 3) if r["batch_id"]]  # besides the lifecycle fact
        results = {r["batch_id"]: (r["outcome"], r["error"]) for r in decided}
        assert results == {
            "newer": ("applied", ""),
            "old": ("superseded", "superseded by the newer decision (command batch newer)"),
        }
        assert applier.denied == 0

        await publish(bus.js, subjects.command_subject(key), codec.encode(old), msg_id="old-again")
        (replayed,) = await fetched(sub, 1)
        await applier.apply_batch(replayed, old)
        await replayed.ack()
        third = (await results_of(bus, key, 4))[3]
        assert third["outcome"] == "denied" and "a replayed decision" in third["error"]
    finally:
        await sub.unsubscribe()


async def fetched(sub: JetStreamContext.PullSubscription, count: int) -> list[Msg]:
    """The next ``count`` messages of ``sub``, however many fetches they take."""
    messages: list[Msg] = []
    while len(messages) < count:
        messages.extend(await sub.fetch(count - len(messages), timeout=5))
    return messages


async def test_a_batch_refused_whole_does_not_make_an_earlier_decision_a_replay(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """A forged batch claims the newest revision and every command of it is refused; the reconciler's own
    decision, made on an earlier revision and delivered after it, is applied, not refused as a replay:
    a batch that changed nothing is no decision applied."""
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="forged")
    projection, revisions = await two_versions(bus, key)
    regarding = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=ns, name=key.name)
    elsewhere = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=ns, name="someone-else")
    forged = batch(key, "forged", PatchStatus(id="f", target=elsewhere, status={"state": "ready"}), rev=revisions[1])
    event = EmitEvent(id="e", regarding=regarding, event_type="Normal", reason="Created", message="m")
    own = batch(key, "own", event, rev=revisions[0])
    for sent in (forged, own):
        await send(bus, sent)
    applier, sub = await applier_of(bus, kube_api, projection, key)
    try:
        for msg, sent in zip(await fetched(sub, 2), (forged, own), strict=True):
            await applier.apply_batch(msg, sent)
            await msg.ack()
        decided = [r for r in await results_of(bus, key, 3) if r["batch_id"]]  # besides the lifecycle fact
        results = {r["batch_id"]: (r["outcome"], r["error"]) for r in decided}
        assert results["forged"][0] == "denied" and "may only target its own object" in results["forged"][1]
        assert results["own"] == ("applied", "")
    finally:
        await sub.unsubscribe()
