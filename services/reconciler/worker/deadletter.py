"""Parking a message that cannot be processed (invariant 4): the original bytes, the reason, where it
came from. The partition then moves on; nothing is silently dropped."""

from __future__ import annotations

from datetime import UTC, datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schema import subjects
from schema.codec import encode
from schema.messages import DeadLetter
from services.runtime.bus import publish


async def dead_letter(js: JetStreamContext, msg: Msg, *, stream: str, error: str) -> None:
    """Publish ``msg`` with ``error`` to the dead-letter stream, then ack it."""
    meta = msg.metadata
    letter = DeadLetter(
        stream=stream,
        subject=msg.subject,
        sequence=meta.sequence.stream,
        deliveries=meta.num_delivered,
        error=error[:4000],
        payload=msg.data,
        at=datetime.now(UTC),
        headers={k: v for k, v in (msg.headers or {}).items() if isinstance(k, str) and k.lower() != "authorization"},
    )
    await publish(
        js,
        subjects.deadletter_subject(stream),
        encode(letter),
        msg_id=f"dlq/{stream}/{letter.sequence}",
    )
    await msg.ack()
