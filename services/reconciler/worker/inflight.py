"""Withholding commands that are already in flight: raybus's answer to KubeRay's scale expectations.

Between the moment a command is published and the moment its effect is visible in the snapshot, every
other event of the key is reconciled on a snapshot that does not show the effect yet, so reconcile
decides the same create, status patch or Event again. That is harmless (commands are idempotent) but
costly: under load each repeat adds applier work, which adds lag, which adds repeats. KubeRay avoids it
with in-memory expectations that skip a worker group until its cache caught up; raybus keeps
``reconcile`` pure and lets the worker remember, per key, what it published and withhold the same
command (:func:`in_flight_key`: a create of the same object, else an identical one) while the first is
still in flight. A command's id names it in one decision only (``decide.Ids``), so what a batch records
as withheld (``suppressed``) is the id of the in-flight twin that stands for it: the applier then knows
which of an older batch's commands a newer decision still wants (``services/edge/apply/staleness.py``).

"In flight" means: the applier has not yet reported the command's outcome (:meth:`InFlight.reported`, from
the result it publishes) nor acknowledged the batch that carries it (the applier consumer's ack floor is
below the batch's stream sequence), or it did so less than ``grace`` seconds ago (the time its watch event
takes to reach the KV). The result is the precise signal; the floor is the one that cannot be missed. The
floor alone would tie every key of a partition to its slowest batch: batches of different keys are applied
side by side, and one waiting on a dashboard that does not answer holds the floor for its timeout, so the
other keys' applied commands would keep counting as in flight and their wake-ups would wait with them.
A time cap (``max_age``) bounds the memory when the applier is stuck, like an expired expectation: it
counts from when the command was sent or, if later, from when the applier last made progress (its ack
floor rose), so a long queue that is being worked through (a 2,000-worker scale-up is some 4,000 API calls
for one key, applied in order) does not make the worker decide the same commands again while the first
ones wait their turn. Withheld ids are recorded in the batch (``suppressed``), so the decision log still
holds the whole decision and replay stays exact. The memory is per worker and may be lost (restart,
partition hand-over): then a duplicate is simply applied, which is safe; a look or wake-up it held is
backed by a durable tick at most ``max_age`` later (the consumer's backstop).

A withheld create or delete may be needed after all (its twin was a no-op, e.g. an AlreadyExists on a
Pod still terminating), and so may a withheld patch of the same object version (its twin changed nothing,
so the server kept the version); then no further event may come: the key is due for another look when
that command's memory expires (:meth:`InFlight.due`), once, not on a fixed period while the applier is
still behind.

A batch that creates objects stays in flight beyond the grace, until the snapshot shows what it created
(at most ``create_hold`` seconds after it was applied): when the watch lags more than the grace behind
the applier, the next reconcile does not see the new Pod yet and would create it (and announce it with an
Event) again. KubeRay's expectations wait the same way for a created Pod to show in its cache (30 s).
An Event that announces a create or a delete (the controllers emit it right after the act, naming the
object) goes out whenever its act does (:func:`announces`): a Pod deleted and created again under the same
name while the first create's batch is still held gets its Events again, as KubeRay's recorder would.
A batch that submits a Ray job is held the same way until the prober's answer in the snapshot shows the
dashboard knows the job (``schema.probes.job_known``): until then every reconcile sees "not found" and
would submit it again.

A write the API server refused as stale (the applier's outcome ``dropped``: a 409 Conflict on the
resourceVersion the decision saw, or a 404 on an object its snapshot still showed) is no end: the decision
it belonged to was made on a view older than the server's, and no event is sure to follow (an edge can be
lost). Once the refused command is out of flight the key is due for a fresh decision
(:meth:`InFlight.refused`), at once the first time and after a growing pause when refusals follow each
other (the watch has not caught up yet: each decision on the same stale view is refused again).

Likewise a decision's own wake-up is deferred while commands of its key are in flight
(:meth:`InFlight.defer`): a reconcile on a snapshot that does not show them yet decides them again.
The wake-up comes at its time or when they have landed, whichever is later. Without this, the
RayCluster's 2-second requeue after each status write (KubeRay's rule) fired some thirty times per
cluster while 1000 new clusters' status writes waited in the applier's queue: two thirds of all
reconciles.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec

from schema.decision import OBS_RAY_JOB
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandBatch,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    PatchObject,
    PatchStatus,
    SubmitRayJob,
    command_target,
    command_verb,
)
from schema.probes import job_known
from services.reconciler.worker.decide import Ids, content_digest
from services.runtime.backoff import Backoff
from services.runtime.clock import Clock, Monotonic, utc_now

_NEVER_SEQ: Final = 2**63
"""Above every stream sequence: no command of the key waits for the applier."""

REFUSAL_BACKOFF: Final = Backoff(base=1.0, cap=60.0)
"""Pause before a key is decided again after its second, third, ... refused write in a row (the first is
decided again at once): while the watch lags behind the server, every decision repeats the refused one."""
REFUSAL_MEMORY: Final = 120.0
"""Seconds after which a key's refusals no longer count as "in a row"."""
_REFUSALS_KEPT: Final = 4096
"""Keys with a refusal remembered, above which those older than :data:`REFUSAL_MEMORY` are forgotten."""


