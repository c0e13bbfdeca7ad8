"""What the worker does when a key's inputs are dead-lettered: it tells the custom resource.

A reconcile that still fails after its retries (reconcile raised, the snapshot could not be read, or the
decision could not be published) parks its inputs in the dead-letter stream; that alone is invisible to
the user. The worker then publishes a small separate batch on the key's commands subject with one
command, a Warning Event on the custom resource, which the applier writes like any other (the worker has
no Kubernetes credentials). The batch is marked as a ``report``: it is not a decision, and ``raybus
replay`` leaves it out of the decision log.

When even that publish fails (NATS is what failed), the failure is logged with the key and counted in
``raybus_failure_reports_lost_total``; the dead letter (if it could be stored) still holds the inputs.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from schema import subjects
from schema.codec import encode
from schema.keys import ReconcileKey
from schema.messages import BusInput, CommandBatch, EmitEvent, ObjectRef, WatchEvent
from schema.ray import conventions
from services.runtime.bus import publish
from services.runtime.metrics import Tally, meter

log = logging.getLogger(__name__)
_meter = meter(__name__)
_reported = Tally(
    _meter, "raybus_failures_reported_total", description="failures shown on their custom resource as a Warning Event"
)
_lost = Tally(
    _meter,
    "raybus_failure_reports_lost_total",
    description="failures that could not even be reported (NATS unreachable)",
)

REASON: Final = "FailedToReconcile"
"""Event reason of a key whose inputs were dead-lettered (KubeRay has no such event: it retries forever)."""
MAX_MESSAGE: Final = 1000


def identity_only(message: BusInput) -> BusInput:
    """``message`` with only the name and uid of the object a watch event carries: all that a worker reads
    of it (:func:`owner_uid`), since it reconciles on the snapshot. A partition holds a fetch's inputs
    until every key of the fetch is reconciled, and whole Pods in them were most of a worker's memory."""
    if not isinstance(message, WatchEvent):
        return message
    metadata = message.object.get("metadata")
    kept = {field: metadata.get(field) for field in ("name", "uid")} if isinstance(metadata, dict) else {}
    return msgspec.structs.replace(message, object={"metadata": kept})


def owner_uid(key: ReconcileKey, inputs: Sequence[BusInput]) -> str:
    """The custom resource's uid as the latest watch event of it among ``inputs`` shows it ("" if none)."""
    for message in reversed(inputs):
        if isinstance(message, WatchEvent) and message.entry_kind == key.kind:
            metadata = message.object.get("metadata") or {}
            if metadata.get("name") == key.name:
                return str(metadata.get("uid") or "")
    return ""


def failure_report(
    key: ReconcileKey,
    *,
    uid: str,
    sequences: Sequence[int],
    reason: str,
    now: datetime,
    event_reason: str = REASON,
    message: str = "",
) -> CommandBatch:
    """The batch that shows ``reason`` on the key's custom resource as a Warning Event ``event_reason``
    (de-duplicated per set of inputs and reason); ``message`` replaces the Event's default text."""
    message = message or f"raybus could not reconcile {key.kind} {key.namespace}/{key.name}: {reason}"
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    event = EmitEvent(
        id=f"{'report' if event_reason == REASON else event_reason}-{','.join(map(str, sorted(sequences)))}",
        regarding=ObjectRef(
            api_version=conventions.API_VERSION, kind=key.kind, namespace=key.namespace, name=key.name, uid=uid
        ),
        event_type="Warning",
        reason=event_reason,
        message=message,
    )
    digest = hashlib.blake2b(f"{key.token()}/report/{event.id}".encode(), digest_size=16).hexdigest()
    return CommandBatch(id=digest, key=key, issued_at=now, commands=(event,), report=reason[:MAX_MESSAGE])


async def report_failure(
    js: JetStreamContext, key: ReconcileKey, *, uid: str, sequences: Sequence[int], reason: str
) -> bool:
    """Publish the failure report of ``key``; False (logged and counted) when NATS refused it too."""
    batch = failure_report(key, uid=uid, sequences=sequences, reason=reason, now=datetime.now(UTC))
    try:
        await publish(js, subjects.command_subject(key), encode(batch), msg_id=batch.id)
    except (NatsError, TimeoutError) as exc:
        _lost.add(1, {"raybus.kind": key.kind})
        log.error("could not report the failure of %s on it (%s): %s", key, exc, reason, extra={"raybus.key": str(key)})
        return False
    _reported.add(1, {"raybus.kind": key.kind, "raybus.stage": "reconcile"})
    return True
