"""Publishing the results of one run of a command batch together, in as few messages as fit.

A run's results go out as one ``ResultBatch`` when the run ends, not one message per command: a
batch holds five commands on average in a burst of new RayClusters, and each message is stored,
delivered to the reconcilers and to the status service, and acknowledged (one message per result cost
a fifth of nats-server's CPU in such a burst; bench/RESULTS.md).
A long run (a 2,000-worker scale-up is some 4,000 calls) sends a message each time
:data:`RESULTS_PER_MESSAGE` results or :data:`MAX_MESSAGE_BYTES` of them have gathered, so its
progress still reaches the reconcilers as it goes and no message nears the server's ``max_payload``.

Each message's ``Nats-Msg-Id`` names the run (batch, stream sequence, delivery) and the message's place in
it: a publish retried after a lost answer is stored once, and a redelivered batch's run is recorded
as a run of its own.

A release that does not know ``ResultBatch`` dead-letters it; while one may still run (a rolling
upgrade), ``BusSettings.result_batches`` is off and each result is its own message, sent as soon as it
is known, under the run's name and its command's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from schema import codec
from schema.messages import CommandResult

RESULTS_PER_MESSAGE: Final = 64
"""Results gathered before a long run sends them."""

MAX_MESSAGE_BYTES: Final = 256 * 1024
"""Encoded results gathered before a run sends them (well under nats-server's 1 MB ``max_payload``)."""

Publish = Callable[[bytes, str], Awaitable[None]]
"""Stores a payload under a de-duplication id, retrying until it is stored."""


def run_id(batch_id: str, *, batch_seq: int, delivery: int) -> str:
    """The name of one run of a batch: the same for a repeated publish, different for each delivery."""
    return f"{batch_id}/{batch_seq}/{delivery}"


class RunReport:
    """Gathers the results of one run of a batch and publishes them (:meth:`add`, then :meth:`close`)."""

    def __init__(self, publish: Publish, run: str, *, together: bool = True) -> None:
        """Args:
        publish: stores one message of results.
        run: the run's name (:func:`run_id`), the prefix of its messages' ids.
        together: gather results into ``ResultBatch`` messages; off, each one is its own message.
        """
        self._publish = publish
        self._run = run
        self._together = together
        self._pending: list[bytes] = []
        """The gathered results, each encoded once."""
        self._bytes = 0
        self._publishing: list[asyncio.Future[None]] = []

    def add(self, result: CommandResult) -> None:
        """Gather ``result``; send the gathered ones when they fill a message."""
        encoded = codec.encode(result)
        if not self._together:
            msg_id = f"{self._run}/{result.command_id}"
            self._publishing.append(asyncio.ensure_future(self._publish(encoded, msg_id)))
            return
        self._pending.append(encoded)
        self._bytes += len(encoded)
        if len(self._pending) >= RESULTS_PER_MESSAGE or self._bytes >= MAX_MESSAGE_BYTES:
            self._send()

    async def close(self) -> None:
        """Send what is gathered and wait until every message of the run is stored."""
        self._send()
        if self._publishing:
            await asyncio.gather(*self._publishing)

    def _send(self) -> None:
        if not self._pending:
            return
        payload = codec.encode_result_batch(self._pending)
        msg_id = f"{self._run}/{len(self._publishing)}"
        self._pending, self._bytes = [], 0
        self._publishing.append(asyncio.ensure_future(self._publish(payload, msg_id)))
