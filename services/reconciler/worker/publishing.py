"""Publishing one decision: as a single command batch, or as its parts when it exceeds the part budget.

Parts go out one after the other on the key's commands subject, each with its own Nats-Msg-Id
(``schema.parts.part_msg_id``), so a redelivered input that decides the same again is de-duplicated part
by part and a publish retried after a failure completes the decision rather than repeating it. The caller
acks its inputs only after this returns, i.e. after every part is stored.
"""

from __future__ import annotations

from nats.js import JetStreamContext

from schema import subjects
from schema.codec import encode
from schema.messages import CommandBatch
from schema.parts import part_msg_id, split_batch
from services.runtime.bus import publish
from services.runtime.metrics import Tally, meter

_meter = meter(__name__)
_parts = Tally(_meter, "raybus_decision_parts_total", description="command batches published, parts counted")
_split = Tally(_meter, "raybus_decisions_split_total", description="decisions published in several parts")


async def publish_decision(js: JetStreamContext, batch: CommandBatch, *, budget: int) -> int:
    """Publish ``batch`` (in parts when its encoding exceeds ``budget`` bytes); return the stream sequence
    of its last part, from which on the whole decision is stored."""
    parts = split_batch(batch, budget)
    if len(parts) > 1:
        _split.add(1, {"raybus.kind": batch.key.kind})
    seq = 0
    for part in parts:
        ack = await publish(js, subjects.command_subject(batch.key), encode(part), msg_id=part_msg_id(part))
        seq = ack.seq
    _parts.add(len(parts), {"raybus.kind": batch.key.kind})
    return seq
