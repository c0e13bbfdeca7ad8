"""Parking a message that cannot be processed (invariant 4), the same way in every service: the
original bytes, the reason, where it came from, on ``raybus.dlq.<stream>`` with a de-duplication id
per source message, so a redelivered bad message is parked once. The caller acks the original only
after the dead letter is stored; if NATS is unreachable it stays unacked and comes back later."""

from __future__ import annotations

from datetime import UTC, datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schema import subjects
from schema.codec import encode
from schema.messages import DeadLetter
from services.runtime.bus import publish

MAX_ERROR_CHARS = 4000
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""Original bytes kept in a dead letter: base64 makes them a third larger, and the letter must still fit
in a NATS message, or the message it describes could never be parked."""


def dead_letter_of(msg: Msg, *, stream: str, error: str, at: datetime | None = None) -> DeadLetter:
    """The dead letter describing ``msg`` (its JetStream metadata, bytes and headers)."""
    meta = msg.metadata
    payload = msg.data
    error = error[:MAX_ERROR_CHARS]
    if len(payload) > MAX_PAYLOAD_BYTES:
        error += f" (payload: the first {MAX_PAYLOAD_BYTES} of {len(payload)} bytes)"
        payload = payload[:MAX_PAYLOAD_BYTES]
    return DeadLetter(
        stream=stream,
        subject=msg.subject,
        sequence=meta.sequence.stream,
        deliveries=meta.num_delivered,
        error=error,
        payload=payload,
        at=at or datetime.now(UTC),
        headers={k: v for k, v in (msg.headers or {}).items() if isinstance(k, str) and k != "Nats-Msg-Id"},
    )


def destination(letter: DeadLetter) -> tuple[str, str]:
    """Subject and de-duplication id of a dead letter."""
    return subjects.deadletter_subject(letter.stream), f"dlq/{letter.stream}/{letter.sequence}"


async def publish_dead_letter(js: JetStreamContext, letter: DeadLetter) -> None:
    """Store ``letter`` on the dead-letter stream (de-duplicated per source message).

    Raises:
        nats errors: NATS unreachable; the caller leaves the original unacked.
    """
    subject, msg_id = destination(letter)
    await publish(js, subject, encode(letter), msg_id=msg_id)