def target_key(command: Command) -> str | None:
    """:func:`in_flight_key` of a command that is "the same" as another by its target alone, else None.

    A create: the object it names either exists or not, whatever the body; a second create of it while
    the first is in flight is an AlreadyExists at best. A patch with a resourceVersion precondition: only
    one patch per object version can succeed (the rest get 409 Conflict), and the object's next watch event
    brings a fresh decision (or, if the first changed nothing, the look :meth:`InFlight.filter` registers
    for a command withheld by its target). Neither
    needs its content encoded to be matched, which keeps a 5,000-worker scale-up from digesting every Pod
    still in flight in each decision."""
    if isinstance(command, CreateObject):
        return _create_key(command_target(command))
    if isinstance(command, PatchStatus | PatchObject) and command.resource_version:
        return f"{command_verb(command)}/{command_target(command)}@{command.resource_version}"
    return None


def _create_key(target: str) -> str:
    return f"create/{target}"


def _forget_create(live: dict[str, Any], command: Command) -> None:
    """A delete decided after a create of the same object ends that create's flight: once it is deleted, a
    create of the same name is a new object (a RayJob's retry submits a new Job of the same name). A
    collection delete ends the flight of every create of its kind in its namespace (forgetting one too
    many costs at most an AlreadyExists)."""
    if isinstance(command, DeleteObject):
        live.pop(_create_key(command_target(command)), None)
    elif isinstance(command, DeleteCollection):
        prefix = _create_key(f"{command.kind} {command.namespace}/")
        for key in [key for key in live if key.startswith(prefix)]:
            del live[key]


def in_flight_key(command: Command, content: str | None = None) -> str:
    """What makes two commands "the same" while one is in flight: the target (:func:`target_key`), else the
    whole content (``content``: its ``content_digest`` when already known)."""
    key = target_key(command)
    if key is not None:
        return key
    return content_digest(command) if content is None else content


@dataclass(slots=True)
class _Kept:
    command_id: str
    content: str = ""
    """A create's content digest ("" when not known): what tells a corrected create from a repeat."""


@dataclass
class _Sent:
    command_id: str
    batch_seq: int
    sent_at: float
    content: str = ""
    applied_at: float | None = None
    took_effect: bool = True
    """False once its outcome said the target is as it was (the create failed or was refused)."""


def announces(command: Command, act: CreateObject | DeleteObject) -> bool:
    """Whether ``command`` is the Event that announces ``act``, a create or delete: the controllers emit it
    right after the act, naming its object (``<namespace>/<name>``, at the end or before a ``;``).

    Such an Event goes out whenever its act does. Matched like any Event, against an identical one still
    in flight, it would be withheld when an object is deleted and created again under the same name while
    the first create's batch is held, or a Pod of that name deleted again soon (its delete differs by the
    Pod's uid, its Event not)."""
    if not isinstance(command, EmitEvent):
        return False
    named = f" {act.target.namespace}/{act.target.name}"
    return command.message.endswith(named) or f"{named};" in command.message


