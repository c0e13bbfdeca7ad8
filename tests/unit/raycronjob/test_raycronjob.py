"""RayCronJob (docs/behaviour.md#7, #8, plus docs/differences.md#raycronjob), driven through the pure simulation."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from schema.config import FeatureGates, OperatorConfig
from schema.messages import CreateObject, DeleteObject, EmitEvent, PatchStatus
from services.reconciler.raycronjob import reconcile
from tests.helpers import samples_dir
from tests.unit.rayjob.builders import cluster_spec
from tests.unit.rayjob.sim import World, stamp

ON = OperatorConfig(gates=FeatureGates(ray_cron_job=True))
T0 = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)


def sample(name: str) -> dict[str, Any]:
    """The RayCronJob document of one of KubeRay's samples."""
    with (samples_dir() / name).open() as handle:
        docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "RayCronJob"]
    return docs[0]


def cron(name: str = "nightly", *, schedule: str = "* * * * *", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schedule": schedule,
        "jobTemplate": {
            "entrypoint": "python x.py",
            "rayClusterSpec": cluster_spec(),
            "shutdownAfterJobFinishes": True,
        },
    }
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayCronJob", "metadata": {"name": name}, "spec": body}


def step(world: World, name: str) -> Any:
    return world.reconcile(reconcile, "RayCronJob", name)


def stored(world: World, kind: str, name: str) -> dict[str, Any]:
    """An object that must exist in the world."""
    obj = world.get(kind, name)
    assert obj is not None, f"no {kind} {name}"
    return obj


def children(world: World) -> list[str]:
    return [job["metadata"]["name"] for job in world.of_kind("RayJob")]


def set_child_state(world: World, name: str, deployment: str) -> None:
    world.set_status("RayJob", name, {"jobDeploymentStatus": deployment})


def test_every_minute_sample_creates_a_rayjob_each_minute() -> None:
    world = World(config=ON, now=T0)
    obj = world.add(sample("ray-cronjob.sample.yaml"))
    name = obj["metadata"]["name"]
    decision = step(world, name)
    assert decision.commands == ()
    assert decision.wake_at == datetime(2024, 5, 1, 12, 1, tzinfo=UTC)
    world.advance_to(decision.wake_at)
    decision = step(world, name)
    tick = datetime(2024, 5, 1, 12, 1, tzinfo=UTC)
    child = f"{name}-{int(tick.timestamp()) // 60}"
    create, patch = decision.commands
    assert isinstance(create, CreateObject) and isinstance(patch, PatchStatus)
    body = world.get("RayJob", child)
    assert body is not None
    assert body["metadata"]["labels"] == {"ray.io/cronjob-name": name}
    assert body["metadata"]["annotations"] == {"ray.io/cronjob-scheduled-timestamp": "2024-05-01T12:01:00Z"}
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "RayCronJob",
        name,
        obj["metadata"]["uid"],
        True,
    )
    assert body["spec"] == obj["spec"]["jobTemplate"]
    assert stored(world, "RayCronJob", name)["status"] == {"lastScheduleTime": "2024-05-01T12:01:00Z"}
    (transition,) = patch.transitions
    assert (transition.kind, transition.field, transition.from_value, transition.to_value) == (
        "RayCronJob",
        "schedule",
        "",
        "2024-05-01T12:01:00Z",
    )
    assert transition.attributes == {"rayJobName": child}
    assert decision.wake_at == datetime(2024, 5, 1, 12, 2, tzinfo=UTC)
    # The status write comes back as an event: nothing more to do until the next tick.
    quiet = step(world, name)
    assert quiet.commands == () and quiet.wake_at == datetime(2024, 5, 1, 12, 2, tzinfo=UTC)
    world.advance(60)
    step(world, name)
    assert len(children(world)) == 2
    transitions = [t for d in world.decisions for t in d.transitions()]
    assert [(t.from_value, t.to_value) for t in transitions] == [
        ("", "2024-05-01T12:01:00Z"),
        ("2024-05-01T12:01:00Z", "2024-05-01T12:02:00Z"),
    ]


