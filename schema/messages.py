"""Everything that crosses the bus: inputs (watch events, observations, timer ticks), command batches,
command results with confirmed transitions, and dead letters.

Evolution rules (msgspec's): a new field gets a default, a field never changes type, decoders ignore
unknown fields, and a breaking change bumps ``SCHEMA_VERSION``. Tags are explicit snake_case wire names,
never class names, so a rename is safe. Objects from Kubernetes stay free-form ``dict`` on the bus: the
typed ray.io views live in ``schema.ray`` and are decoded where they are read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from schema.keys import KeyKind, ReconcileKey

SCHEMA_VERSION = 1

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"]


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """A Kubernetes object by apiVersion, kind, namespace and name (uid when known)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


class DashboardRef(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach a RayCluster's dashboard: its head Service and port, and its auth Secret if any.

    Only the watcher turns this into a URL (direct, or through the API server's service proxy) and
    reads the token from the Secret, so no credential ever travels on the bus.
    """

    namespace: str
    service: str
    port: int
    cluster: str
    auth_secret: str = ""


class Transition(msgspec.Struct, frozen=True, kw_only=True):
    """A state-machine step of a custom resource, decided by ``reconcile`` and confirmed by the applier.

    ``resource_version`` is the custom resource's version the decision was made on; together with uid,
    field, from and to it identifies the transition, so a redelivered result never duplicates a row.
    ``attributes`` carries step details (cluster names, traffic percentages, ...).
    """

    kind: KeyKind
    uid: str
    namespace: str
    name: str
    field: str
    from_value: str
    to_value: str
    at: datetime
    reason: str = ""
    message: str = ""
    resource_version: str = ""
    attributes: dict[str, str] = {}


class _Input(msgspec.Struct, tag_field="type", frozen=True, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    key: ReconcileKey


class WatchEvent(_Input, tag="watch_event", frozen=True, kw_only=True):
    """A change of a Kubernetes object that belongs to ``key``; ``object`` is the full object.

    ``kv_revision`` is the revision of the projection write that preceded this event, so a reader of
    the KV can wait until its snapshot includes the change. ``kv_previous`` is the revision of the last
    write under the key before that one, as the bucket checked when it stored the write (None: not
    checked): a reader holding the key at that revision or later needs only this event's object to
    hold it at ``kv_revision``.

    ``status_only``: the object is the key's own custom resource and changed in its status alone (most often
    the echo of raybus's own status write). KubeRay does not even reconcile a RayCluster or a RayService on
    such a change; raybus decides on it, but a decision that has nothing to do on such events alone is not
    recorded (:func:`unrecorded_when_unchanged`).
    """

    event_type: WatchEventType
    entry_kind: str
    object: dict[str, Any]
    resource_version: str
    observed_at: datetime
    kv_revision: int = 0
    kv_previous: int | None = None
    status_only: bool = False


class Observation(_Input, tag="observation", frozen=True, kw_only=True):
    """Something the dashboard prober saw change (a Ray job, Serve applications, a proxy's health)."""

    source: str
    entry_name: str
    data: dict[str, Any]
    observed_at: datetime
    kv_revision: int = 0


class TimerTick(_Input, tag="timer", frozen=True, kw_only=True):
    """A wake-up requested by a Decision, delivered by a JetStream message schedule."""

    due_at: datetime
    reason: str = ""


BACKSTOP: Final = "backstop"
"""The ``reason`` of a tick that stands behind a look or wake-up held in a reconciler's memory, in case
that memory is lost. The worker that still holds it answers the tick without a reconcile (no decision
names it); any other worker reconciles it like any tick."""


RESYNC: Final = "resync"
"""The ``reason`` of a key's periodic tick that has it decided again from a fresh snapshot although no event
came (docs/architecture.md#liveness). A decision it brings that has nothing to do is not recorded."""

CONFLICT: Final = "conflict"
"""The ``reason`` of a tick that has a key decided again after the API server refused one of its writes as
stale (409 Conflict, or 404 on an object the snapshot still showed)."""

LANDED: Final = "in-flight commands landed"
"""The ``reason`` of a tick that has a key decided again once its commands in flight landed: a wake-up held
while they were in flight, or a look at a command its latest decision withheld as their twin, whose effect
may bring no event of its own."""


BusInput = WatchEvent | Observation | TimerTick


def is_backstop(message: BusInput) -> bool:
    """Whether ``message`` is a backstop tick (:data:`BACKSTOP`)."""
    return isinstance(message, TimerTick) and message.reason == BACKSTOP


def is_resync(message: BusInput) -> bool:
    """Whether ``message`` is a resync tick (:data:`RESYNC`)."""
    return isinstance(message, TimerTick) and message.reason == RESYNC


def unrecorded_when_unchanged(message: BusInput) -> bool:
    """Whether a decision that has nothing to do (no command, nothing withheld) on inputs that are all like
    ``message`` goes unrecorded: a resync tick, or a change of the key's own status alone
    (``WatchEvent.status_only``). Replay and the stall check count no gap for such an input."""
    return is_resync(message) or (isinstance(message, WatchEvent) and message.status_only)


class _Command(msgspec.Struct, tag_field="type", frozen=True, kw_only=True):
    id: str = ""


class CreateObject(_Command, tag="create_object", frozen=True, kw_only=True):
    """Create ``body``; AlreadyExists on the (deterministic) name counts as done."""

    target: ObjectRef
    body: dict[str, Any]


GENERATE_ANNOTATION: Final = "raybus.io/generate"
"""On the body of a Secret to create: the data keys the applier fills with fresh random values at create
time (``reconcile`` draws no randomness). The one key it knows is ``conventions.AUTH_TOKEN_SECRET_KEY``."""


PatchType = Literal["merge", "json", "strategic"]


class PatchObject(_Command, tag="patch_object", frozen=True, kw_only=True):
    """Patch an object; with ``resource_version`` a Conflict is ``dropped``, and the reconciler that published
    it decides the key again from a fresh snapshot."""

    target: ObjectRef
    patch: dict[str, Any] | list[dict[str, Any]]
    patch_type: PatchType = "merge"
    resource_version: str = ""


Propagation = Literal["Background", "Foreground", "Orphan"]


class DeleteObject(_Command, tag="delete_object", frozen=True, kw_only=True):
    """Delete an object; NotFound counts as done. ``target.uid`` becomes a precondition when set."""

    target: ObjectRef
    propagation: Propagation | None = None


class DeleteCollection(_Command, tag="delete_collection", frozen=True, kw_only=True):
    """Delete every object of a kind in a namespace matching a label selector."""

    api_version: str
    kind: str
    namespace: str
    label_selector: str


class PatchStatus(_Command, tag="patch_status", frozen=True, kw_only=True):
    """Merge-patch ``.status`` through the status subresource; carries the transitions it confirms.

    ``resource_version`` is the custom resource's version the decision saw: a status decided on an older
    view than the server's is refused (409, ``dropped``) and the key decided again, so an older decision
    never overwrites a newer one."""

    target: ObjectRef
    status: dict[str, Any]
    resource_version: str = ""
    transitions: tuple[Transition, ...] = ()


EventKind = Literal["Normal", "Warning"]


class EmitEvent(_Command, tag="emit_event", frozen=True, kw_only=True):
    """Record a Kubernetes Event on ``regarding`` with KubeRay's reason."""

    regarding: ObjectRef
    event_type: EventKind
    reason: str
    message: str


class SubmitRayJob(_Command, tag="submit_ray_job", frozen=True, kw_only=True):
    """POST /api/jobs/; a 500 "Please use a different submission_id" counts as already submitted."""

    dashboard: DashboardRef
    request: dict[str, Any]


class StopRayJob(_Command, tag="stop_ray_job", frozen=True, kw_only=True):
    """POST /api/jobs/<id>/stop; errors are reported, never retried forever."""

    dashboard: DashboardRef
    job_id: str


class PutServeConfig(_Command, tag="put_serve_config", frozen=True, kw_only=True):
    """PUT /api/serve/applications/ with a Serve config (already JSON, not YAML).

    ``record``, when set, is applied right after the PUT and only if the dashboard accepted it: the
    durable record of what the cluster was given (KubeRay updates its in-memory serve-config cache only
    after a successful submission, so a failed PUT is retried on the next pass).
    """

    dashboard: DashboardRef
    config: dict[str, Any]
    record: PatchObject | None = None


Command = (
    CreateObject
    | PatchObject
    | DeleteObject
    | DeleteCollection
    | PatchStatus
    | EmitEvent
    | SubmitRayJob
    | StopRayJob
    | PutServeConfig
)


class CommandBatch(msgspec.Struct, tag_field="type", tag="command_batch", frozen=True, kw_only=True):
    """One decision: its commands, applied in order by one applier, and what it was made from.

    Every reconcile publishes one, even with no commands, so the commands stream is also the decision
    log ``raybus replay`` reads: ``inputs`` are the events-stream sequences coalesced into it,
    ``issued_at`` is the ``now`` it was given, ``snapshot_revision`` the KV revision its snapshot
    reflected. ``id`` is a digest of the key, the input sequences and the snapshot revision, so a
    redelivered input that yields the same decision is de-duplicated by JetStream (Nats-Msg-Id).
    ``suppressed`` lists, for each command the decision contained but the worker withheld because the same
    command of the same key is still in flight, the id of that in-flight twin (a command of an earlier batch, or kept
    earlier in this one; see ``services/reconciler/worker/inflight.py``); the decision itself is
    ``commands`` plus those. Command ids are ``decide``'s (``services/reconciler/worker/decide.py``).

    A decision too large for one message is published as ``parts`` batches with the same ``id``, numbered
    by ``part`` from 0, its commands in order across them (``schema.parts``); ``parts`` is 1 otherwise.

    ``report`` (non-empty: why) marks a batch that is not a decision but shows a failure on the custom
    resource (a Warning Event) after the key's inputs were dead-lettered; the decision log leaves it out.
    """

    schema_version: int = SCHEMA_VERSION
    id: str
    key: ReconcileKey
    issued_at: datetime
    commands: tuple[Command, ...]
    inputs: tuple[int, ...] = ()
    logic_version: int = 1
    snapshot_revision: int = 0
    wake_at: datetime | None = None
    rules: tuple[str, ...] = ()
    suppressed: tuple[str, ...] = ()
    part: int = 0
    parts: int = 1
    report: str = ""


Outcome = Literal["applied", "already_done", "dropped", "failed", "superseded", "denied"]
"""``dropped``: refused by the API server as stale (409 on the resourceVersion the decision saw, or 404: the
object is gone); the target is as it was, and the reconciler that published it decides the key again.
``superseded``: not sent, because the decision no longer held when the applier reached it (a newer
decision of the key exists, or the owner of what it creates is deleted); ``error`` says which.
``denied``: outside its key's authority (the watcher's ``authorize``), content its custom resource does
not imply (``provenance``) or a replayed decision (``freshness``), never executed; ``error`` says why.
The reconciler decides the key again after one too: a check made on facts that lagged the decision must
not leave the key without one."""

TAKEN_EFFECT: Final[frozenset[Outcome]] = frozenset({"applied", "already_done"})
"""Outcomes after which what the command asks for holds; after the others the target is as it was."""

REDECIDE: Final[frozenset[Outcome]] = frozenset({"dropped", "denied"})
"""Outcomes after which the key is decided again from a fresh snapshot (with a backoff while they repeat)."""


class CommandResult(msgspec.Struct, tag_field="type", tag="command_result", frozen=True, kw_only=True):
    """What the applier did with one command; published whether it succeeded or not."""

    schema_version: int = SCHEMA_VERSION
    batch_id: str
    command_id: str
    key: ReconcileKey
    verb: str
    target: str
    outcome: Outcome
    at: datetime
    error: str = ""
    status_code: int = 0
    resource_version: str = ""
    transitions: tuple[Transition, ...] = ()
    trace_id: str = ""
    traceparent: str = ""
    """The W3C trace context of the span that carried the command out: the run's results travel in one
    message, whose headers cannot name each command's span."""
    batch_seq: int = 0
    delivery: int = 1
    """Which delivery of the batch ran the command: a batch redelivered after its applier died runs its
    commands again, and each run is its own result (``batch_seq`` + ``delivery`` + ``command_id``)."""


class ResultBatch(msgspec.Struct, tag_field="type", tag="result_batch", frozen=True, kw_only=True):
    """The results of one run of a command batch (or of a stretch of a long one), published together.

    One message per run rather than one per command: a batch holds several commands, and every message
    is stored, delivered to the reconcilers and the status service, and acknowledged."""

    schema_version: int = SCHEMA_VERSION
    results: tuple[CommandResult, ...]


ResultMessage = ResultBatch | CommandResult
"""What a message of the results stream holds: a batch's results, or one result on its own (a lifecycle
observation of the watch side)."""


class DeadLetter(msgspec.Struct, tag_field="type", tag="dead_letter", frozen=True, kw_only=True):
    """A message that could not be processed, with the reason; the original bytes are kept."""

    schema_version: int = SCHEMA_VERSION
    stream: str
    subject: str
    sequence: int
    deliveries: int
    error: str
    payload: bytes
    at: datetime
    headers: dict[str, str] = {}


def command_verb(command: Command) -> str:
    """The wire tag of a command (``create_object``, ``patch_status``, ...)."""
    # The class's struct config, not msgspec.inspect: this is on the reconcile hot path.
    return str(type(command).__struct_config__.tag)


def command_target(command: Command) -> str:
    """A short human-readable target: ``Kind ns/name`` or the dashboard's cluster."""
    match command:
        case CreateObject() | PatchObject() | DeleteObject() | PatchStatus():
            t = command.target
            return f"{t.kind} {t.namespace}/{t.name}"
        case DeleteCollection():
            return f"{command.kind} {command.namespace} -l {command.label_selector}"
        case EmitEvent():
            r = command.regarding
            return f"Event {r.kind} {r.namespace}/{r.name}"
        case SubmitRayJob() | StopRayJob() | PutServeConfig():
            return f"dashboard {command.dashboard.namespace}/{command.dashboard.cluster}"