def _retried_otherwise(sent: _Sent, command: Command) -> bool:
    """Whether ``command`` is a create that its target's in-flight twin does not stand for: that create was
    not made, and this one has another body (its template was corrected after the failure). The same
    body again waits out the twin's memory, so a create that keeps failing is not sent at every decision."""
    return (
        not sent.took_effect
        and bool(sent.content)
        and isinstance(command, CreateObject)
        and content_digest(command) != sent.content
    )


@dataclass(frozen=True)
class Recalled:
    """A batch of the key read back from the commands stream, stored ``age`` seconds ago."""

    seq: int
    age: float
    batch: CommandBatch


Target = tuple[str, str]
"""``(kind, name)`` of the snapshot entry that shows a command landed: the object it creates, or the
prober's answer about the job it submits."""


def _target(command: Command) -> Target | None:
    if isinstance(command, CreateObject):
        return (command.target.kind, command.target.name)
    if isinstance(command, SubmitRayJob) and isinstance(job_id := command.request.get("submission_id"), str):
        return (OBS_RAY_JOB, job_id)
    return None


def _shown(entries: Mapping[str, Mapping[str, Any]], target: Target) -> bool:
    kind, name = target
    entry = entries.get(kind, {}).get(name)
    if entry is None:
        return False
    return job_known(entry) if kind == OBS_RAY_JOB else True


