"""The decide step shared by the worker and ``raybus replay``: inputs + snapshot → CommandBatch.

Every decision becomes a batch, with or without commands: the commands stream is the decision log.

It calls the kind's pure ``reconcile`` and turns the Decision into the message that goes on the bus,
with deterministic ids. The command-id rule lives here and only here (every kind's reconcile leaves
``id`` empty): a command's id is a digest of the snapshot revision it was decided on, its content, and
how many identical commands precede it in the decision (:class:`Ids`). So the same decision made
again on the same snapshot (a redelivered input after a worker died) gets the same ids, and its batch,
whose id is a digest of the key, the input sequences and the snapshot revision (:func:`batch_id`), is
de-duplicated by JetStream; a command decided again on a later snapshot is a new command (its Event a new
Event), never taken for the one applied before; and no two commands of one decision share an id. What the
worker withholds as in flight is matched on content or target (``inflight.in_flight_key``), not on ids.

The worker gives ids only to what it publishes (:class:`Draft`): a 5,000-worker scale-up decides the
thousands of creates still in flight again in each decision, and encoding each Pod body to digest it
was half of that decision's cost.

A custom resource whose shape no check anticipated must not crash anything, nor be retried until it is
dead-lettered: :func:`guarded` turns what such an object makes a reconcile raise into a Warning Event on
the object (``Invalid<Kind>Spec``, rule ``<section>/malformed``), for every kind alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import msgspec

from schema.config import OperatorConfig
from schema.decision import Decision, ReconcileFn, Snapshot
from schema.keys import KeyKind
from schema.messages import BusInput, Command, CommandBatch, EmitEvent, ObjectRef, Observation, TimerTick, WatchEvent
from schema.objects import metadata_of, text
from schema.ray.conventions import API_VERSION

_encoder = msgspec.json.Encoder(order="deterministic")

LOGIC_VERSION = 2
"""Bumped with any change that alters the commands for a recorded history, so replay can tell a
logic change from a bug (a change gated on it, never a re-recorded history).

2: every kind's command ids follow :class:`Ids` (RayCluster's were its own, salted with the snapshot
revision, the RayCluster's resourceVersion and the command's position; the other kinds' a digest of the
content alone). Replay compares ids only within one logic version."""


MALFORMED: Final[Mapping[KeyKind, tuple[str, str]]] = {
    "RayCluster": ("4.1/malformed", "InvalidRayClusterSpec"),
    "RayJob": ("5.1/malformed", "InvalidRayJobSpec"),
    "RayService": ("6.1/malformed", "InvalidRayServiceSpec"),
    "RayCronJob": ("7/malformed", "InvalidRayCronJobSpec"),
}
"""The rule id and Event reason of a custom resource that could not be reconciled, by kind."""

_SHAPE_ERRORS: Final = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    RecursionError,
    OverflowError,
    msgspec.ValidationError,
)
"""What reading a field of an unexpected type or size raises (a bug raises something else, and is retried
and then dead-lettered like any failure)."""


@dataclass(frozen=True)
class Outcome:
    """A decision and the batch that records it (published even when it has no commands)."""

    decision: Decision
    batch: CommandBatch


class Ids:
    """The command-id rule for one decision: :meth:`give` each command its id, in the decision's order.

    A command may be skipped (never given an id) when it is withheld as in flight by a key that only
    depends on its content (``inflight.in_flight_key``): every later command of the decision with the same
    content is then withheld as well, so each command given an id counts the same identical commands
    before it as if all had been given one. (Not so for a decision that would create an object, delete it
    and create it again alike: a delete ends a create's flight, ``inflight._forget_create``; no reconcile
    decides that.)"""

    def __init__(self, snapshot_revision: int) -> None:
        self._revision = snapshot_revision
        self._seen: dict[str, int] = {}

    def count(self, command: Command) -> tuple[str, int]:
        """``command``'s content digest and how many identical commands were counted before it; counts it."""
        content = content_digest(command)
        return content, self.claim(content)

    def counted(self, content: str) -> int:
        """How many commands of content digest ``content`` were counted so far."""
        return self._seen.get(content, 0)

    def claim(self, content: str) -> int:
        """Count one more command of content digest ``content``; returns how many were counted before it."""
        count = self._seen.get(content, 0)
        self._seen[content] = count + 1
        return count

    def name(self, command: Command, content: str, count: int) -> Command:
        """``command`` with the id of what :meth:`count` returned for it (whatever id reconcile left is
        replaced): a command withheld as in flight after being counted needs no id."""
        seed = f"{self._revision}/{content}/{count}"
        return msgspec.structs.replace(command, id=hashlib.blake2b(seed.encode(), digest_size=12).hexdigest())

    def tentative(self, command: Command) -> tuple[Command, str]:
        """``command`` with the id it gets if it is the next of its content to be counted (:meth:`claim`
        counts it), and its content digest."""
        content = content_digest(command)
        return self.name(command, content, self.counted(content)), content

    def give(self, command: Command) -> tuple[Command, str]:
        """``command`` with its id, and its content digest."""
        content, count = self.count(command)
        return self.name(command, content, count), content

    def every(self, commands: Sequence[Command]) -> tuple[Command, ...]:
        """Each of ``commands`` with its id, none withheld."""
        return tuple(self.give(command)[0] for command in commands)


