"""The in-flight memory skips the walk of a key while nothing of it can have changed, and asks only about the
keys whose bounds were reached: that must never change what it answers. Random sequences of decisions,
publishes, applies, reported outcomes, sightings and clock steps are run against the memory and against one
that walks every key every time, and every answer, and what each keeps, is compared."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.keys import ReconcileKey
from schema.messages import Command, CommandBatch, CreateObject, EmitEvent, ObjectRef
from services.reconciler.worker.decide import draft
from services.reconciler.worker.inflight import InFlight

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = [ReconcileKey(kind="RayCluster", namespace="ns", name=f"c{i}") for i in range(3)]
PODS = [ObjectRef(api_version="v1", kind="Pod", namespace="ns", name=f"p{i}") for i in range(3)]


class Walking(InFlight):
    """The reference: every question walks the key's commands, and due and prune ask about every key."""

    def _current(self, key: ReconcileKey, applied_floor: int) -> dict[str, Any]:
        return self._live(key, applied_floor)

    def due(self, applied_floor: int) -> dict[ReconcileKey, datetime | None]:
        due: dict[ReconcileKey, datetime | None] = {}
        for key, look in list(self._looks.items()):
            if look.isdisjoint(self._current(key, applied_floor)):
                del self._looks[key]
                due[key] = None
        for key, wake_at in list(self._wakes.items()):
            if not self._current(key, applied_floor):
                del self._wakes[key]
                due.setdefault(key, wake_at)
        return due

    def prune(self, applied_floor: int) -> None:
        for key in list(self._sent):
            if not self._current(key, applied_floor):
                del self._sent[key]


@dataclass(frozen=True)
class Decided:
    key: int
    pods: list[int]
    events: list[int]
    shown: list[int]
    wake: bool


@dataclass(frozen=True)
class Applied:
    batches: int


@dataclass(frozen=True)
class Reported:
    """The applier's outcome of every command of the ``nth`` published batch (when there is one)."""

    nth: int


@dataclass(frozen=True)
class Waited:
    seconds: float


@dataclass(frozen=True)
class Tended:
    pass


def batch(step: Decided) -> CommandBatch:
    commands: tuple[Command, ...] = (
        *(CreateObject(target=PODS[i], body={}) for i in step.pods),
        *(EmitEvent(regarding=PODS[i], event_type="Normal", reason="Created", message=f"p{i}") for i in step.events),
    )
    return (
        draft(
            reconcilers={"RayCluster": lambda s, n, c: Decision(commands=commands)},
            snapshot=Snapshot(key=KEYS[step.key], entries={}),
            now=T0,
            config=OperatorConfig(),
        )
        .outcome()
        .batch
    )


indexes = st.lists(st.integers(0, 2), max_size=3, unique=True)
steps = st.lists(
    st.one_of(
        st.builds(Decided, st.integers(0, 2), indexes, indexes, indexes, st.booleans()),
        st.builds(Applied, st.integers(0, 3)),
        st.builds(Reported, st.integers(0, 5)),
        st.builds(Waited, st.sampled_from([0.1, 0.5, 1.5, 2.5, 9.0, 30.0, 61.0])),
        st.just(Tended()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps)
# a wake-up behind an applied batch, its grace over
@example([Decided(0, [], [0], [], True), Applied(1), Tended(), Waited(2.5), Tended()])
# a create held until it shows, then shown by a decision that decides nothing
@example([Decided(0, [0], [], [], True), Applied(1), Tended(), Waited(2.5), Decided(0, [], [], [0], True), Tended()])
# a withheld create looked at again once it landed
@example([Decided(0, [0], [], [], False), Decided(0, [0], [], [], False), Applied(2), Tended(), Waited(9.0), Tended()])
# a wake-up behind a command whose outcome came while the floor stood still
@example([Decided(0, [], [0], [], True), Reported(0), Tended(), Waited(2.5), Tended()])
def test_skipping_the_walk_answers_as_walking_does(
    program: list[Decided | Applied | Reported | Waited | Tended],
) -> None:
    clock = [0.0]
    memories = [cls(grace=2.0, max_age=60.0, create_hold=10.0, clock=lambda: clock[0]) for cls in (InFlight, Walking)]
    floor, published = 0, 0
    sent: list[CommandBatch] = []
    for step in program:
        if isinstance(step, Decided):
            key = KEYS[step.key]
            entries: dict[str, dict[str, dict[str, Any]]] = {"Pod": {PODS[i].name: {} for i in step.shown}}
            kept = [m.filter(batch(step), applied_floor=floor, entries=entries) for m in memories]
            assert kept[0] == kept[1]
            sent.append(kept[0])
            published += 1
            for m in memories:
                m.published(key, batch_seq=published)
            if step.wake:
                at = T0 + timedelta(seconds=published)
                assert len({m.defer(key, at, applied_floor=floor) for m in memories}) == 1
        elif isinstance(step, Applied):
            floor = min(published, floor + step.batches)
        elif isinstance(step, Reported):
            for command in sent[step.nth].commands if step.nth < len(sent) else ():
                for m in memories:
                    m.reported(sent[step.nth].key, command.id)
        elif isinstance(step, Waited):
            clock[0] += step.seconds
        else:
            assert memories[0].due(floor) == memories[1].due(floor)
            for m in memories:
                m.prune(floor)
            assert memories[0]._sent.keys() == memories[1]._sent.keys()
        assert [memories[0].holds(key) for key in KEYS] == [memories[1].holds(key) for key in KEYS]
