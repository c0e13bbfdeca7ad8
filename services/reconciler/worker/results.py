"""The applier's reports of what it carried out, fed to the in-flight memory of the key's partition.

A write the server refused as stale (outcome ``dropped``) also makes the key due for a fresh decision
(``InFlight.refused``): the decision that wrote it saw an older object than the server holds. So does a
command the applier refused (``denied``): its checks may have read facts older than the decision's.

The applier publishes an outcome per command (``subjects.result_subject``; a run's outcomes together, in
one message) before it acknowledges the batch. A plain subscription sees them as they are stored: no
consumer, no acknowledgement, nothing kept. One that is missed (a reconnect, a slow subscriber) only
leaves its commands to the partition's ack floor. A message that does not decode is skipped: the status
service, which consumes the results durably, parks it in the dead-letter stream with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from schema import subjects
from schema.codec import decode_results
from schema.keys import ReconcileKey
from schema.messages import REDECIDE, TAKEN_EFFECT
from services.reconciler.worker.inflight import InFlight

log = logging.getLogger(__name__)

_REDECIDE_JSON: Final = tuple(msgspec.json.encode(outcome) for outcome in REDECIDE)
"""How those outcomes show in a result's JSON (the outcome is the only field with such a value)."""

MemoryOf = Callable[[ReconcileKey], InFlight | None]
"""The in-flight memory that holds ``key``'s commands here, or ``None`` when this worker does not hold its
partition."""


async def follow_results(nc: Client, memory_of: MemoryOf) -> Subscription:
    """Subscribe to every command outcome; each one of a key held here marks its command applied (and says
    whether it took effect)."""

    async def on_result(msg: Msg) -> None:
        try:
            key = subjects.key_from_stored_subject(msg.subject)
        except ValueError:
            return
        memory = memory_of(key)
        if memory is None or (not memory.tracks(key) and not any(o in msg.data for o in _REDECIDE_JSON)):
            # An outcome of a command no longer in flight here matters only when it was refused (its
            # publisher may have been this partition's former owner): the rest are not even decoded.
            return
        try:
            results = decode_results(msg.data)
        except (msgspec.DecodeError, ValueError) as exc:
            log.debug("skipping undecodable results on %s: %s", msg.subject, exc)
            return
        for result in results:
            if result.key == key:
                memory.reported(
                    key,
                    result.command_id,
                    took_effect=result.outcome in TAKEN_EFFECT,
                    refused=result.outcome in REDECIDE,
                )

    return await nc.subscribe(subjects.RESULTS_WILDCARD, cb=on_result)
