"""What a partition's previous owner still had in flight, rebuilt from the commands stream.

The in-flight memory (``inflight.py``) lives in the worker that published the commands. When a
partition moves (a worker joins or leaves, or restarts), its new owner would start with an empty memory
and, on a snapshot that does not show the in-flight effects yet, decide the same creates again: they reach
the API server as AlreadyExists (398 to 617 of them when a worker joined a 1,000-cluster burst). The bus
already holds that memory: the key's command batches of the last ``max_age`` seconds. So the first time
a worker reconciles a key, it reads them (one batched direct get on the key's commands subject, no
consumer) and restores them as sent at their storage time; whether each has been applied is then decided
as for its own batches, by the applier's ack floor.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client

from schema import subjects
from schema.codec import decode_batch
from schema.keys import ReconcileKey
from services.reconciler.worker.inflight import Recalled
from services.runtime.directget import direct_batches

log = logging.getLogger(__name__)


async def recent_batches(nc: Client, key: ReconcileKey, *, within: float) -> list[Recalled]:
    """The key's decisions stored in the last ``within`` seconds, oldest first (failure reports left out).

    Raises:
        RetryableError: the server did not answer.
    """
    now = datetime.now(UTC)
    since = now - timedelta(seconds=within)
    found: list[Recalled] = []
    async for stored in direct_batches(
        nc, subjects.COMMANDS_STREAM, subject_filter=subjects.stored_commands_filter(key), start_time=since
    ):
        if stored.time < since:
            continue  # a start time past the last message answers with older ones
        try:
            batch = decode_batch(stored.data)
        except Exception:  # whatever the bytes make the decoder do: not a decision this worker can hold
            continue
        if not batch.report and batch.commands:
            found.append(Recalled(seq=stored.seq, age=max(0.0, (now - stored.time).total_seconds()), batch=batch))
    return found
