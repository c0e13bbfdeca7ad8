"""Per-entry write order of the projection on a real nats-server (no kubesim needed)."""

from __future__ import annotations

from typing import Any

import msgspec

from schema.keys import ReconcileKey
from services.edge.resources import by_kind
from services.edge.watch.informer import Batch, Change, Scope
from services.edge.watch.projection import Projection
from tests.component.watcher.conftest import Bus


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