def test_timezone_sample_fires_at_local_time() -> None:
    world = World(config=ON, now=T0)
    obj = world.add(sample("ray-cronjob-timezone.sample.yaml"))
    name = obj["metadata"]["name"]
    decision = step(world, name)
    tick = datetime(2024, 5, 1, 13, 45, tzinfo=UTC)  # 21:45 in Asia/Taipei (UTC+8)
    assert decision.commands == () and decision.wake_at == tick
    world.advance_to(tick - timedelta(seconds=1))
    assert step(world, name).commands == ()
    world.advance_to(tick)
    step(world, name)
    assert children(world) == [f"{name}-{int(tick.timestamp()) // 60}"]
    assert stored(world, "RayCronJob", name)["status"]["lastScheduleTime"] == "2024-05-01T13:45:00Z"
    assert world.decisions[-1].wake_at == tick + timedelta(days=1)


def test_outage_catches_up_one_tick_per_pass_in_order() -> None:
    world = World(config=ON, now=T0)
    world.add(cron())
    world.update(
        "RayCronJob", "nightly", lambda o: o.__setitem__("status", {"lastScheduleTime": "2024-05-01T12:00:00Z"})
    )
    world.advance_to(datetime(2024, 5, 1, 12, 5, 30, tzinfo=UTC))
    wakes = []
    for _ in range(5):
        decision = step(world, "nightly")
        wakes.append(decision.wake_at)
    minute = [datetime(2024, 5, 1, 12, m, tzinfo=UTC) for m in range(1, 6)]
    assert children(world) == [f"nightly-{int(m.timestamp()) // 60}" for m in minute]
    assert wakes == [world.now] * 4 + [datetime(2024, 5, 1, 12, 6, tzinfo=UTC)]
    assert "7/catch-up" in world.decisions[0].rules
    scheduled = [
        c.body["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"]
        for d in world.decisions
        for c in d.commands
        if isinstance(c, CreateObject)
    ]
    assert scheduled == [stamp(m) for m in minute]
    assert step(world, "nightly").commands == ()


def test_stale_snapshot_is_harmless() -> None:
    world = World(config=ON, now=T0)
    world.add(cron())
    world.advance(30)
    stale = world.snapshot("RayCronJob", "nightly")
    world.apply(reconcile(stale, world.now, ON))
    rv = stored(world, "RayCronJob", "nightly")["metadata"]["resourceVersion"]
    world.apply(reconcile(stale, world.now, ON))  # a redelivery of the same input
    assert len(children(world)) == 1
    assert stored(world, "RayCronJob", "nightly")["metadata"]["resourceVersion"] == rv
    assert any(isinstance(c, PatchStatus) for c in world.dropped)


def test_suspend() -> None:
    world = World(config=ON, now=T0)
    world.add(cron(suspend=True))
    world.advance(3600)
    decision = step(world, "nightly")
    (event,) = decision.commands
    assert isinstance(event, EmitEvent)
    assert (event.event_type, event.reason) == ("Normal", "SuspendedRayCronJob")
    assert decision.wake_at is None and children(world) == []


