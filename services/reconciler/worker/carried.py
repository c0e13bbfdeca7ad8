"""The writes that a key's watch events carry, for the snapshot reader: a key it holds then needs no read
(``services.runtime.snapshots``).

A worker keeps only the identity of a watch event's object (``reports.identity_only``). The object's JSON
is taken again from the message's bytes, which the worker holds until it acknowledges them, and only when
the reader applies it.
"""

from __future__ import annotations

from typing import Final

import msgspec

from schema.messages import BusInput, WatchEvent
from services.runtime.snapshots import Write


class _Carried(msgspec.Struct):
    """The one field of a watch event read again: its object, undecoded."""

    object: msgspec.Raw = msgspec.Raw(b"null")


_carried_decoder: Final[msgspec.json.Decoder[_Carried]] = msgspec.json.Decoder(_Carried)


def carried_write(data: bytes, message: BusInput) -> Write | None:
    """The write that ``message`` (decoded from ``data``, its object reduced to its identity) carries, when
    the bucket checked which write came before it; None otherwise."""
    if not isinstance(message, WatchEvent) or message.kv_previous is None:
        return None
    metadata = message.object.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        return None

    def encoded() -> bytes:
        return bytes(_carried_decoder.decode(data).object)

    return Write(
        revision=message.kv_revision,
        previous=message.kv_previous,
        entry_kind=message.entry_kind,
        name=name,
        encoded=None if message.event_type == "DELETED" else encoded,
    )
