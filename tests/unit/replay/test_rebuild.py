"""The snapshot rebuild: revision order, deletions, going backwards, uids, truncated histories."""

from __future__ import annotations

from services.replay.history import HistoryWindow, KeyHistory, KvSeedEntry
from services.replay.rebuild import SnapshotTimeline
from tests.unit.replay.conftest import KEY, event, obj, observation, tick


def names(timeline: SnapshotTimeline, revision: int) -> dict[str, list[str]]:
    snapshot = timeline.snapshot(revision)
    return {kind: sorted(by_name) for kind, by_name in snapshot.entries.items()}


def test_entries_follow_kv_revision_not_stream_order() -> None:
    # The Pod's event (seq 3) was published after the Service's (seq 2) but its KV write came first.
    history = KeyHistory(
        key=KEY,
        inputs=(
            event(1, 10, "RayCluster", "demo"),
            event(2, 13, "Service", "demo-head-svc"),
            event(3, 12, "Pod", "demo-head"),
            tick(4),
        ),
    )
    timeline = SnapshotTimeline(history)
    assert names(timeline, 9) == {}
    assert names(timeline, 10) == {"RayCluster": ["demo"]}
    assert names(timeline, 12) == {"RayCluster": ["demo"], "Pod": ["demo-head"]}
    assert names(timeline, 13) == {"RayCluster": ["demo"], "Pod": ["demo-head"], "Service": ["demo-head-svc"]}
    assert timeline.snapshot(13).revision == 13
    assert timeline.snapshot(13).owner() is not None


def test_latest_version_wins_and_deleted_removes_the_entry() -> None:
    history = KeyHistory(
        key=KEY,
        inputs=(
            event(1, 1, "RayCluster", "demo"),
            event(2, 2, "Pod", "p", spec={"v": 1}),
            event(3, 3, "Pod", "p", "MODIFIED", spec={"v": 2}),
            event(4, 4, "Pod", "p", "DELETED", spec={"v": 2}),
        ),
    )
    timeline = SnapshotTimeline(history)
    assert timeline.snapshot(2).get("Pod", "p")["spec"] == {"v": 1}  # type: ignore[index]
    assert timeline.snapshot(3).get("Pod", "p")["spec"] == {"v": 2}  # type: ignore[index]
    # An emptied kind is absent, as in a KV read.
    assert "Pod" not in timeline.snapshot(4).entries


def test_going_back_in_revision_rebuilds() -> None:
    history = KeyHistory(key=KEY, inputs=(event(1, 1, "RayCluster", "demo"), event(2, 5, "Pod", "p")))
    timeline = SnapshotTimeline(history)
    assert names(timeline, 5) == {"RayCluster": ["demo"], "Pod": ["p"]}
    assert names(timeline, 2) == {"RayCluster": ["demo"]}
    assert names(timeline, 6) == {"RayCluster": ["demo"], "Pod": ["p"]}


def test_snapshots_do_not_share_maps() -> None:
    history = KeyHistory(key=KEY, inputs=(event(1, 1, "RayCluster", "demo"), event(2, 2, "Pod", "p")))
    timeline = SnapshotTimeline(history)
    before = timeline.snapshot(1)
    timeline.snapshot(2)
    assert "Pod" not in before.entries


def test_observations_are_entries_of_their_obs_kind() -> None:
    history = KeyHistory(key=KEY, inputs=(observation(1, 3, "job-1", {"status": "RUNNING"}),))
    assert SnapshotTimeline(history).snapshot(3).get("obs-rayjob", "job-1") == {"status": "RUNNING"}


def test_owner_uid_follows_incarnations() -> None:
    first = event(1, 1, "RayCluster", "demo")
    gone = event(2, 2, "RayCluster", "demo", "DELETED")
    again = event(3, 3, "RayCluster", "demo", uid="second")
    timeline = SnapshotTimeline(KeyHistory(key=KEY, inputs=(first, gone, again)))
    timeline.advance(1)
    assert timeline.owner_uid == "uid-demo"
    timeline.advance(2)
    assert timeline.owner_uid == "uid-demo"  # decisions after a deletion belong to the deleted incarnation
    timeline.advance(3)
    assert timeline.owner_uid == "second"


def test_complete_history_needs_no_seed() -> None:
    history = KeyHistory(key=KEY, inputs=(event(5, 50, "Pod", "p", "MODIFIED"),))
    timeline = SnapshotTimeline(history)
    assert timeline.complete_from == 0
    assert timeline.complete_at(1)


def test_truncated_history_uses_the_kv_seed_and_knows_what_it_cannot_rebuild() -> None:
    history = KeyHistory(
        key=KEY,
        window=HistoryWindow(events_first_seq=100, truncated=True),
        inputs=(
            event(100, 40, "Pod", "created-later"),  # ADDED: did not exist before
            event(101, 45, "RayCluster", "demo", "MODIFIED"),  # its earlier versions aged out
        ),
        kv_seed=(
            KvSeedEntry(entry_kind="RayCluster", name="demo", revision=45, value=obj("RayCluster", "demo")),
            KvSeedEntry(entry_kind="Service", name="svc", revision=7, value=obj("Service", "svc")),
            KvSeedEntry(entry_kind="Pod", name="old", revision=20, value=None),
        ),
    )
    timeline = SnapshotTimeline(history)
    assert timeline.complete_from == 45
    assert not timeline.complete_at(44)
    assert timeline.complete_at(45)
    # The Service was never rewritten since it aged out: the seed holds its value from revision 7 on.
    assert names(timeline, 45) == {"Pod": ["created-later"], "RayCluster": ["demo"], "Service": ["svc"]}
    assert names(timeline, 10) == {"Service": ["svc"]}
