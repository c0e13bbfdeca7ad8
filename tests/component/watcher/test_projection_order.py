"""Per-entry write order of the projection on a real nats-server (no kubesim needed)."""

from __future__ import annotations

from typing import Any

import msgspec

from schema import subjects
from schema.keys import ReconcileKey
from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Change, Scope
from services.edge.watch.projection import Projection
from tests.component.watcher.conftest import Bus
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually


def _version(rv: int, *, type_: str = "MODIFIED") -> Change:
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-c", "resourceVersion": str(rv)},
        "status": {"step": rv},
    }
    return Change(
        type=type_,  # type: ignore[arg-type]
        obj=obj,
        raw=msgspec.json.encode(obj),
        uid="u-c",
        resource_version=str(rv),
        namespace="ns",
        name="c",
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
