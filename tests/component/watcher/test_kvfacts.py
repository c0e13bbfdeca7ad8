"""KvFacts, read from the KV a real projection writes, answers what the projection answers.

The world: a RayJob whose RayCluster (stored under both keys) has a head Pod and a head Service, a
RayService serving a cluster with a head Pod (stored under the cluster's and the RayService's keys), and
a stray Pod. Commands of every kind are authorized against the projection and against KvFacts
(following the bucket from before the first write, and started after the last), before and after
deletions.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from schema import subjects
from schema.config import OperatorConfig
from schema.keys import KeyKind, ReconcileKey
from schema.messages import (
    Command,
    CreateObject,
    DashboardRef,
    DeleteObject,
    ObjectRef,
    PatchObject,
    PatchStatus,
    SubmitRayJob,
    Transition,
)
from schema.probes import (
    PROBED_KEYS,
    RAYJOB_KINDS,
    SERVE_HEALTH_KINDS,
    SERVE_KINDS,
    SOURCE_RAYJOB,
    SOURCE_SERVE,
    SOURCE_SERVE_HEALTH,
    probe_targets,
)
from schema.ray import conventions
from services.edge.apply.authorize import Allowed, Denied, Facts, Gone, Verdict, authorize
from services.edge.apply.provenance import ContentCheck, prepare
from services.edge.probe.prober import ObjectSource
from services.edge.resources import ResourceType, by_kind
from services.edge.watch.informer import Batch, Change, Scope, make_change
from services.edge.watch.kvfacts import FactsStopped, KvFacts
from services.edge.watch.podfacts import slim_pod
from services.edge.watch.projection import Projection
from tests.component.watcher.conftest import Bus, until
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually
from tests.unit.raycluster import builders as cluster_builders
from tests.unit.raycluster.sim import World as ClusterWorld

NS = "team"
RAY = f"{conventions.GROUP}/{conventions.VERSION}"
WAIT = 60.0
"""Bound of a wait that must end (a failure, not a threshold)."""


def resource(kind: str) -> ResourceType:
    found = by_kind(kind)
    assert found is not None
    return found


def obj(
    kind: str,
    name: str,
    rv: int,
    *,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": str(rv),
        "labels": labels or {},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    api_version = RAY if resource(kind).group == conventions.GROUP else resource(kind).api_version
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec or {}, "status": status or {}}


def owner(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": RAY, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}


def head_pod(name: str, cluster: str, ip: str, rv: int) -> dict[str, Any]:
    labels = {conventions.LABEL_CLUSTER: cluster, conventions.LABEL_NODE_TYPE: conventions.NODE_HEAD}
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.9.0",
        "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)],
        "ports": [{"name": conventions.PORT_SERVE, "containerPort": 8000}],
    }
    spec = {"containers": [container, {"name": "sidecar", "image": "busybox"}], "volumes": [{"name": "v"}]}
    status = {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return obj("Pod", name, rv, labels=labels, owner=owner("RayCluster", cluster), spec=spec, status=status)


def origin(kind: str, name: str) -> dict[str, str]:
    return {conventions.LABEL_ORIGIN_CRD: kind, conventions.LABEL_ORIGIN_NAME: name}


RAYJOB = obj("RayJob", "j", 10, status={"rayClusterName": "j-c", "jobDeploymentStatus": "Running", "jobId": "job1"})
JOB_CLUSTER = obj("RayCluster", "j-c", 11, labels=origin("RayJob", "j"), owner=owner("RayJob", "j"))
JOB_SERVICE = obj(
    "Service",
    "j-c-head-svc",
    12,
    labels={conventions.LABEL_CLUSTER: "j-c"},
    spec={"ports": [{"name": conventions.PORT_DASHBOARD, "port": 8265}]},
)
JOB_HEAD = head_pod("j-c-head", "j-c", "10.0.0.1", 13)
STRAY = head_pod("stray", "other", "10.0.0.9", 14)
RAYSERVICE = obj("RayService", "rs", 20, status={"activeServiceStatus": {"rayClusterName": "rs-c"}})
SERVE_CLUSTER = obj(
    "RayCluster",
    "rs-c",
    21,
    labels=origin("RayService", "rs"),
    owner=owner("RayService", "rs"),
    status={"conditions": [{"type": "HeadPodReady", "status": "True"}]},
)
SERVE_HEAD = head_pod("rs-c-head", "rs-c", "10.0.0.2", 22)


def key(kind: str, name: str) -> ReconcileKey:
    return ReconcileKey(kind=kind, namespace=NS, name=name)  # type: ignore[arg-type]


def ref(kind: str, name: str) -> ObjectRef:
    return ObjectRef(api_version=resource(kind).api_version, kind=kind, namespace=NS, name=name)


def patch(kind: str, name: str) -> PatchObject:
    return PatchObject(id=f"patch-{name}", target=ref(kind, name), patch={"metadata": {"labels": {"a": "b"}}})


def transition(uid: str) -> Transition:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    return Transition(kind="RayJob", uid=uid, namespace=NS, name="j", field="f", from_value="", to_value="x", at=at)


def status_patch(command_id: str, uid: str) -> PatchStatus:
    return PatchStatus(id=command_id, target=ref("RayJob", "j"), status={}, transitions=(transition(uid),))


DASHBOARD = DashboardRef(namespace=NS, service="j-c-head-svc", port=8265, cluster="j-c")
NEW_POD = {"metadata": {"name": "j-c-worker", "ownerReferences": [owner("RayCluster", "j-c")]}}
CASES: tuple[tuple[ReconcileKey, Command], ...] = (
    (key("RayCluster", "j-c"), patch("Pod", "j-c-head")),
    (key("RayCluster", "j-c"), DeleteObject(id="d1", target=ref("Pod", "stray"))),
    (key("RayCluster", "j-c"), DeleteObject(id="d2", target=ref("Pod", "nowhere"))),
    (key("RayCluster", "j-c"), CreateObject(id="c1", target=ref("Pod", "j-c-worker"), body=NEW_POD)),
    (key("RayJob", "j"), DeleteObject(id="d3", target=ref("RayCluster", "j-c"))),
    (key("RayJob", "j"), SubmitRayJob(id="s1", dashboard=DASHBOARD, request={})),
    (key("RayJob", "j"), status_patch("p1", "uid-j")),
    (key("RayJob", "j"), status_patch("p2", "uid-someone-else")),
    (key("RayService", "rs"), patch("Pod", "rs-c-head")),
    (key("RayService", "rs"), patch("Pod", "j-c-head")),
    (key("RayService", "rs"), patch("Service", "j-c-head-svc")),
    (key("RayCluster", "ghost"), patch("Pod", "j-c-head")),
)
PROBED_KINDS = tuple(dict.fromkeys((*RAYJOB_KINDS, *SERVE_KINDS, *SERVE_HEALTH_KINDS)))


def verdicts(facts: Facts) -> list[Verdict]:
    return [authorize(k, command, facts) for k, command in CASES]


def targets(source: ObjectSource) -> list[Any]:
    return sorted(probe_targets({kind: source.objects(kind) for kind in PROBED_KINDS}), key=repr)


def change(kind: str, type_: str, body: dict[str, Any]) -> Change:
    return make_change(resource(kind), type_, msgspec.json.encode(body))  # type: ignore[arg-type]


async def project(projection: Projection, type_: str, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        scope = Scope(resource(body["kind"]), NS)
        await projection.project(Batch(scope, (change(body["kind"], type_, body),)))
    await projection.drain()


async def last_revision(kv: KeyValue) -> int:
    status = await kv.status()
    return int(status.stream_info.state.last_seq)


async def settle(facts: KvFacts, kv: KeyValue) -> int:
    """Wait until ``facts`` applied everything the bucket holds; returns that revision."""
    revision = await last_revision(kv)
    await asyncio.wait_for(facts.caught_up(revision), WAIT)
    return revision


@contextlib.asynccontextmanager
async def following(
    nc: Client, keys: Sequence[KeyKind] = (), on_edit: Callable[[str, dict[str, Any]], None] | None = None
) -> AsyncIterator[KvFacts]:
    facts = KvFacts(nc, keys=keys, on_edit=on_edit)
    await facts.start()
    try:
        yield facts
    finally:
        await facts.stop()


async def test_kvfacts_answers_as_the_projection_that_wrote_the_bucket(bus: Bus) -> None:
    kv = bus.buckets.objects
    projection = Projection(bus.js)
    async with following(bus.nc) as facts:
        await project(projection, "ADDED", RAYJOB, JOB_CLUSTER, JOB_SERVICE, JOB_HEAD, STRAY)
        await project(projection, "ADDED", RAYSERVICE, SERVE_CLUSTER, SERVE_HEAD)
        before = await settle(facts, kv)

        alive = verdicts(projection)
        assert verdicts(facts) == alive
        assert {type(v) for v in alive} == {Allowed, Denied}, alive
        assert targets(facts) == targets(projection)
        assert SOURCE_SERVE_HEALTH in {t.source for t in targets(facts)}
        # custom resources and Services whole, Pods reduced to what authorize and the prober read (by
        # both: the projection keeps them so too)
        for kind, name in (("RayJob", "j"), ("RayCluster", "j-c"), ("Service", "j-c-head-svc")):
            assert facts.find(kind, NS, name) == projection.find(kind, NS, name)
        stored = await kv.get(subjects.entry_key(key("RayCluster", "j-c"), "Pod", "j-c-head"))
        full_pod: dict[str, Any] = msgspec.json.decode(stored.value or b"")
        assert facts.find("Pod", NS, "j-c-head") == projection.find("Pod", NS, "j-c-head") == slim_pod(full_pod)
        assert len(msgspec.json.encode(slim_pod(full_pod))) < len(msgspec.json.encode(full_pod)) / 2

        # the RayCluster starts being deleted: a decision made before missed it, one made after did not
        deleting = obj("RayCluster", "j-c", 30, labels=origin("RayJob", "j"), owner=owner("RayJob", "j"), deleting=True)
        await project(projection, "MODIFIED", deleting)
        during = await settle(facts, kv)
        for source in (projection, facts):
            assert source.owner_gone("RayCluster", "uid-j-c", before) is True
            assert source.owner_gone("RayCluster", "uid-j-c", during) is False
            assert source.owner_gone("RayCluster", "uid-nobody", before) is False

        await project(projection, "DELETED", JOB_HEAD, deleting)
        await settle(facts, kv)
        gone = verdicts(projection)
        assert verdicts(facts) == gone
        assert any(isinstance(v, Gone) for v in gone), gone
        for source in (projection, facts):
            assert source.owner_gone("RayCluster", "uid-j-c", during) is True
            assert source.find("RayCluster", NS, "j-c") is None
            assert source.recently_deleted("RayCluster", NS, "j-c")
            assert source.recently_deleted("Pod", NS, "j-c-head")
            assert not source.recently_deleted("Pod", NS, "stray")

    # a process started after all of it sees the same (delete markers are recent deletions)
    async with following(bus.nc) as late:
        assert verdicts(late) == gone
        assert targets(late) == targets(projection)
        # and it follows what is written after what it read
        await project(projection, "DELETED", STRAY)
        await settle(late, kv)
        assert late.find("Pod", NS, "stray") is None and late.recently_deleted("Pod", NS, "stray")


async def test_a_prober_following_the_probed_keys_only_finds_the_same_targets(bus: Bus) -> None:
    """The prober alone follows RayJob and RayService keys: what their probes read is stored under them."""
    projection = Projection(bus.js)
    plain = obj("RayCluster", "plain", 40)
    async with following(bus.nc, PROBED_KEYS) as facts:
        await project(projection, "ADDED", RAYJOB, JOB_CLUSTER, JOB_SERVICE, JOB_HEAD, STRAY, plain)
        await project(projection, "ADDED", RAYSERVICE, SERVE_CLUSTER, SERVE_HEAD)
        expected = targets(projection)
        assert {t.source for t in expected} == {SOURCE_RAYJOB, SOURCE_SERVE, SOURCE_SERVE_HEALTH}
        await eventually(lambda: targets(facts) == expected, timeout=WAIT, message="the probed keys' targets")
        # what no probed key holds is not followed
        assert facts.find("RayCluster", NS, "plain") is None and facts.find("Pod", NS, "stray") is None
        with pytest.raises(RuntimeError, match="some keys only"):
            await facts.caught_up(1)

        await project(projection, "DELETED", JOB_HEAD, SERVE_HEAD)
        expected = targets(projection)
        await eventually(lambda: targets(facts) == expected, timeout=WAIT, message="the targets after deletions")


async def test_an_object_removed_from_one_key_while_another_holds_it_is_not_deleted(bus: Bus) -> None:
    kv = bus.buckets.objects
    under_cluster = subjects.entry_key(key("RayCluster", "j-c"), "RayCluster", "j-c")
    under_job = subjects.entry_key(key("RayJob", "j"), "RayCluster", "j-c")
    value = msgspec.json.encode(JOB_CLUSTER)
    async with following(bus.nc) as facts:
        await kv.put(under_cluster, value)
        await kv.put(under_job, value)
        await kv.delete(under_job)
        await settle(facts, kv)
        assert facts.find("RayCluster", NS, "j-c") == JOB_CLUSTER
        assert not facts.recently_deleted("RayCluster", NS, "j-c")
        assert not facts.owner_gone("RayCluster", "uid-j-c", 0)

        await kv.purge(under_cluster)
        await settle(facts, kv)
        assert facts.find("RayCluster", NS, "j-c") is None
        assert facts.recently_deleted("RayCluster", NS, "j-c")
        assert facts.owner_gone("RayCluster", "uid-j-c", 0)

        await kv.put(under_job, value)
        await settle(facts, kv)
        assert facts.find("RayCluster", NS, "j-c") == JOB_CLUSTER
        assert not facts.recently_deleted("RayCluster", NS, "j-c")


def generation(body: dict[str, Any], value: int, **metadata: Any) -> bytes:
    edited = copy.deepcopy(body)
    edited["metadata"].update(generation=value, **metadata)
    return msgspec.json.encode(edited)


async def test_an_edit_of_a_held_custom_resources_spec_is_announced(bus: Bus) -> None:
    kv = bus.buckets.objects
    under_cluster = subjects.entry_key(key("RayCluster", "j-c"), "RayCluster", "j-c")
    under_job = subjects.entry_key(key("RayJob", "j"), "RayCluster", "j-c")
    pod = subjects.entry_key(key("RayCluster", "j-c"), "Pod", "j-c-head")
    edits: list[tuple[str, int]] = []
    async with following(bus.nc, on_edit=lambda kind, o: edits.append((kind, o["metadata"]["generation"]))) as facts:
        await kv.put(under_cluster, generation(JOB_CLUSTER, 1))  # new: nothing to announce
        await kv.put(under_job, generation(JOB_CLUSTER, 1, resourceVersion="40"))  # the same object, another key
        await kv.put(under_cluster, generation(JOB_CLUSTER, 1, resourceVersion="41"))  # status or metadata only
        await kv.put(pod, generation(JOB_HEAD, 1))
        await kv.put(pod, generation(JOB_HEAD, 2))  # not a custom resource
        await settle(facts, kv)
        assert edits == []

        await kv.put(under_cluster, generation(JOB_CLUSTER, 2))
        await kv.put(under_job, generation(JOB_CLUSTER, 2))  # the same edit, written under its second key
        await settle(facts, kv)
        assert edits == [("RayCluster", 2)]

        await kv.put(under_cluster, generation(JOB_CLUSTER, 3, uid="uid-new"))  # a new incarnation, not an edit
        await settle(facts, kv)
        assert edits == [("RayCluster", 2)]


def worker_create(cluster: dict[str, Any]) -> tuple[ReconcileKey, CreateObject, tuple[Command, ...]]:
    """The create of a worker Pod in the first decision on ``cluster``, with its batch."""
    world = ClusterWorld(cluster)
    decision = world.step()
    for command in decision.commands:
        if isinstance(command, CreateObject) and command.target.kind == "Pod":
            labels = command.body["metadata"]["labels"]
            if labels[conventions.LABEL_NODE_TYPE] == conventions.NODE_WORKER:
                return world.key, command, decision.commands
    raise AssertionError("no worker Pod created")


async def test_the_checks_follow_each_edit_of_the_spec_the_facts_hold(bus: Bus) -> None:
    """What the applier derives ahead of an edit's batch (``provenance.prepare``), and remembers by the
    facts' object, is that of the edit: a Pod of the spec before is refused, whether the edit was
    prepared for or not."""
    kv = bus.buckets.objects
    config = OperatorConfig()
    v1 = cluster_builders.cluster()
    v2 = copy.deepcopy(v1)
    v2["metadata"]["generation"] = 2
    v2["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.53.0"
    entry = subjects.entry_key(ReconcileKey(kind="RayCluster", namespace="default", name="rc"), "RayCluster", "rc")
    creates = {version: worker_create(body) for version, body in ((1, v1), (2, v2))}

    def problem(version: int, facts: KvFacts) -> str:
        key, create, batch = creates[version]
        return ContentCheck(key, facts, config, batch).problem(create)

    for prepared in (True, False):
        on_edit = (lambda kind, o: prepare(kind, o, config)) if prepared else None
        await kv.put(entry, msgspec.json.encode(v1))
        async with following(bus.nc, on_edit=on_edit) as facts:
            assert problem(1, facts) == problem(1, facts) == ""
            await kv.put(entry, msgspec.json.encode(v2))
            await settle(facts, kv)
            assert problem(2, facts) == ""
            assert problem(1, facts).startswith("the Pod's spec.containers[0].image"), problem(1, facts)
            await kv.put(entry, msgspec.json.encode(v1))  # edited back
            await settle(facts, kv)
            assert problem(1, facts) == ""
            assert problem(2, facts).startswith("the Pod's spec.containers[0].image"), problem(2, facts)


def test_preparing_never_raises() -> None:
    config = OperatorConfig()
    for kind, body in (
        ("RayCluster", {"metadata": ["x"], "spec": 3}),
        ("RayCluster", {"spec": {"workerGroupSpecs": [{"template": 3}]}}),
        ("RayJob", {"spec": None}),
    ):
        prepare(kind, body, config)


async def test_malformed_entries_are_skipped(bus: Bus) -> None:
    kv = bus.buckets.objects
    good = subjects.entry_key(key("RayCluster", "c"), "Pod", "good")
    pod = head_pod("good", "c", "10.0.0.3", 1)
    await kv.put(subjects.entry_key(key("RayCluster", "c"), "Pod", "early"), b"{not json")
    async with following(bus.nc) as facts:
        assert facts.skipped == 1
        malformed: Sequence[tuple[str, bytes]] = (
            (subjects.entry_key(key("RayCluster", "c"), "Pod", "list"), b"[1, 2]"),
            (subjects.entry_key(key("RayCluster", "c"), "Pod", "empty"), b""),
            (subjects.entry_key(key("RayCluster", "c"), "RayCluster", "c"), b'{"metadata": ["x"], "spec": 3}'),
            ("Nope.team.c.Pod.bad", b"{}"),
            ("RayCluster.team.short", b"{}"),
            (subjects.entry_key(key("RayJob", "j"), "obs-rayjob", "job1"), b'{"status": "RUNNING"}'),
        )
        for kv_key, value in malformed:
            await kv.put(kv_key, value)
        await kv.put(good, msgspec.json.encode(pod))
        await settle(facts, kv)
        assert facts.find("Pod", NS, "good") == slim_pod(pod)
        assert facts.find("Pod", NS, "list") is None
        assert facts.find("Pod", "team", "bad") is None
        assert facts.skipped == 1 + 4  # the observation is no object, but not malformed either
        # a decodable object of odd shape is held, read leniently
        assert facts.find("RayCluster", NS, "c") == {"metadata": ["x"], "spec": 3}


async def test_caught_up_waits_for_a_later_revision(bus: Bus) -> None:
    kv = bus.buckets.objects
    entry = subjects.entry_key(key("RayCluster", "c"), "RayCluster", "c")
    async with following(bus.nc) as facts:
        now = facts.revision
        await facts.caught_up(now)  # applied already: returns at once
        waiting = asyncio.create_task(facts.caught_up(now + 1))
        await asyncio.sleep(0)
        assert not waiting.done()
        written = await kv.put(entry, msgspec.json.encode(obj("RayCluster", "c", 1)))
        assert written == now + 1
        await asyncio.wait_for(waiting, WAIT)
        assert facts.revision >= written
        assert facts.find("RayCluster", NS, "c") is not None

        never = asyncio.create_task(facts.caught_up(written + 1000))
        await asyncio.sleep(0)
    with pytest.raises(FactsStopped):
        await never


async def test_the_watch_survives_a_nats_restart(nats_server: NatsServer, bus: Bus) -> None:
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        kv = await nc.jetstream().key_value(subjects.OBJECTS_BUCKET)
        async with following(nc) as facts:
            before = subjects.entry_key(key("RayCluster", "a"), "RayCluster", "a")
            await kv.put(before, msgspec.json.encode(obj("RayCluster", "a", 1)))
            await settle(facts, kv)
            nats_server.restart()
            after = subjects.entry_key(key("RayCluster", "b"), "RayCluster", "b")
            body = msgspec.json.encode(obj("RayCluster", "b", 2))
            written: int = await until(lambda: kv.put(after, body), timeout=WAIT, message="a write after the restart")
            await asyncio.wait_for(facts.caught_up(written), WAIT)
            assert facts.find("RayCluster", NS, "b") is not None
    finally:
        await nc.close()
        # nats-py re-creates an ordered consumer in a task it keeps no handle to; one started by a late
        # heartbeat check may still await its (now unanswerable) request, which ends at the client's timeout
        await eventually(lambda: not recreating_consumers(), timeout=WAIT, message="the consumer re-creation ended")


def recreating_consumers() -> list[asyncio.Task[Any]]:
    """The running tasks in which nats-py re-creates an ordered consumer."""
    return [t for t in asyncio.all_tasks() if not t.done() and t.get_coro().__qualname__.endswith("recreate_consumer")]  # type: ignore[union-attr]
