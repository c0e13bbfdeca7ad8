"""The projection's planning step (no bus): which writes each change causes, re-mapping, relist diffs."""

from __future__ import annotations

from typing import Any, cast

import msgspec

from schema.keys import ReconcileKey
from services.edge.resources import by_kind
from services.edge.watch.informer import Bookmark, Change, Check, Listing, Scope
from services.edge.watch.projection import Projection, _Write, lifecycle_id, message_id

NS = "ns"


def key(kind: str, name: str) -> ReconcileKey:
    return ReconcileKey(kind=kind, namespace=NS, name=name)  # type: ignore[arg-type]


def scope(kind: str) -> Scope:
    resource = by_kind(kind)
    assert resource is not None
    return Scope(resource)


def change(
    kind: str,
    name: str,
    *,
    uid: str | None = None,
    rv: str = "1",
    type_: str = "ADDED",
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> Change:
    api_version = "ray.io/v1" if kind.startswith("Ray") else "v1"
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "resourceVersion": rv},
    }
    if labels:
        obj["metadata"]["labels"] = labels
    if spec is not None:
        obj["spec"] = spec
    return Change(
        type=type_,  # type: ignore[arg-type]
        obj=obj,
        raw=msgspec.json.encode(obj),
        uid=uid or f"uid-{name}",
        resource_version=rv,
        namespace=NS,
        name=name,
    )


def projection() -> Projection:
    return Projection(cast(Any, None))


