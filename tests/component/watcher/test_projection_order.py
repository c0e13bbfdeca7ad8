"""Per-entry write order of the projection on a real nats-server (no kubesim needed)."""

from __future__ import annotations

from typing import Any

import msgspec

from schema import subjects
from schema.keys import ReconcileKey
from schema.ray.conventions import LABEL_CLUSTER
from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Change, Scope
from services.edge.watch.projection import Projection
from tests.component.watcher.conftest import Bus
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually


def _version(rv: int, *, type_: str = "MODIFIED", kind: str = "RayCluster") -> Change:
    name = "c" if kind == "RayCluster" else "c-worker-a"
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(rv)}
    if kind == "Pod":
        metadata["labels"] = {LABEL_CLUSTER: "c"}
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1" if kind == "RayCluster" else "v1",
        "kind": kind,
        "metadata": metadata,
        "status": {"step": rv},
    }
    return Change(
        type=type_,  # type: ignore[arg-type]
        obj=obj,
        raw=msgspec.json.encode(obj),
        uid=metadata["uid"],
        resource_version=str(rv),
        namespace="ns",
        name=name,
    )


async def test_later_versions_of_an_entry_always_win(bus: Bus) -> None:
    resource = by_kind("RayCluster")
    assert resource is not None
    projection = Projection(bus.js)
    # The first version plans two writes (the entry and the "created" fact), the next ones one each:
    # the single writes must not overtake the first one.
    versions = [_version(1, type_="ADDED"), *(_version(rv) for rv in range(2, 40))]
    await projection.project(Batch(Scope(resource, "ns"), tuple(versions)))
    await projection.drain()
    key = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
    entry = await bus.entry(key, "RayCluster", "c")
    assert entry is not None and entry["status"] == {"step": 39}
    events = await bus.events(key)
    revisions = [e["kv_revision"] for e in events]
    assert revisions == sorted(revisions)
    assert [e["resource_version"] for e in events] == [str(rv) for rv in range(1, 40)]


async def test_a_version_replayed_after_a_bus_restart_never_overwrites_a_newer_one(
    nats_server: NatsServer, bus: Bus
) -> None:
    """A watcher that resumes from a resume point older than its last writes replays versions the KV
    already holds. A restarted nats-server de-duplicates by the ids of the messages it still stores: the
    entry's older version, replaced in a one-version bucket, is stored again, and the newer one's rewrite
    is acknowledged as a duplicate of the message the older one just replaced. The newer version must
    still end in KV, with an event that carries its new revision."""
    resource = by_kind("RayCluster")
    assert resource is not None
    scope = Scope(resource, "ns")
    key = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
    first = Projection(bus.js)
    await first.project(Batch(scope, (_version(1, type_="ADDED"), _version(2))))
    await first.drain()
    nats_server.kill()
    nats_server.start()
    await eventually(bus.js.account_info, message="JetStream answers again after the restart")
    replaying = Projection(bus.js)  # a restarted watcher: it holds nothing, its resume point is older
    await replaying.project(Batch(scope, (_version(1, type_="ADDED"), _version(2))))
    await replaying.drain()
    entry = await bus.entry(key, "RayCluster", "c")
    assert entry is not None and entry["status"] == {"step": 2}
    stored = await bus.buckets.objects.get(subjects.entry_key(key, "RayCluster", "c"))
    events = await bus.events(key)
    assert events[-1]["resource_version"] == "2" and events[-1]["kv_revision"] == stored.revision


async def test_a_replica_behind_writes_nothing_over_a_newer_version(bus: Bus) -> None:
    """A replica that projects an older version after another stored a newer one (both follow the same
    watch) is acknowledged as a duplicate and leaves the newer version in place, with no event."""
    resource = by_kind("RayCluster")
    assert resource is not None
    scope = Scope(resource, "ns")
    key = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
    ahead, behind = Projection(bus.js), Projection(bus.js)
    await ahead.project(Batch(scope, (_version(1, type_="ADDED"), _version(2))))
    await ahead.drain()
    await behind.project(Batch(scope, (_version(1, type_="ADDED"),)))
    await behind.drain()
    entry = await bus.entry(key, "RayCluster", "c")
    assert entry is not None and entry["status"] == {"step": 2}
    assert [e["resource_version"] for e in await bus.events(key)] == ["1", "2"]
    assert behind.repairs == 0


async def test_versions_of_a_pod_queued_together_are_written_as_the_latest(bus: Bus) -> None:
    """A Pod's creation, binding and start in one batch (a watch behind the API server) make one write and
    one event, of the latest version, still an ADDED; a deletion is never folded, and a replica projecting
    the same batch again writes nothing new."""
    pods = by_kind("Pod")
    assert pods is not None
    scope = Scope(pods, "ns")
    key = ReconcileKey(kind="RayCluster", namespace="ns", name="c")
    batch = Batch(scope, (_version(1, type_="ADDED", kind="Pod"), *(_version(rv, kind="Pod") for rv in (2, 3))))
    projection = Projection(bus.js)
    await projection.project(batch)
    await projection.drain()
    entry = await bus.entry(key, "Pod", "c-worker-a")
    assert entry is not None and entry["status"] == {"step": 3}
    events = await bus.events(key)
    assert [(e["event_type"], e["resource_version"]) for e in events] == [("ADDED", "3")]
    assert projection.writes_folded == 2

    again = Projection(bus.js)
    await again.project(batch)
    await again.drain()
    assert len(await bus.events(key)) == 1 and again.repairs == 0

    await projection.project(Batch(scope, (_version(4, kind="Pod"), _version(5, type_="DELETED", kind="Pod"))))
    await projection.drain()
    events = await bus.events(key)
    assert [(e["event_type"], e["resource_version"]) for e in events[1:]] == [("MODIFIED", "4"), ("DELETED", "5")]
    assert await bus.entry(key, "Pod", "c-worker-a") is None