class InFlight:
    """Commands published per key, until applied (plus ``grace``, or until what the batch starts shows,
    at most ``create_hold`` after it was applied) or ``max_age``."""

    def __init__(
        self,
        *,
        grace: float,
        max_age: float,
        create_hold: float = 0.0,
        clock: Monotonic = time.monotonic,
        wall: Clock = utc_now,
    ) -> None:
        self._grace = grace
        self._max_age = max_age
        self._create_hold = create_hold
        self._clock = clock
        self._wall = wall
        self._refused: dict[ReconcileKey, str] = {}
        """Key → the id of its command the server refused, until it is out of flight and the key is due."""
        self._refusals: dict[ReconcileKey, tuple[int, float]] = {}
        """Key → its refusals in a row and when the last was reported (the pause before the next decision)."""
        self._recheck_refused: set[ReconcileKey] = set()
        self._sent: dict[ReconcileKey, dict[str, _Sent]] = {}
        self._pending: dict[ReconcileKey, tuple[dict[str, _Kept], set[Target]]] = {}
        self._unseen: dict[ReconcileKey, dict[int, set[Target]]] = {}
        self._looks: dict[ReconcileKey, set[str]] = {}
        self._wakes: dict[ReconcileKey, datetime] = {}
        self._settled: dict[ReconcileKey, tuple[int, float]] = {}
        """Key → the lowest batch sequence of its not yet applied commands and the earliest time one of its
        commands can expire: until the floor or the clock reaches either, its live set is what ``_sent``
        holds."""
        self._by_seq: list[tuple[float, int, ReconcileKey]] = []
        self._by_time: list[tuple[float, int, ReconcileKey]] = []
        """Heaps of the settled keys by those two bounds (entries of keys settled again since are stale and
        only cost a look): :meth:`due` and :meth:`prune` ask only about the keys a bound was reached for,
        instead of every key in memory four times a second (10,000 keys: a tenth of a reconciler's CPU)."""
        self._pushed = 0
        """Tie-breaker of the heaps' entries (keys do not order)."""
        self._recheck_due: set[ReconcileKey] = set()
        self._recheck_prune: set[ReconcileKey] = set()
        """Keys whose live commands may have changed since :meth:`due` / :meth:`prune` last asked."""
        self._reported: dict[ReconcileKey, dict[str, tuple[float, bool]]] = {}
        """Key → ids of its commands whose outcome the applier published, when that was seen and whether the
        command took effect; read (and forgotten) at the key's next walk."""
        self._floor = 0
        self._floor_rose_at = float("-inf")

    def filter(
        self,
        batch: CommandBatch,
        *,
        applied_floor: int,
        entries: Mapping[str, Mapping[str, Any]] | None = None,
        ids: Ids | None = None,
    ) -> CommandBatch:
        """``batch`` without the commands the same as ones of its key still in flight (or as one earlier in
        the batch); each withheld command is recorded in ``suppressed`` by the id of that twin.

        ``applied_floor`` is the applier's ack floor on RAYBUS_COMMANDS: every batch at or below it
        has been applied. ``entries`` is the snapshot the batch was decided on: what it shows of the
        key's earlier creates has landed. ``ids``, when given, is the id rule of ``batch``'s commands,
        which have none yet (``decide.Draft``): only those kept are given theirs.
        """
        # The latest decision of a key says what it still wants.
        self._looks.pop(batch.key, None)
        self._wakes.pop(batch.key, None)
        self._refused.pop(batch.key, None)
        self._changed(batch.key)
        if entries is not None:
            self._seen(batch.key, entries)
        if not batch.commands:
            return batch
        if self._max_age <= 0:
            if ids is None:
                return batch
            return msgspec.structs.replace(batch, commands=ids.every(batch.commands))
        sent = self._live(batch.key, applied_floor)
        kept: list[Command] = []
        withheld: list[str] = []
        fresh: dict[str, _Kept] = {}
        look: set[str] = set()
        starts: set[Target] = set()
        sent_act: CreateObject | DeleteObject | None = None  # the command before, when it is an act sent
        for command in batch.commands:
            key = target_key(command)
            by_target = key is not None
            counted: int | None = None
            if key is None:
                if ids is None:
                    key = content_digest(command)
                else:
                    key, counted = ids.count(command)
            in_flight = sent.get(key)
            if in_flight is not None and _retried_otherwise(in_flight, command):
                in_flight = None
            if sent_act is not None and announces(command, sent_act):
                in_flight = None  # its act is sent: so is the Event that announces it
            twin = in_flight or fresh.get(key)
            sent_act = command if isinstance(command, CreateObject | DeleteObject) and twin is None else None
            if twin is not None:
                withheld.append(twin.command_id)
                # Its twin's effect may bring no event of its own: a create or delete may be a no-op
                # (AlreadyExists, NotFound), and a twin matched by its target alone may carry other content
                # and change nothing on the server (a status write of the same second that only carries
                # transitions), so what this one wanted would wait for the key's resync.
                if by_target or isinstance(command, DeleteObject | DeleteCollection):
                    look.add(key)
                continue
            content = ""
            if ids is not None:
                if counted is None:
                    command, content = ids.give(command)
                else:
                    command = ids.name(command, key, counted)
            kept.append(command)
            fresh[key] = _Kept(command.id, content if isinstance(command, CreateObject) else "")
            _forget_create(sent, command)
            _forget_create(fresh, command)
            if (target := _target(command)) is not None:
                starts.add(target)
        self._pending[batch.key] = (fresh, starts)
        if look:
            self._looks[batch.key] = look
        if not withheld and ids is None:
            return batch
        return msgspec.structs.replace(batch, commands=tuple(kept), suppressed=tuple(withheld))

    def restore(self, key: ReconcileKey, recalled: Sequence[Recalled]) -> None:
        """Take over what another worker published for ``key`` (``handover.py``): each command as sent
        when its batch was stored, the parts of one decision under the sequence of its last part."""
        now = self._clock()
        last_part = {r.batch.id: r.seq for r in recalled}
        sent = self._sent.setdefault(key, {})
        self._changed(key)
        for r in recalled:
            seq = last_part[r.batch.id]
            for command in r.batch.commands:
                sent[in_flight_key(command)] = _Sent(command_id=command.id, batch_seq=seq, sent_at=now - r.age)
                _forget_create(sent, command)
            starts = {t for t in map(_target, r.batch.commands) if t is not None}
            if starts and self._create_hold > 0:
                self._unseen.setdefault(key, {}).setdefault(seq, set()).update(starts)

    def published(self, key: ReconcileKey, batch_seq: int) -> None:
        """Record that the commands kept by the last :meth:`filter` of ``key`` are in ``batch_seq``."""
        now = self._clock()
        sent = self._sent.setdefault(key, {})
        self._changed(key)
        fresh, starts = self._pending.pop(key, ({}, set()))
        for command_key, kept in fresh.items():
            sent[command_key] = _Sent(kept.command_id, batch_seq, now, kept.content)
        if starts and self._create_hold > 0:
            self._unseen.setdefault(key, {})[batch_seq] = starts

    def tracks(self, key: ReconcileKey) -> bool:
        """Whether commands of ``key`` published (or being published) here may still be in flight."""
        return key in self._sent or key in self._pending

    def reported(self, key: ReconcileKey, command_id: str, *, took_effect: bool = True, refused: bool = False) -> None:
        """The applier published the outcome of ``command_id`` of ``key``: the command is applied, whatever the
        outcome (a failed call was retried by the applier already; a superseded one is not made at all).
        ``took_effect`` False (``schema.messages.TAKEN_EFFECT``): a create of the same object with another
        body is no longer withheld as its twin.

        Outcomes of keys with nothing in flight here are ignored (the memory stays bounded by what this
        worker published); one that arrives before :meth:`published` recorded its command, or is never
        seen, leaves the command to the ack floor.

        ``refused`` (the outcome ``dropped``): the server refused the write as stale, so the key is due for a
        fresh decision once the command is out of flight (:meth:`refused`), also when this memory does not
        hold the command (published by the partition's former owner, or kept here past ``max_age``)."""
        if not self.tracks(key) and not refused:
            return
        now = self._clock()
        if self.tracks(key):
            self._reported.setdefault(key, {})[command_id] = (now, took_effect)
        if refused:
            self._refused[key] = command_id
            count, last = self._refusals.get(key, (0, float("-inf")))
            self._refusals[key] = (count + 1 if now - last < REFUSAL_MEMORY else 1, now)
            if len(self._refusals) > _REFUSALS_KEPT:
                self._refusals = {k: v for k, v in self._refusals.items() if now - v[1] < REFUSAL_MEMORY}
        self._changed(key)

    def _seen(self, key: ReconcileKey, entries: Mapping[str, Mapping[str, Any]]) -> None:
        unseen = self._unseen.get(key)
        if not unseen:
            return
        self._changed(key)  # a hold may end here
        for batch_seq, targets in list(unseen.items()):
            targets.difference_update([t for t in targets if _shown(entries, t)])
            if not targets:
                del unseen[batch_seq]
        if not unseen:
            del self._unseen[key]

    def _current(self, key: ReconcileKey, applied_floor: int) -> dict[str, _Sent]:
        """What :meth:`_live` would return, without the walk while nothing of the key can have changed."""
        now = self._clock()
        settled = self._settled.get(key)
        if settled is None or applied_floor >= settled[0] or now >= settled[1]:
            return self._live(key, applied_floor)
        self._note_floor(applied_floor, now)
        return self._sent.get(key, {})

    def _changed(self, key: ReconcileKey) -> None:
        """Forget what was settled of ``key``: it is walked at its next question, and asked about again."""
        self._settled.pop(key, None)
        self._recheck_due.add(key)
        self._recheck_prune.add(key)
        self._recheck_refused.add(key)

    def _reached(self, applied_floor: int) -> None:
        """Mark the keys whose settled bounds the floor or the clock reached."""
        now = self._clock()
        for heap, bound in ((self._by_seq, applied_floor), (self._by_time, now)):
            while heap and heap[0][0] <= bound:
                key = heapq.heappop(heap)[2]
                self._recheck_due.add(key)
                self._recheck_prune.add(key)
                self._recheck_refused.add(key)

    def _note_floor(self, applied_floor: int, now: float) -> None:
        if applied_floor > self._floor:
            self._floor, self._floor_rose_at = applied_floor, now

    def _live(self, key: ReconcileKey, applied_floor: int) -> dict[str, _Sent]:
        now = self._clock()
        self._note_floor(applied_floor, now)
        live: dict[str, _Sent] = {}
        unseen = self._unseen.get(key, {})
        unapplied, check_at = _NEVER_SEQ, float("inf")
        reported = self._reported.pop(key, {})
        for command_key, sent in self._sent.get(key, {}).items():
            if sent.applied_at is None:
                if sent.command_id in reported:
                    sent.applied_at, sent.took_effect = reported[sent.command_id]
                elif sent.batch_seq <= applied_floor:
                    sent.applied_at = now
            applied_for = None if sent.applied_at is None else now - sent.applied_at
            held = sent.batch_seq in unseen and applied_for is not None and applied_for < self._create_hold
            aged_at = max(sent.sent_at, self._floor_rose_at) + self._max_age
            expired = now >= aged_at or (applied_for is not None and applied_for >= self._grace and not held)
            if not expired:
                live[command_key] = sent
                if sent.applied_at is None:
                    unapplied = min(unapplied, sent.batch_seq)
                    check_at = min(check_at, aged_at)
                else:
                    check_at = min(check_at, aged_at, sent.applied_at + (self._create_hold if held else self._grace))
        self._sent[key] = live
        self._settled[key] = (unapplied, check_at)
        self._pushed += 1
        if unapplied < _NEVER_SEQ:
            heapq.heappush(self._by_seq, (unapplied, self._pushed, key))
        if check_at < float("inf"):
            heapq.heappush(self._by_time, (check_at, self._pushed, key))
        if not live:
            self._recheck_prune.add(key)
        if unseen:
            # What a batch created matters only while some command of the batch is in flight.
            for batch_seq in unseen.keys() - {sent.batch_seq for sent in live.values()}:
                del unseen[batch_seq]
            if not unseen:
                del self._unseen[key]
        return live

    @property
    def max_age(self) -> float:
        """Seconds after which nothing published counts as in flight any more."""
        return self._max_age

    def sending(self, key: ReconcileKey) -> bool:
        """Whether commands of ``key`` are remembered as sent (which of them landed depends on the applied
        floor)."""
        return bool(self._sent.get(key))

    def holds(self, key: ReconcileKey) -> bool:
        """Whether a look or a wake-up of ``key`` waits in this memory (lost if the worker goes)."""
        return key in self._looks or key in self._wakes

    def held_wake(self, key: ReconcileKey) -> datetime | None:
        """The wake-up of ``key`` held by :meth:`defer`, if any."""
        return self._wakes.get(key)

    def defer(self, key: ReconcileKey, wake_at: datetime, *, applied_floor: int) -> bool:
        """Hold the latest decision's wake-up while commands of ``key`` are in flight; returns whether
        it was held (else it is the caller's to schedule now)."""
        if not self._current(key, applied_floor):
            return False
        self._wakes[key] = wake_at
        return True

    def due(self, applied_floor: int) -> dict[ReconcileKey, datetime | None]:
        """Keys to reconcile again, each returned once, with when: ``None`` (now) when its latest decision
        withheld a create, a delete or a command matched by its target that is no longer in flight (its
        twin's effect may bring no event of its own), else the held wake-up of a key with nothing in flight any more."""
        self._reached(applied_floor)
        keys, self._recheck_due = self._recheck_due, set()
        due: dict[ReconcileKey, datetime | None] = {}
        for key in keys:
            look = self._looks.get(key)
            if look is not None and look.isdisjoint(self._current(key, applied_floor)):
                del self._looks[key]
                due[key] = None
        for key in keys:
            wake_at = self._wakes.get(key)
            if wake_at is not None and not self._current(key, applied_floor):
                del self._wakes[key]
                due.setdefault(key, wake_at)  # a look now comes first: its reconcile decides the wake again
        return due

    def refused(self, applied_floor: int) -> dict[ReconcileKey, datetime]:
        """Keys to decide again because the server refused one of their writes as stale, each returned once,
        with when: once the refused command is out of flight, at once after a first refusal, after
        :data:`REFUSAL_BACKOFF` when refusals follow each other."""
        self._reached(applied_floor)
        keys, self._recheck_refused = self._recheck_refused, set()
        due: dict[ReconcileKey, datetime] = {}
        for key in keys:
            command_id = self._refused.get(key)
            if command_id is None:
                continue
            if any(sent.command_id == command_id for sent in self._current(key, applied_floor).values()):
                continue
            del self._refused[key]
            count = self._refusals.get(key, (1, 0.0))[0]
            pause = REFUSAL_BACKOFF.delay(count - 1) if count > 1 else 0.0
            due[key] = self._wall() + timedelta(seconds=pause)
        return due

    def prune(self, applied_floor: int) -> None:
        """Drop keys with nothing in flight any more (bounded memory for idle keys)."""
        self._reached(applied_floor)
        keys, self._recheck_prune = self._recheck_prune, set()
        for key in keys:
            if key in self._sent and not self._current(key, applied_floor):
                del self._sent[key]
                self._settled.pop(key, None)
                self._reported.pop(key, None)
