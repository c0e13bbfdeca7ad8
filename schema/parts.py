"""One decision in several messages: splitting a CommandBatch under a byte budget, and joining it back.

A decision is not bounded by the bus's message size: a RayCluster of 2,000 workers decides 2,000 Pod
creates and 2,000 Events at once (about 5 MB of JSON; NATS's default ``max_payload`` is 1 MB). A batch
whose encoding exceeds the budget is published as ``parts`` CommandBatches with the decision's ``id``,
``part`` = 0, 1, ... and the commands in order, the first commands in part 0; the withheld ids
(``suppressed``) come first, so that whoever holds part 0 of a decision knows everything it withheld.
Every part carries the decision-level fields (inputs, issued_at, snapshot_revision, wake_at, rules,
logic_version), so any part says which decision it belongs to and :func:`join_parts` rebuilds exactly
the decision that was split. The reasons are in docs/decision-size.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from schema.messages import Command, CommandBatch

DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
"""nats-server's default ``max_payload``; a connection reports the server's own."""
PAYLOAD_SHARE: Final = 4
"""A part is at most ``max_payload // PAYLOAD_SHARE`` bytes: room for headers, and for the dead letter
of a part (which carries the part's bytes, base64-encoded, plus the reason) under ``max_payload``."""

_encoder: Final = msgspec.json.Encoder()


def part_budget(max_payload: int) -> int:
    """The largest encoded part the server's ``max_payload`` allows with room to spare."""
    return max(1, max_payload // PAYLOAD_SHARE)


def part_msg_id(batch: CommandBatch) -> str:
    """De-duplication id (Nats-Msg-Id) of one published part: the decision id, and ``/<part>`` when split."""
    return batch.id if batch.parts <= 1 else f"{batch.id}/{batch.part}"


def split_batch(batch: CommandBatch, budget: int) -> list[CommandBatch]:
    """``batch`` as one or more parts whose encodings each fit ``budget`` bytes (a single command larger
    than the budget gets a part of its own, and that part is larger).

    Returns ``[batch]`` unchanged when it fits.
    """
    if len(_encoder.encode(batch)) <= budget:
        return [batch]
    frame = len(_encoder.encode(msgspec.structs.replace(batch, commands=(), suppressed=(), part=0, parts=2)))
    groups: list[tuple[list[Command], list[str]]] = [([], [])]
    used = frame
    for item in (*batch.suppressed, *batch.commands):
        size = len(_encoder.encode(item)) + 1  # + its comma
        commands, suppressed = groups[-1]
        if used + size > budget and (commands or suppressed):
            groups.append(([], []))
            commands, suppressed = groups[-1]
            used = frame
        if isinstance(item, str):
            suppressed.append(item)
        else:
            commands.append(item)
        used += size
    return [
        msgspec.structs.replace(batch, commands=tuple(c), suppressed=tuple(s), part=i, parts=len(groups))
        for i, (c, s) in enumerate(groups)
    ]


def join_parts(parts: Sequence[CommandBatch]) -> CommandBatch:
    """The decision the parts were split from (parts in ``part`` order, all of one decision).

    Raises:
        ValueError: the parts are not exactly parts 0..parts-1 of one decision.
    """
    if not parts:
        raise ValueError("no parts to join")
    first = parts[0]
    if [p.part for p in parts] != list(range(first.parts)) or any(
        p.id != first.id or p.parts != first.parts for p in parts
    ):
        raise ValueError(f"parts of decision {first.id} are incomplete or out of order")
    if first.parts <= 1:
        return first
    return msgspec.structs.replace(
        first,
        commands=tuple(c for p in parts for c in p.commands),
        suppressed=tuple(s for p in parts for s in p.suppressed),
        part=0,
        parts=1,
    )


class PartAssembler:
    """Joins parts read in stream order back into decisions.

    Parts of one decision are stored in order on one subject, but a worker that crashed between parts
    leaves a decision incomplete (its inputs come back and decide anew): those are counted, not joined.
    """

    def __init__(self) -> None:
        self._open: dict[str, list[CommandBatch]] = {}

    def add(self, batch: CommandBatch) -> CommandBatch | None:
        """The whole decision once ``batch`` completes it, else None (held until its other parts come)."""
        if batch.parts <= 1:
            return batch
        held = self._open.setdefault(batch.id, [])
        if batch.part != len(held):
            if batch.part != 0:
                return None  # a gap: the decision cannot be rebuilt; its id is reported by finish()
            held.clear()  # the decision was published again from its first part on
        held.append(batch)
        if len(held) < batch.parts:
            return None
        del self._open[batch.id]
        return join_parts(held)

    def finish(self) -> list[str]:
        """Ids of decisions that never got all their parts (after the last :meth:`add`)."""
        return list(self._open)