def test_gate_off_is_an_empty_decision() -> None:
    world = World(now=T0)
    world.add(cron())
    world.advance(3600)
    decision = step(world, "nightly")
    assert decision.commands == () and decision.wake_at is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(
            lambda o: o["metadata"].update(name="x" * 37),
            "RayCronJob name should be no more than 36 characters",
            id="name-too-long",
        ),
        pytest.param(
            lambda o: o["spec"].update(schedule="TZ=UTC * * * * *"),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            id="tz-in-schedule",
        ),
        pytest.param(
            lambda o: o["spec"].update(schedule="* * * *"),
            "invalid cron schedule: expected exactly 5 fields, found 4: [* * * *]",
            id="four-fields",
        ),
        pytest.param(
            lambda o: o["spec"].update(schedule="61 * * * *"),
            "invalid cron schedule: failed to parse the schedule: 61 * * * *",
            id="minute-out-of-range",
        ),
        pytest.param(
            lambda o: o["spec"].update(timeZone=""),
            "timeZone must not be empty string, omit the field to use the local time zone of the KubeRay operator",
            id="empty-time-zone",
        ),
        pytest.param(
            lambda o: o["spec"].update(timeZone="Mars/Olympus_Mons"),
            "invalid time zone: unknown time zone Mars/Olympus_Mons",
            id="unknown-time-zone",
        ),
        pytest.param(
            lambda o: o["spec"]["jobTemplate"].update(suspend=True, shutdownAfterJobFinishes=False),
            "invalid RayJob template: The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to "
            "false is not allowed to be suspended",
            id="job-template-invalid",
        ),
    ],
)
def test_validation_rules(mutate: Any, message: str) -> None:
    world = World(config=ON, now=T0)
    obj = cron()
    mutate(obj)
    name = obj["metadata"]["name"]
    world.add(obj)
    world.advance(3600)
    decision = step(world, name)
    (event,) = decision.commands
    assert isinstance(event, EmitEvent)
    assert (event.event_type, event.reason, event.message) == (
        "Warning",
        "InvalidRayCronJobSpec",
        f"default/{name}: {message}",
    )
    assert decision.wake_at is None and children(world) == []


def test_descriptor_schedule() -> None:
    world = World(config=ON, now=T0)
    world.add(cron(schedule="@hourly"))
    assert step(world, "nightly").wake_at == datetime(2024, 5, 1, 13, tzinfo=UTC)


def test_forbid_postpones_the_tick_until_the_active_child_finishes() -> None:
    """Kubernetes CronJob: the tick is not started while a RayJob runs, and starts late once it is done."""
    world = World(config=ON, now=T0)
    world.add(cron(concurrencyPolicy="Forbid"))
    world.advance_to(datetime(2024, 5, 1, 12, 1, tzinfo=UTC))
    step(world, "nightly")
    (first,) = children(world)
    world.advance(60)
    decision = step(world, "nightly")
    assert children(world) == [first]
    (event,) = decision.commands
    assert isinstance(event, EmitEvent) and (event.event_type, event.reason) == ("Normal", "JobAlreadyActive")
    assert event.message == (
        f"Not starting RayJob for 2024-05-01T12:02:00Z because prior execution {first} is running and "
        "concurrency policy is Forbid"
    )
    assert decision.transitions() == () and decision.rules == ("ext/forbid-postpone",)
    assert decision.wake_at == datetime(2024, 5, 1, 12, 3, tzinfo=UTC)
    assert stored(world, "RayCronJob", "nightly")["status"]["lastScheduleTime"] == "2024-05-01T12:01:00Z"
    world.advance(30)
    set_child_state(world, first, "Complete")  # its event reconciles the cron job at 12:02:30
    decision = step(world, "nightly")
    late = f"nightly-{int(datetime(2024, 5, 1, 12, 2, tzinfo=UTC).timestamp()) // 60}"
    assert children(world) == [first, late]
    (transition,) = decision.transitions()
    assert (transition.from_value, transition.to_value, transition.attributes) == (
        "2024-05-01T12:01:00Z",
        "2024-05-01T12:02:00Z",
        {"rayJobName": late},
    )
    assert decision.wake_at == datetime(2024, 5, 1, 12, 3, tzinfo=UTC)


@pytest.mark.parametrize("policy", ["Forbid", "Replace"])
def test_forbid_and_replace_start_only_the_most_recent_missed_tick(policy: str) -> None:
    """Kubernetes CronJob after an outage: one run, for the latest tick; Allow replays each (KubeRay)."""
    world = World(config=ON, now=T0)
    world.add(cron(concurrencyPolicy=policy))
    world.update(
        "RayCronJob", "nightly", lambda o: o.__setitem__("status", {"lastScheduleTime": "2024-05-01T12:00:00Z"})
    )
    world.advance_to(datetime(2024, 5, 1, 12, 5, 30, tzinfo=UTC))
    decision = step(world, "nightly")
    latest = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)
    assert children(world) == [f"nightly-{int(latest.timestamp()) // 60}"]
    (transition,) = decision.transitions()
    assert (transition.to_value, transition.message) == (
        "2024-05-01T12:05:00Z",
        f"concurrencyPolicy={policy}; missed ticks from 2024-05-01T12:01:00Z skipped",
    )
    assert decision.wake_at == datetime(2024, 5, 1, 12, 6, tzinfo=UTC)
    assert step(world, "nightly").commands == ()


