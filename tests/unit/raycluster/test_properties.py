"""Property tests: convergence for any valid spec, no extra pods under stale snapshots, never raising."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema.config import OperatorConfig
from schema.decision import Snapshot
from schema.messages import CreateObject, DeleteObject, EmitEvent
from services.reconciler import raycluster
from services.reconciler.raycluster import model, validation
from services.reconciler.worker.decide import guarded
from services.reconciler.worker.inflight import announces
from tests.unit.raycluster import builders
from tests.unit.raycluster.sim import NOW, World

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def valid_groups(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(min_value=0, max_value=3))
    groups = []
    for i in range(count):
        lo = draw(st.integers(min_value=0, max_value=3))
        hi = draw(st.integers(min_value=lo, max_value=5))
        replicas = draw(st.integers(min_value=0, max_value=6))
        hosts = draw(st.sampled_from([1, 1, 2, 3]))
        suspend = draw(st.booleans()) and draw(st.booleans())
        extra: dict[str, Any] = {"suspend": True} if suspend else {}
        groups.append(
            builders.group(f"g{i}", replicas=replicas, min_replicas=lo, max_replicas=hi, num_of_hosts=hosts, **extra)
        )
    return groups


def expected_workers(groups: list[dict[str, Any]]) -> int:
    total = 0
    for g in groups:
        if g.get("suspend"):
            continue
        total += min(max(g["replicas"], g["minReplicas"]), g["maxReplicas"]) * g["numOfHosts"]
    return total


@SETTINGS
@given(groups=valid_groups())
def test_converges_to_desired_pods(groups: list[dict[str, Any]]) -> None:
    world = World(builders.cluster(groups=groups))
    world.converge()
    status = world.cluster["status"]
    assert len(world.pods()) == expected_workers(groups) + 1
    assert status.get("desiredWorkerReplicas", 0) == expected_workers(groups)
    assert status["state"] == "ready"


@SETTINGS
@given(groups=valid_groups(), data=st.data())
def test_converges_after_any_replica_change(groups: list[dict[str, Any]], data: st.DataObject) -> None:
    world = World(builders.cluster(groups=groups))
    world.converge()
    changed = copy.deepcopy(groups)
    for group in changed:
        lo = data.draw(st.integers(min_value=0, max_value=3))
        group.update(
            minReplicas=lo,
            maxReplicas=data.draw(st.integers(min_value=lo, max_value=5)),
            replicas=data.draw(st.integers(min_value=0, max_value=6)),
        )
        if data.draw(st.booleans()):
            group["suspend"] = not group.get("suspend", False)
    world.update_spec(lambda s: s.update(workerGroupSpecs=changed))
    world.converge()
    # (pods of groups removed from the spec are not touched, as in KubeRay: groups are kept here)
    assert len(world.pods()) == expected_workers(changed) + 1


class LaggingWorld(World):
    """A world whose snapshots miss some of the pods created by the latest decisions."""

    hidden: set[str]

    def snapshot(self) -> Snapshot:
        snap = super().snapshot()
        entries = {k: dict(v) for k, v in snap.entries.items()}
        for name in getattr(self, "hidden", set()):
            entries.get("Pod", {}).pop(name, None)
        return Snapshot(key=snap.key, entries=entries, revision=snap.revision)


@SETTINGS
@given(groups=valid_groups(), lag=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8))
def test_stale_snapshots_create_no_extra_pods_and_delete_nothing(groups: list[dict[str, Any]], lag: list[int]) -> None:
    world = LaggingWorld(builders.cluster(groups=groups))
    world.hidden = set()
    for seed in lag:
        decision = world.step()
        assert not any(isinstance(c, DeleteObject) for c in decision.commands)
        pods = sorted(p["metadata"]["name"] for p in world.pods())
        # hide a pseudo-random subset of the existing pods from the next snapshot
        world.hidden = {name for i, name in enumerate(pods) if (seed >> (i % 10)) & 1}
    world.hidden = set()
    world.converge()
    assert len(world.pods()) == expected_workers(groups) + 1
    assert len(set(world.created)) == len(world.pods())  # every create ever issued names a pod that exists
    assert world.deleted == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)

PATHS = [
    ("spec",),
    ("spec", "headGroupSpec"),
    ("spec", "headGroupSpec", "template"),
    ("spec", "headGroupSpec", "template", "spec"),
    ("spec", "headGroupSpec", "template", "spec", "containers"),
    ("spec", "headGroupSpec", "rayStartParams"),
    ("spec", "headGroupSpec", "headService"),
    ("spec", "workerGroupSpecs"),
    ("spec", "workerGroupSpecs", 0),
    ("spec", "workerGroupSpecs", 0, "template", "spec", "containers", 0),
    ("spec", "workerGroupSpecs", 0, "template", "spec", "containers", 0, "resources"),
    ("spec", "workerGroupSpecs", 0, "template", "spec", "containers", 0, "env"),
    ("spec", "workerGroupSpecs", 0, "template", "spec", "containers", 0, "ports"),
    ("spec", "workerGroupSpecs", 0, "replicas"),
    ("spec", "workerGroupSpecs", 0, "scaleStrategy"),
    ("spec", "autoscalerOptions"),
    ("spec", "gcsFaultToleranceOptions"),
    ("spec", "enableInTreeAutoscaling"),
    ("spec", "rayVersion"),
    ("spec", "suspend"),
    ("metadata",),
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("status",),
    ("status", "conditions"),
]


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


@SETTINGS
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), JSON), min_size=1, max_size=3))
def test_mutated_specs_never_raise(mutations: list[tuple[tuple[Any, ...], Any]]) -> None:
    obj = builders.cluster(enableInTreeAutoscaling=False)
    for path, value in mutations:
        try:
            _set(obj, path, copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue
    world = World.__new__(World)
    snapshot = Snapshot(key=World(builders.cluster()).snapshot().key, entries={"RayCluster": {"rc": obj}}, revision=1)
    decision = guarded(raycluster.reconcile)(snapshot, NOW, OperatorConfig())
    del world
    if "4.1/malformed" in decision.rules:
        assert isinstance(decision.commands[0], EmitEvent)
    try:
        view = model.decode_view(obj)
    except Exception:
        return
    assert isinstance(validation.validate_spec(view, OperatorConfig()), str)


@SETTINGS
@given(obj=st.dictionaries(st.sampled_from(["metadata", "spec", "status", "kind"]), JSON, max_size=4))
def test_arbitrary_objects_never_raise(obj: dict[str, Any]) -> None:
    key = World(builders.cluster()).snapshot().key
    decision = guarded(raycluster.reconcile)(
        Snapshot(key=key, entries={"RayCluster": {"rc": obj}}), NOW, OperatorConfig()
    )
    for command in decision.commands:
        if isinstance(command, EmitEvent):
            assert command.event_type == "Warning"


@SETTINGS
@given(pods=st.lists(st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), JSON, max_size=3), max_size=4))
def test_malformed_pods_never_raise(pods: list[dict[str, Any]]) -> None:
    world = World(builders.cluster())
    world.converge()
    snap = world.snapshot()
    entries = {k: dict(v) for k, v in snap.entries.items()}
    for i, pod in enumerate(pods):
        pod = dict(pod)
        pod["metadata"] = {
            "name": f"junk-{i}",
            "labels": {"ray.io/cluster": "rc"},
            **(pod["metadata"] if isinstance(pod.get("metadata"), dict) else {}),
        }
        entries.setdefault("Pod", {})[f"junk-{i}"] = pod
    snapshot = Snapshot(key=snap.key, entries=entries, revision=snap.revision)
    decision = guarded(raycluster.reconcile)(snapshot, NOW, world.config)
    assert "4.1/malformed" not in decision.rules


def _announced(commands: tuple[Any, ...]) -> int:
    """How many creates and deletes ``commands`` holds; asserts each is followed by the Event announcing it."""
    acts = [i for i, c in enumerate(commands) if isinstance(c, CreateObject | DeleteObject)]
    for i in acts:
        assert i + 1 < len(commands) and announces(commands[i + 1], commands[i]), commands[i : i + 2]
    return len(acts)


@SETTINGS
@given(groups=valid_groups())
def test_every_create_and_delete_is_announced_by_the_event_right_after_it(groups: list[dict[str, Any]]) -> None:
    """The worker sends an act's Event whenever it sends the act (``inflight.announces``), which rests on
    the Event following its create or delete in the decision."""
    world = World(builders.cluster(groups=groups))
    assert _announced(world.step().commands)
    world.converge()
    world.update_spec(lambda s: s.update(workerGroupSpecs=[{**g, "replicas": 0, "minReplicas": 0} for g in groups]))
    deleted = world.step().commands
    _announced(deleted)
    assert any(isinstance(c, DeleteObject) for c in deleted) == (expected_workers(groups) > 0)
