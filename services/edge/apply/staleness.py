"""Whether a decision still holds when the applier gets to it (``docs/decisions.md``).

A command batch is a decision made on a snapshot; the applier may reach it much later: behind a queue,
or redelivered after the watcher that held it died (the ack wait). By then the world may have moved:
a newer decision of the key exists, or the custom resource that owns what the batch creates is gone.
KubeRay never meets this because it decides and acts in one pass over its informer cache; raybus reads
the same facts from the bus:

- **Superseded**: a newer batch of the same key exists (the key's per-key queue in this applier holds
  one, or, for a redelivered or long-waiting batch, the last message on the key's command subject is
  newer). Its commands are not sent, except those the newer decision still wants: the ids it withheld
  because they were in flight in this batch (``CommandBatch.suppressed``), and patches guarded by a
  resourceVersion (a stale one fails with Conflict by itself, and its key is decided again).
- **Owner gone**: a create whose ownerReferences name a custom resource the watch has seen deleted, or
  being deleted from a KV revision after the batch's ``snapshot_revision`` on, is not sent: the
  garbage collector would delete the child again. (A decision that saw the deletion may create on
  purpose: KubeRay's Redis cleanup Job of a deleting RayCluster.)

- **Late**: a batch older than a decision of its key already applied (``freshness`` refuses it), while a
  newer decision of the key is on the stream: no replay, a decision delivered again after the applier
  that held it stopped, behind the newer one. All its commands are superseded, guarded patches and
  withheld ids too: the newer decision was applied and stands for them.

In each case the command's result says ``superseded``, with the reason, so the audit shows it.

Not here: applying (``applier``), what the watch has seen (:class:`OwnerView`, the projection today).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schema import codec, subjects
from schema.messages import Command, CommandBatch, CreateObject, PatchObject, PatchStatus
from services.edge.ownerrefs import custom_owners

log = logging.getLogger(__name__)

LOOKUP_AFTER: Final = 5.0
"""Seconds a batch may have waited in the stream before the applier asks the stream whether a newer
decision of its key exists (a redelivered batch is always checked; a fresh one costs nothing)."""


class OwnerView(Protocol):
    """What the watch has seen of custom resources (the watcher's projection, or the KV it writes)."""

    def owner_gone(self, kind: str, uid: str, snapshot_revision: int) -> bool:
        """Whether a decision made on the snapshot at ``snapshot_revision`` missed the deletion of the
        custom resource ``kind``/``uid`` (seen deleted, or seen being deleted only after that snapshot)."""
        ...


@dataclass(frozen=True)
class Review:
    """What of one batch still holds."""

    newer: str = ""
    """Names a newer batch of the key ("": this is the latest decision)."""
    wanted: frozenset[str] = frozenset()
    """Ids of this batch's commands the newer decision still wants."""
    owners: OwnerView | None = None
    snapshot_revision: int = 0
    late: bool = False
    """The newer decision was applied before this batch came: every command is superseded."""

    def stale(self, command: Command) -> str:
        """Why ``command`` must not be sent ("" when it still holds)."""
        if self.newer and (self.late or (command.id not in self.wanted and not _guarded(command))):
            return f"superseded by the newer decision {self.newer}"
        if self.owners is not None and isinstance(command, CreateObject):
            for owner in custom_owners(command.body):
                if self.owners.owner_gone(owner.kind, owner.uid, self.snapshot_revision):
                    return f"its owner {owner.kind} {owner.name} ({owner.uid}) was deleted after the decision"
        return ""


HOLDS: Final = Review()


def _guarded(command: Command) -> bool:
    return isinstance(command, PatchStatus | PatchObject) and bool(command.resource_version)


class DecisionCheck:
    """Reviews batches before the applier sends their commands."""

    def __init__(self, js: JetStreamContext, owners: OwnerView | None, *, lookup_after: float = LOOKUP_AFTER) -> None:
        self._js = js
        self._owners = owners
        self._lookup_after = lookup_after
        self.lookups = 0

    async def review(
        self, msg: Msg, batch: CommandBatch, queued: Sequence[CommandBatch], *, behind: bool = False
    ) -> Review:
        """What of ``batch`` still holds; ``queued`` are the key's batches this applier holds after it;
        ``behind``: a decision of the key newer than ``batch`` was applied already (``freshness``), so a
        newer one found here makes the batch late."""
        if not batch.commands or batch.parts > 1:
            # A decision in parts is applied whole. It is a large scale step whose creates a newer decision
            # may withhold under different content (a worker's replica index shifts as Pods come up), so
            # its withheld ids do not name these commands, and superseding them left Pods that no batch
            # created until the in-flight memory expired, wave after wave.
            return HOLDS
        # Later parts of this same decision are not newer, and a failure report is no decision.
        newer = next((b for b in reversed(queued) if b.id != batch.id and not b.report), None)
        if newer is None and msg.reply and self._worth_a_lookup(msg):
            newer = await self._latest(msg, batch)
        revision = batch.snapshot_revision
        if newer is None:
            return Review(owners=self._owners, snapshot_revision=revision)
        # A decision in parts carries its withheld ids in its first part (``schema.parts``).
        wanted = {i for b in queued if b.id == newer.id for i in b.suppressed} | set(newer.suppressed)
        return Review(
            newer=f"(command batch {newer.id})",
            wanted=frozenset(wanted),
            owners=self._owners,
            snapshot_revision=revision,
            late=behind,
        )

    def _worth_a_lookup(self, msg: Msg) -> bool:
        metadata = msg.metadata
        if metadata.num_delivered > 1:
            return True
        return time.time() - metadata.timestamp.timestamp() > self._lookup_after

    async def _latest(self, msg: Msg, batch: CommandBatch) -> CommandBatch | None:
        """The last batch of the key in the stream, when it is newer than ``msg``."""
        self.lookups += 1
        try:
            # The message's own subject is the key's subject as stored (in its partition).
            last = await self._js.get_last_msg(subjects.COMMANDS_STREAM, msg.subject, direct=True)
        except (nats.errors.Error, TimeoutError) as exc:
            log.info("could not look up the latest decision of %s (%s); applying batch %s", batch.key, exc, batch.id)
            return None
        if last.seq is None or last.seq <= msg.metadata.sequence.stream or last.data is None:
            return None
        try:
            latest = codec.decode_batch(last.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # a malformed newer message is the dead-letter path's business, not a decision
        if latest.id == batch.id or latest.report or latest.part > 0:
            # A later part of this decision, a failure report, or the middle of a decision in parts
            # (whose withheld ids are in its first part, not read here): not a reason to hold back.
            return None
        return latest