def test_replace_deletes_the_active_child_first() -> None:
    world = World(config=ON, now=T0)
    world.add(cron(concurrencyPolicy="Replace"))
    world.advance_to(datetime(2024, 5, 1, 12, 1, tzinfo=UTC))
    step(world, "nightly")
    (first,) = children(world)
    first_uid = stored(world, "RayJob", first)["metadata"]["uid"]
    set_child_state(world, first, "Running")
    world.advance(60)
    decision = step(world, "nightly")
    delete, create = decision.commands[:2]
    assert isinstance(delete, DeleteObject) and isinstance(create, CreateObject)
    assert (delete.target.name, delete.propagation) == (first, "Background")
    assert delete.target.uid == first_uid
    assert children(world) == [create.target.name]


def test_allow_runs_concurrently() -> None:
    world = World(config=ON, now=T0)
    world.add(cron())
    for minute in (1, 2, 3):
        world.advance_to(datetime(2024, 5, 1, 12, minute, tzinfo=UTC))
        step(world, "nightly")
    assert len(children(world)) == 3


@pytest.mark.parametrize(
    ("limits", "kept_complete", "kept_failed"),
    [
        pytest.param({}, 3, 2, id="keep-all"),
        pytest.param({"successfulJobsHistoryLimit": 2}, 2, 2, id="successful-2"),
        pytest.param({"failedJobsHistoryLimit": 0}, 3, 0, id="failed-0"),
        pytest.param({"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}, 1, 1, id="both-1"),
    ],
)
def test_history_limits(limits: dict[str, Any], kept_complete: int, kept_failed: int) -> None:
    world = World(config=ON, now=T0)
    world.add(cron(**limits))
    states = ["Complete", "Complete", "Complete", "Failed", "Failed", "Running"]
    created: dict[str, list[str]] = {"Complete": [], "Failed": [], "Running": []}
    for minute, state in enumerate(states, start=1):
        world.advance_to(datetime(2024, 5, 1, 12, minute, tzinfo=UTC))
        step(world, "nightly")
        newest = max(children(world))
        set_child_state(world, newest, state)
        created[state].append(newest)
    world.advance(1)
    step(world, "nightly")
    left = set(children(world))
    assert created["Running"][0] in left
    assert sorted(left & set(created["Complete"])) == created["Complete"][len(created["Complete"]) - kept_complete :]
    assert sorted(left & set(created["Failed"])) == created["Failed"][len(created["Failed"]) - kept_failed :]


def test_children_of_another_owner_are_ignored() -> None:
    world = World(config=ON, now=T0)
    world.add(cron(successfulJobsHistoryLimit=0))
    stranger = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "nightly-1",
            "labels": {"ray.io/cronjob-name": "nightly"},
            "ownerReferences": [{"kind": "RayCronJob", "name": "nightly", "uid": "someone-else", "controller": True}],
        },
        "spec": {},
        "status": {"jobDeploymentStatus": "Complete"},
    }
    world.add(copy.deepcopy(stranger))
    decision = step(world, "nightly")
    assert not [c for c in decision.commands if isinstance(c, DeleteObject)]


def test_deleted_cron_job_does_nothing() -> None:
    world = World(config=ON, now=T0)
    world.add(cron())
    world.update("RayCronJob", "nightly", lambda o: o["metadata"].update(deletionTimestamp=stamp(T0)))
    world.advance(600)
    assert step(world, "nightly").commands == ()


def test_same_snapshot_same_decision() -> None:
    world = World(config=ON, now=T0 + timedelta(minutes=3))
    world.add(cron(concurrencyPolicy="Replace", successfulJobsHistoryLimit=1))
    snapshot = world.snapshot("RayCronJob", "nightly")
    assert reconcile(snapshot, world.now, ON) == reconcile(snapshot, world.now, ON)