def summary(ops: list[Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for op in ops:
        if hasattr(op, "msg_id"):
            out.append((str(op.key), op.resource.kind, op.change.name, op.event_type))
        else:
            out.append((str(op.key), "fact", op.what))
    return out


ORIGIN = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"}


def test_message_ids() -> None:
    pod = change("Pod", "p.1", uid="u1", rv="7")
    cause = change("RayJob", "rj", uid="u2", rv="9")
    assert message_id(pod, "ADDED", key("RayCluster", "c")) == f"u1/7/ADDED/RayCluster.{NS}.c"
    assert message_id(pod, "DELETED", key("RayJob", "r.j"), cause) == f"u1/7/DELETED/RayJob.{NS}.r_j/u2/9"
    assert lifecycle_id("u1", "created") == "lifecycle/u1/created"


def test_first_sight_of_a_custom_resource_is_a_created_fact_once() -> None:
    p = projection()
    ops = p.plan(scope("RayJob"), change("RayJob", "rj"))
    assert summary(ops) == [
        (f"RayJob/{NS}/rj", "RayJob", "rj", "ADDED"),
        (f"RayJob/{NS}/rj", "fact", "created"),
    ]
    again = p.plan(scope("RayJob"), change("RayJob", "rj", rv="2", type_="MODIFIED"))
    assert summary(again) == [(f"RayJob/{NS}/rj", "RayJob", "rj", "MODIFIED")]
    gone = p.plan(scope("RayJob"), change("RayJob", "rj", rv="3", type_="DELETED"))
    assert summary(gone) == [(f"RayJob/{NS}/rj", "RayJob", "rj", "DELETED"), (f"RayJob/{NS}/rj", "fact", "deleted")]
    assert p.get("RayJob", "uid-rj") is None


def test_a_cluster_that_turns_out_to_belong_to_a_rayjob_pulls_its_pods_along() -> None:
    p = projection()
    pod = change("Pod", "c-head", labels={"ray.io/cluster": "rj-abcde"})
    assert summary(p.plan(scope("Pod"), pod)) == [(f"RayCluster/{NS}/rj-abcde", "Pod", "c-head", "ADDED")]
    cluster = change("RayCluster", "rj-abcde", labels=ORIGIN)
    ops = p.plan(scope("RayCluster"), cluster)
    assert summary(ops) == [
        (f"RayCluster/{NS}/rj-abcde", "RayCluster", "rj-abcde", "ADDED"),
        (f"RayJob/{NS}/rj", "RayCluster", "rj-abcde", "ADDED"),
        (f"RayCluster/{NS}/rj-abcde", "fact", "created"),
        (f"RayJob/{NS}/rj", "Pod", "c-head", "ADDED"),
    ]
    remap = ops[-1]
    assert isinstance(remap, _Write)
    assert remap.msg_id == f"uid-c-head/1/ADDED/RayJob.{NS}.rj/uid-rj-abcde/1"
    assert remap.change.raw == pod.raw  # written whole under the new key, from the packed bytes it was held as
    held = p.get("Pod", "uid-c-head")
    assert held is not None and held.keys == (key("RayCluster", "rj-abcde"), key("RayJob", "rj"))


def test_a_label_change_moves_an_object_out_of_a_key() -> None:
    p = projection()
    p.plan(scope("Pod"), change("Pod", "p", labels={"ray.io/cluster": "a"}))
    ops = p.plan(scope("Pod"), change("Pod", "p", rv="2", type_="MODIFIED", labels={"ray.io/cluster": "b"}))
    assert summary(ops) == [
        (f"RayCluster/{NS}/b", "Pod", "p", "ADDED"),
        (f"RayCluster/{NS}/a", "Pod", "p", "DELETED"),
    ]


def test_a_selecting_rayjob_pulls_the_cluster_and_its_head_service_but_not_pods_or_endpointslices() -> None:
    p = projection()
    p.plan(scope("RayCluster"), change("RayCluster", "shared"))
    p.plan(scope("Service"), change("Service", "shared-head-svc", labels={"ray.io/cluster": "shared"}))
    p.plan(scope("Pod"), change("Pod", "shared-head", labels={"ray.io/cluster": "shared"}))
    p.plan(
        scope("EndpointSlice"),
        change("EndpointSlice", "shared-head-svc-x", labels={"kubernetes.io/service-name": "shared-head-svc"}),
    )
    job = change("RayJob", "sel", spec={"clusterSelector": {"ray.io/cluster": "shared"}})
    ops = p.plan(scope("RayJob"), job)
    assert summary(ops) == [
        (f"RayJob/{NS}/sel", "RayJob", "sel", "ADDED"),
        (f"RayJob/{NS}/sel", "fact", "created"),
        (f"RayJob/{NS}/sel", "RayCluster", "shared", "ADDED"),
        (f"RayJob/{NS}/sel", "Service", "shared-head-svc", "ADDED"),
    ]
    deleted = p.plan(scope("RayJob"), change("RayJob", "sel", rv="5", type_="DELETED"))
    assert sorted(summary(deleted)) == sorted(
        [
            (f"RayJob/{NS}/sel", "RayJob", "sel", "DELETED"),
            (f"RayJob/{NS}/sel", "fact", "deleted"),
            (f"RayJob/{NS}/sel", "RayCluster", "shared", "DELETED"),
            (f"RayJob/{NS}/sel", "Service", "shared-head-svc", "DELETED"),
        ]
    )


def test_a_recreated_selecting_rayjob_gets_distinct_message_ids() -> None:
    p = projection()
    p.plan(scope("RayCluster"), change("RayCluster", "shared"))
    first = p.plan(
        scope("RayJob"), change("RayJob", "sel", uid="j1", spec={"clusterSelector": {"ray.io/cluster": "shared"}})
    )
    p.plan(scope("RayJob"), change("RayJob", "sel", uid="j1", rv="2", type_="DELETED"))
    second = p.plan(
        scope("RayJob"),
        change("RayJob", "sel", uid="j2", rv="3", spec={"clusterSelector": {"ray.io/cluster": "shared"}}),
    )
    first_ids = {op.msg_id for op in first if hasattr(op, "msg_id")}
    second_ids = {op.msg_id for op in second if hasattr(op, "msg_id")}
    assert not first_ids & second_ids


def test_listing_diff_deletes_vanished_objects_and_skips_unchanged_ones() -> None:
    p = projection()
    pods = scope("Pod")
    for name in ("keep", "change", "vanish"):
        p.plan(pods, change("Pod", name, labels={"ray.io/cluster": "c"}))
    listing = Listing(
        objects=(
            change("Pod", "keep", labels={"ray.io/cluster": "c"}),
            change("Pod", "change", rv="2", labels={"ray.io/cluster": "c"}),
            change("Pod", "new", rv="3", labels={"ray.io/cluster": "c"}),
        ),
        resource_version="3",
    )
    ops = p.plan(pods, listing)
    assert summary(ops) == [
        (f"RayCluster/{NS}/c", "Pod", "vanish", "DELETED"),
        (f"RayCluster/{NS}/c", "Pod", "change", "MODIFIED"),
        (f"RayCluster/{NS}/c", "Pod", "new", "ADDED"),
    ]
    assert isinstance(ops[0], _Write)
    assert ops[0].msg_id == f"uid-vanish/1/DELETED/RayCluster.{NS}.c"
    assert ops[0].change.raw == change("Pod", "vanish", labels={"ray.io/cluster": "c"}).raw
    assert sorted(placed.change.name for placed in p.objects_of("Pod")) == ["change", "keep", "new"]


def test_a_check_repairs_only_what_the_watch_should_have_shown_by_its_point() -> None:
    p = projection()
    pods = scope("Pod")
    labels = {"ray.io/cluster": "c"}
    for name in ("keep", "stale", "vanish", "later", "going"):
        p.plan(pods, change("Pod", name, labels=labels))
    check = Check(
        objects=(
            change("Pod", "keep", labels=labels),
            change("Pod", "stale", rv="4", labels=labels),  # changed before the watch's point: missed
            change("Pod", "missed", rv="5", labels=labels),  # created before it: missed
            change("Pod", "later", rv="7", labels=labels),  # changed after it: its event is on the way
            change("Pod", "new", rv="8", labels=labels),  # created after it: likewise
        ),
        listed_at="9",
        resource_version="6",
    )
    ops = p.plan(pods, check)
    assert summary(ops) == [
        (f"RayCluster/{NS}/c", "Pod", "stale", "MODIFIED"),
        (f"RayCluster/{NS}/c", "Pod", "missed", "ADDED"),
    ]
    assert {op.msg_id for op in ops if isinstance(op, _Write)} == {
        f"uid-stale/4/MODIFIED/RayCluster.{NS}.c/check/9",
        f"uid-missed/5/ADDED/RayCluster.{NS}.c/check/9",
    }
    # "vanish" and "going" are not listed: deleted after the watch's point, maybe. "going"'s DELETED arrives.
    p.plan(pods, change("Pod", "later", rv="7", type_="MODIFIED", labels=labels))
    p.plan(pods, change("Pod", "going", rv="8", type_="DELETED", labels=labels))
    again = Check(objects=check.objects[:4], listed_at="10", resource_version="9")  # "new" went since
    assert summary(p.plan(pods, again)) == [(f"RayCluster/{NS}/c", "Pod", "vanish", "DELETED")]
    assert p.repairs == 3
    assert p.plan(pods, Check(objects=check.objects[:4], listed_at="11", resource_version="10")) == []


def test_a_check_holds_objects_of_no_key_quietly() -> None:
    p = projection()
    pods = scope("Pod")
    p.plan(pods, change("Pod", "gone"))  # no ray.io/cluster label: belongs to no key
    check = Check(objects=(change("Pod", "other", rv="2"),), listed_at="5", resource_version="4")
    assert p.plan(pods, check) == []  # a restarted watcher holds only what KV had: nothing was lost
    assert sorted(placed.change.name for placed in p.objects_of("Pod")) == ["other"]
    assert p.repairs == 0


def test_a_namespaced_listing_only_judges_its_namespace() -> None:
    p = projection()
    resource = by_kind("Pod")
    assert resource is not None
    p.plan(Scope(resource, NS), change("Pod", "mine", labels={"ray.io/cluster": "c"}))
    ops = p.plan(Scope(resource, "elsewhere"), Listing(objects=(), resource_version="9"))
    assert ops == []
    assert p.plan(Scope(resource, NS), Bookmark(resource_version="10")) == []


def test_deleting_an_unknown_object_still_clears_its_keys() -> None:
    p = projection()
    ops = p.plan(scope("Pod"), change("Pod", "ghost", type_="DELETED", labels={"ray.io/cluster": "c"}))
    assert summary(ops) == [(f"RayCluster/{NS}/c", "Pod", "ghost", "DELETED")]


def test_the_applier_facts_follow_the_objects_by_name_and_remember_deletions() -> None:
    p = projection()
    pod = scope("Pod")
    p.plan(pod, change("Pod", "rc-head", labels={"ray.io/cluster": "rc"}))
    found = p.find("Pod", NS, "rc-head")
    assert found is not None and found["metadata"]["uid"] == "uid-rc-head"
    assert p.find("Pod", "elsewhere", "rc-head") is None
    assert not p.recently_deleted("Pod", NS, "rc-head")

    p.plan(pod, change("Pod", "rc-head", type_="DELETED", rv="2"))
    assert p.find("Pod", NS, "rc-head") is None
    assert p.recently_deleted("Pod", NS, "rc-head")

    p.plan(pod, change("Pod", "rc-head", uid="uid-new", rv="3"))  # a namesake
    found = p.find("Pod", NS, "rc-head")
    assert found is not None and found["metadata"]["uid"] == "uid-new"
    assert not p.recently_deleted("Pod", NS, "rc-head")
    p.plan(pod, change("Pod", "rc-head", type_="DELETED", rv="4"))  # the old one's late DELETED changes nothing
    assert p.find("Pod", NS, "rc-head") is not None
