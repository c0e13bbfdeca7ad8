"""Writes under a key that the bucket checks against the key's last write, so that a WatchEvent can say
which write came before its own (``WatchEvent.kv_previous``).

JetStream refuses a publish whose headers expect another last sequence on a subject filter than the stream
holds (``Nats-Expected-Last-Subject-Sequence`` with ``Nats-Expected-Last-Subject-Sequence-Subject``, here
the key's prefix), and its refusal names the sequence it holds. A write that passes the check proves that
no other write came under the key between the revision expected and its own: a reconciler holding the key
at that revision applies the event's object instead of reading the key again
(``services.runtime.snapshots``).

Writes of one key are made one after the other, each once the previous one is acknowledged, so each is
checked against the revision of the one before it. (Writes of different keys go on at once.) The last
revision of a key is known from the bucket as the projection loaded it (:meth:`KeyWrites.seed`), from
this projection's own acknowledgements, or from a refusal: after a refusal the write is tried again
against the revision the refusal names, at most :data:`CHECKED_TRIES` times, then written unchecked. A key
of which nothing is known is expected to have no write at all (revision 0): a new cluster's first write
then proves that the key held nothing before it, and its reader needs no read of the key either. An
unchecked write (a duplicate, or one refused too often) carries no previous revision, and its reader reads
the key.

The check comes before JetStream's de-duplication: a write stored already is refused when the key moved
on since, then acknowledged as a duplicate at the revision its refusal named.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Final

from nats.js.api import PubAck
from nats.js.errors import BadRequestError

from schema import subjects
from schema.keys import ReconcileKey

EXPECTED_LAST: Final = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_FILTER: Final = "Nats-Expected-Last-Subject-Sequence-Subject"
WRONG_LAST_SEQUENCE: Final = 10071
"""JetStream's error code for a publish whose expected last sequence is not the stream's."""
_WRONG_LAST: Final = re.compile(r"wrong last sequence: (\d+)")

CHECKED_TRIES: Final = 3
"""Checked attempts of one write before it is written unchecked (each refusal names the revision to try)."""

KEYS_REMEMBERED: Final = 100_000
"""Keys whose last revision is remembered, the least recently written forgotten first."""

Publish = Callable[[dict[str, str]], Awaitable[PubAck]]
"""One attempt of a write, given the headers to send beside its own."""


class KeyWrites:
    """The last write under each key this projection knows of, and the order of its writes in flight."""

    def __init__(self, bucket: str, *, remembered: int = KEYS_REMEMBERED) -> None:
        self._prefix = subjects.kv_subject(bucket)
        self._remembered = remembered
        self._last: dict[ReconcileKey, int] = {}
        self._tails: dict[ReconcileKey, asyncio.Future[None]] = {}

    async def write(self, key: ReconcileKey, publish: Publish) -> tuple[PubAck, int | None]:
        """Run ``publish`` once the previous write of ``key`` is done, checked against the key's last write
        when that is known.

        Returns:
            The acknowledgement, and the revision of the key's previous write that the check proved (None:
            unchecked, or a duplicate).
        """
        before = self._tails.get(key)
        mine = self._tails[key] = asyncio.get_running_loop().create_future()
        try:
            if before is not None:
                await asyncio.shield(before)  # a cancelled write still lets the next one go
            ack, previous = await self._attempts(key, self._last.get(key, 0), publish)
            self._remember(key, int(ack.seq))
            return ack, previous
        finally:
            mine.set_result(None)
            if self._tails.get(key) is mine:
                del self._tails[key]

    def seed(self, key: ReconcileKey, revision: int) -> None:
        """Know that ``key``'s writes in the bucket reach ``revision`` (the projection's load)."""
        self._remember(key, revision)

    async def _attempts(self, key: ReconcileKey, expected: int | None, publish: Publish) -> tuple[PubAck, int | None]:
        tries = 0
        while expected is not None and tries < CHECKED_TRIES:
            tries += 1
            headers = {EXPECTED_LAST: str(expected), EXPECTED_LAST_FILTER: self._prefix + subjects.entry_prefix(key)}
            try:
                ack = await publish(headers)
            except BadRequestError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
                expected = _last_in_refusal(exc.description)
                continue
            return ack, None if ack.duplicate else expected
        return await publish({}), None

    def _remember(self, key: ReconcileKey, revision: int) -> None:
        """The last revision known of ``key`` (a duplicate's older revision never lowers it)."""
        known = self._last.pop(key, 0)
        self._last[key] = max(known, revision)
        if len(self._last) > self._remembered:
            del self._last[next(iter(self._last))]


def _last_in_refusal(description: str | None) -> int | None:
    """The last sequence a refusal says the stream holds (None when it says none that can be read)."""
    found = _WRONG_LAST.search(description or "")
    return int(found.group(1)) if found else None
