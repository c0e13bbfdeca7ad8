"""Withholding commands that are already in flight: raybus's answer to KubeRay's scale expectations.

Between the moment a command is published and the moment its effect comes back as a watch event, every
other event of the key is reconciled on a snapshot that does not show the effect yet, so reconcile
decides the same create, status patch or Event again. That is harmless (commands are idempotent) but
costly: under load each repeat adds applier work, which adds lag, which adds repeats. KubeRay avoids
it with in-memory expectations that skip a worker group until the cache caught up; raybus keeps
``reconcile`` pure and instead lets the worker remember, per key, the content digest of every command
it published in the last ``window`` seconds, and withhold an identical one (:func:`in_flight_key`). The withheld ids are
recorded in the batch (``suppressed``), so the decision log still holds the whole decision and replay
stays exact. A command that did not take effect is decided again after the window, like an expired
expectation. The memory is per worker and may be lost (restart, partition hand-over): then a duplicate
is simply applied, which is safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from schema.keys import ReconcileKey
from schema.messages import Command, CommandBatch, PatchObject, PatchStatus, command_target, command_verb
from services.reconciler.worker.decide import command_id

Clock = Callable[[], float]


def in_flight_key(command: Command) -> str:
    """What makes two commands "the same" while one is in flight.

    Normally the whole content. A patch with a resourceVersion precondition is different: only one
    patch per object version can succeed (the rest get 409 Conflict), and the object's next watch event
    brings a fresh decision anyway, so any second patch of the same version is withheld.
    """
    if isinstance(command, PatchStatus | PatchObject) and command.resource_version:
        return f"{command_verb(command)}/{command_target(command)}@{command.resource_version}"
    return command_id(command)


class InFlight:
    """Recently published command digests per key."""

    def __init__(self, *, window: float, clock: Clock = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._seen: dict[ReconcileKey, dict[str, float]] = {}

    def filter(self, batch: CommandBatch) -> CommandBatch:
        """``batch`` without the commands identical to ones published for its key within the window."""
        if self._window <= 0 or not batch.commands:
            return batch
        now = self._clock()
        seen = {d: t for d, t in self._seen.get(batch.key, {}).items() if now - t < self._window}
        kept = []
        withheld = []
        for command in batch.commands:
            digest = in_flight_key(command)
            if digest in seen:
                withheld.append(command.id)
            else:
                kept.append(command)
                seen[digest] = now
        self._seen[batch.key] = seen
        if not withheld:
            return batch
        return msgspec.structs.replace(batch, commands=tuple(kept), suppressed=tuple(withheld))

    def forget(self, key: ReconcileKey) -> None:
        """Drop a key's memory (it left this worker)."""
        self._seen.pop(key, None)

    def prune(self) -> None:
        """Drop keys whose every memory has expired (bounded memory for idle keys)."""
        now = self._clock()
        for key in [k for k, seen in self._seen.items() if all(now - t >= self._window for t in seen.values())]:
            del self._seen[key]