@dataclass(frozen=True)
class Draft:
    """A decision before its commands have ids: ``batch`` is its record with reconcile's commands as they
    are (the worker gives ids only to the commands it publishes)."""

    decision: Decision
    batch: CommandBatch

    def ids(self) -> Ids:
        """A fresh id rule for this decision's commands."""
        return Ids(self.batch.snapshot_revision)

    def outcome(self) -> Outcome:
        """The decision with every command identified (what the worker publishes when nothing of the key
        is in flight)."""
        commands = self.ids().every(self.decision.commands)
        return Outcome(
            decision=msgspec.structs.replace(self.decision, commands=commands),
            batch=msgspec.structs.replace(self.batch, commands=commands),
        )


def input_time(message: BusInput) -> datetime:
    """The time an input happened: ``now`` for the reconcile it triggers."""
    match message:
        case WatchEvent() | Observation():
            return message.observed_at
        case TimerTick():
            return message.due_at


def decision_time(inputs: Sequence[BusInput]) -> datetime:
    """``now`` for a reconcile of several coalesced inputs: the latest of their times."""
    return max(input_time(message) for message in inputs)


def min_revision(inputs: Sequence[BusInput]) -> int:
    """The KV revision a snapshot must reflect to include every input."""
    return max((getattr(message, "kv_revision", 0) for message in inputs), default=0)


def content_digest(command: Command) -> str:
    """Digest of a command's content, its ``id`` field excluded."""
    body = _encoder.encode(msgspec.structs.replace(command, id="") if command.id else command)
    return hashlib.blake2b(body, digest_size=12).hexdigest()


def batch_id(key_token: str, sequences: Sequence[int], snapshot_revision: int) -> str:
    """Digest of key, input sequences and snapshot revision: what determines a decision (``reconcile`` is
    pure), so a decision made again on the same inputs and snapshot is stored once."""
    h = hashlib.blake2b(digest_size=16)
    h.update(key_token.encode())
    h.update(",".join(map(str, sorted(sequences))).encode())
    h.update(f"@{snapshot_revision}".encode())
    return h.hexdigest()


def malformed(snapshot: Snapshot, error: BaseException) -> Decision:
    """The decision for a custom resource its reconcile could not handle: a Warning Event on it."""
    owner = snapshot.owner()
    if owner is None:
        return Decision()
    key = snapshot.key
    rule, reason = MALFORMED[key.kind]
    metadata = metadata_of(owner)
    ref = ObjectRef(
        api_version=API_VERSION,
        kind=key.kind,
        namespace=text(metadata.get("namespace")) or key.namespace,
        name=text(metadata.get("name")) or key.name,
        uid=text(metadata.get("uid")),
    )
    message = f"{key.kind} could not be reconciled, it is malformed: {type(error).__name__}: {error}"
    return Decision(
        commands=(EmitEvent(regarding=ref, event_type="Warning", reason=reason, message=message),), rules=(rule,)
    )


def guarded(reconcile: ReconcileFn) -> ReconcileFn:
    """``reconcile`` that never raises on a malformed custom resource (see :func:`malformed`)."""

    def run(snapshot: Snapshot, now: datetime, config: OperatorConfig) -> Decision:
        try:
            return reconcile(snapshot, now, config)
        except _SHAPE_ERRORS as exc:
            return malformed(snapshot, exc)

    return run


def draft(
    *,
    reconcilers: Mapping[KeyKind, ReconcileFn],
    snapshot: Snapshot,
    now: datetime,
    config: OperatorConfig,
    sequences: Sequence[int] = (),
) -> Draft:
    """Run the kind's reconcile; its commands get their ids from the draft's ``ids`` (all of them:
    :meth:`Draft.outcome`).

    Raises:
        KeyError: no reconcile is registered for the key's kind.
    """
    decision = guarded(reconcilers[snapshot.key.kind])(snapshot, now, config)
    batch = CommandBatch(
        id=batch_id(snapshot.key.token(), sequences, snapshot.revision),
        key=snapshot.key,
        issued_at=now,
        commands=decision.commands,
        inputs=tuple(sequences),
        logic_version=LOGIC_VERSION,
        snapshot_revision=snapshot.revision,
        wake_at=decision.wake_at,
        rules=decision.rules,
    )
    return Draft(decision=decision, batch=batch)
