"""Writes under a key that the bucket checks against the key's last write, so that a WatchEvent can say
which write came before its own (``WatchEvent.kv_previous``).

JetStream refuses a publish whose headers expect another last sequence on a subject filter than the stream
holds (``Nats-Expected-Last-Subject-Sequence`` with ``Nats-Expected-Last-Subject-Sequence-Subject``, here
the key's prefix), and its refusal names the sequence it holds. A write that passes the check proves that
no other write came under the key between the revision expected and its own: a reconciler holding the key
at that revision applies the event's object instead of reading the key again
(``services.runtime.snapshots``).

The check is tried only while it is likely to pass: the key's last revision is known (from this
projection's own acknowledgements, or from a refusal) and no other write of the key is in flight. After a
refusal the write is tried again against the revision the refusal names, at most :data:`CHECKED_TRIES`
times, then written unchecked. An unchecked write (a key's first since the projection started, a write
beside another of its key, a duplicate) carries no previous revision, and its reader reads the key.

The check comes before JetStream's de-duplication: a write stored already is refused when the key moved
on since, then acknowledged as a duplicate at the revision its refusal named.
"""

from __future__ import annotations

import re
from collections import Counter
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
_HELD: Final = re.compile(r"wrong last sequence: (\d+)")

CHECKED_TRIES: Final = 3
"""Checked attempts of one write before it is written unchecked (each refusal names the revision to try)."""

KEYS_REMEMBERED: Final = 100_000
"""Keys whose last revision is remembered, the least recently written forgotten first."""

Publish = Callable[[dict[str, str]], Awaitable[PubAck]]
"""One attempt of a write, given the headers to send beside its own."""


class KeyWrites:
    """The last write under each key this projection knows of, and its writes in flight."""

    def __init__(self, bucket: str, *, remembered: int = KEYS_REMEMBERED) -> None:
        self._prefix = subjects.kv_subject(bucket)
        self._remembered = remembered
        self._last: dict[ReconcileKey, int] = {}
        self._writing: Counter[ReconcileKey] = Counter()

    async def write(self, key: ReconcileKey, publish: Publish) -> tuple[PubAck, int | None]:
        """Run ``publish``, checked against ``key``'s last write when that is likely to pass.

        Returns:
            The acknowledgement, and the revision of the key's previous write that the check proved (None:
            unchecked, or a duplicate).
        """
        expected = None if self._writing[key] else self._last.get(key)
        self._writing[key] += 1
        try:
            ack, previous = await self._attempts(key, expected, publish)
        finally:
            self._writing[key] -= 1
            if not self._writing[key]:
                del self._writing[key]
        self._remember(key, int(ack.seq))
        return ack, previous

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
                expected = _held(exc.description)
                continue
            return ack, None if ack.duplicate else expected
        return await publish({}), None

    def _remember(self, key: ReconcileKey, revision: int) -> None:
        """The last revision known of ``key`` (a duplicate's older revision never lowers it)."""
        known = self._last.pop(key, 0)
        self._last[key] = max(known, revision)
        if len(self._last) > self._remembered:
            del self._last[next(iter(self._last))]


def _held(description: str | None) -> int | None:
    """The last sequence a refusal says the stream holds (None when it says none that can be read)."""
    found = _HELD.search(description or "")
    return int(found.group(1)) if found else None
