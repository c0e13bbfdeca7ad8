"""What the watch has seen, read from KV ``raybus-objects``: the applier's and the prober's facts without informers.

Role: an applier or prober running in its own process has no projection. :class:`KvFacts` follows the
bucket the projection writes over every key, or for a prober per probed key kind
(``schema.probes.PROBED_KEYS``: a burst of RayClusters then costs it nothing): it reads each key's last
write with batched direct gets (``kvread``), which end with the stream sequence they reflect, then
follows every write after that sequence, delete markers and purges included, on an ordered consumer. (A
KV watch tells the end of its initial values by a marker that nats-py may deliver before the values
themselves: facts started so would claim a revision they do not reflect.) It answers what they ask of
the in-process projection:
``find``/``recently_deleted`` (``authorize.Facts``), ``owner_gone`` (``staleness.OwnerView``) and
``objects`` (``prober.ObjectSource``), with the projection's semantics:

- An object (kind, namespace, name) is stored once per reconcile key it maps to. It exists while at least
  one of those entries holds it, as its latest write shows it; it is deleted when the last one is
  removed (delete marker or purge). The last :data:`REMEMBERED_DELETIONS` deletions are remembered
  (``recently_deleted``) until the object is seen again; the delete markers among the initial values
  count too, in the order they were written, so a restarted applier knows the recent ones.
- A custom resource is gone (``owner_gone``) once deleted, or once an entry shows the same name with
  another uid (the old incarnation was deleted); :data:`GONE_MEMORY` uids are remembered. While it
  carries a deletionTimestamp, a decision on a snapshot older than the first revision that showed it so
  missed the deletion (the initial values show only each entry's latest write: that revision is then
  the earliest one seen, as ``Projection.load`` takes it).
- :attr:`KvFacts.revision` is the last stream sequence applied; :meth:`KvFacts.caught_up` waits for a
  revision (a batch's ``snapshot_revision``), so a decision made on a snapshot newer than this view is not
  judged on older facts. After the initial read it is at least the stream's last sequence before the
  read (everything up to there is reflected, even when the last messages were removed).

Memory: the custom resources and every other kind are kept whole (authorize reads their specs, owners and
labels; the prober their specs and statuses). Pods are the bulk (thousands per cluster) and are reduced
to what either reads of them (``podfacts.slim_pod``), as the projection holds them, and decoded only
that far (``podfacts.decode_slim_pod``): every Pod write reaches each process that follows the bucket.

Invariants: entries are applied in stream order, one at a time on the loop; an entry that is not a
watched object (observations, an unknown kind, a malformed key or value) only advances the revision
(malformed ones with a warning), so nothing in the bucket stops the watch. The ordered consumer is
nats-py's: after a NATS reconnect (or a consumer lost with a restarted server) it is recreated from the
next stream sequence once two idle heartbeats (5 s each) went missing, so no update is skipped;
meanwhile :meth:`KvFacts.caught_up` waits (about 20 s after a restart of a single server, measured).

Not here: writing the bucket (``projection``), deciding on the facts (``authorize``, ``staleness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from schema import subjects
from schema.keys import KeyKind
from schema.objects import being_deleted, metadata_of, text
from services.edge.resources import by_kind
from services.edge.watch.podfacts import POD, decode_slim_pod
from services.edge.watch.projection import GONE_MEMORY, REMEMBERED_DELETIONS
from services.runtime.kvread import deleted, read_entries

log = logging.getLogger(__name__)

Named = tuple[str, str, str]
"""``(kind, namespace, name)`` of an object."""

_json: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])


def _generation(obj: dict[str, Any]) -> object:
    return metadata_of(obj).get("generation")


class FactsStopped(Exception):
    """:meth:`KvFacts.caught_up` was waiting when the facts stopped following the bucket."""


@dataclass(slots=True)
class _Held:
    """One object and the KV entries (one per reconcile key) that hold it."""

    obj: dict[str, Any]
    uid: str
    entries: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Entry:
    """What one KV entry holds: which object, and whether that object is a custom resource."""

    named: Named
    key_kind: bool


class KvFacts:
    """The watched objects as KV ``raybus-objects`` shows them: read once, then kept current by its writes."""

    def __init__(
        self,
        nc: Client,
        *,
        keys: Collection[KeyKind] = (),
        on_edit: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        """Follow the ``raybus-objects`` bucket on ``nc`` once :meth:`start` is called: every key's entries,
        or with ``keys`` only the entries of the reconcile keys of those kinds (one consumer each).
        ``on_edit(kind, obj)`` is called, as the write is applied, with each custom resource held already
        whose ``metadata.generation`` the write changed (an edit of its spec)."""
        self._nc = nc
        self._on_edit = on_edit
        self._filters = tuple(subjects.entries_of_kind(kind) for kind in keys) or (">",)
        self._every_key = not keys
        self._held: dict[Named, _Held] = {}
        self._by_kind: dict[str, dict[tuple[str, str], _Held]] = {}
        self._entries: dict[str, _Entry] = {}
        self._deleted: OrderedDict[Named, None] = OrderedDict()
        self._gone: dict[tuple[str, str], None] = {}
        """(kind, uid) of custom resources seen deleted, oldest first (bounded)."""
        self._deleting_at: dict[tuple[str, str], int] = {}
        """(kind, uid) of a custom resource being deleted → the first revision that showed it so."""
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._subs: list[Subscription] = []
        self._stopped = False
        self.revision = 0
        """The last stream sequence of the bucket applied."""
        self.skipped = 0
        """Malformed entries skipped."""

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the followed entries, then follow every write after the read; returns once the read is
        applied."""
        info = await self._nc.jetstream().stream_info(subjects.kv_stream(subjects.OBJECTS_BUCKET))
        floor = info.state.last_seq
        try:
            for key_filter in self._filters:
                read = await read_entries(self._nc, subjects.OBJECTS_BUCKET, key_filter)
                for kv_key, entry in sorted(read.entries.items(), key=lambda item: item[1].revision):
                    self._apply(kv_key, entry.revision, entry.value)  # in the order they were written
                self._subs.append(await self._follow(key_filter, after=read.revision))
                floor = max(floor, read.revision)
        except BaseException:
            await self._unsubscribe()
            raise
        self._advance(floor)

    async def stop(self) -> None:
        """Stop following the bucket; :meth:`caught_up` waiters get :class:`FactsStopped`."""
        self._stopped = True
        await self._unsubscribe()
        for _, _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(FactsStopped())
        self._waiters.clear()

    async def _follow(self, key_filter: str, *, after: int) -> Subscription:
        """An ordered consumer of the writes under ``key_filter`` from stream sequence ``after + 1``."""
        prefix = subjects.kv_subject(subjects.OBJECTS_BUCKET)

        async def written(msg: Msg) -> None:
            revision = msg.metadata.sequence.stream
            self._apply(msg.subject[len(prefix) :], revision, None if deleted(msg.headers) else msg.data)
            self._advance(revision)

        return await self._nc.jetstream().subscribe(
            prefix + key_filter,
            stream=subjects.kv_stream(subjects.OBJECTS_BUCKET),
            cb=written,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1),
        )

    async def _unsubscribe(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            with contextlib.suppress(Exception):  # a closed connection has nothing left to unsubscribe
                await sub.unsubscribe()

    async def caught_up(self, revision: int) -> None:
        """Return once the watch has applied stream sequence ``revision`` (at once when it has).

        Waits as long as it takes (the caller bounds it); a revision the bucket never reaches never returns.

        Raises:
            FactsStopped: :meth:`stop` was called meanwhile.
            RuntimeError: these facts follow some keys only, with no revision that covers all of them.
        """
        if not self._every_key:
            raise RuntimeError("facts that follow some keys only cannot wait for a revision of the bucket")
        if revision <= self.revision:
            return
        if self._stopped:
            raise FactsStopped()
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (revision, next(self._order), waiter))
        await waiter

    def _advance(self, revision: int) -> None:
        self.revision = max(self.revision, revision)
        while self._waiters and self._waiters[0][0] <= self.revision:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():  # a cancelled waiter is skipped
                waiter.set_result(None)

    # --- facts ------------------------------------------------------------------------------------

    def find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of ``kind`` named ``namespace/name`` as last written (a Pod reduced), or None."""
        held = self._held.get((kind, namespace, name))
        return held.obj if held is not None else None

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        """Whether one of the last :data:`REMEMBERED_DELETIONS` deletions was that object (not seen since)."""
        return (kind, namespace, name) in self._deleted

    def owner_gone(self, kind: str, uid: str, snapshot_revision: int) -> bool:
        """Whether a decision made on a snapshot at ``snapshot_revision`` missed the deletion of the custom
        resource ``kind``/``uid``: seen deleted, or being deleted from a later KV revision on."""
        if (kind, uid) in self._gone:
            return True
        since = self._deleting_at.get((kind, uid))
        return since is not None and snapshot_revision < since

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """Every held object of one kind (``prober.ObjectSource``)."""
        return [held.obj for held in self._by_kind.get(kind, {}).values()]

    # --- applying entries -------------------------------------------------------------------------

    def _apply(self, kv_key: str, revision: int, value: bytes | None) -> None:
        """One write of the entry ``kv_key`` (``value`` None: a delete marker or purge)."""
        if value is None:
            self._remove(kv_key)
        else:
            self._put(kv_key, revision, value)

    def _put(self, kv_key: str, revision: int, value: bytes) -> None:
        try:
            key, entry_kind, name = subjects.parse_entry_key(kv_key)
        except ValueError:
            return self._skip(kv_key, "not an entry key")
        resource = by_kind(entry_kind)
        if resource is None or not resource.watched:
            return None  # observations and anything else that is not a watched object
        try:
            obj = decode_slim_pod(value) if resource.kind == POD else _json.decode(value)
        except (ValueError, msgspec.DecodeError):
            return self._skip(kv_key, "undecodable")
        metadata = metadata_of(obj)
        uid = text(metadata.get("uid"))
        named = (resource.kind, text(metadata.get("namespace")) or key.namespace, name)
        previous = self._entries.get(kv_key)
        if previous is not None and previous.named != named:
            self._remove(kv_key)  # the entry now holds another object (never written so, but harmless)
        self._entries[kv_key] = _Entry(named, resource.is_key_kind)
        held = self._held.get(named)
        if held is not None and held.uid != uid and resource.is_key_kind:
            self._forget_incarnation(resource.kind, held.uid)  # the same name with a new uid: the old one is gone
        before = held.obj if held is not None and held.uid == uid else None  # this incarnation's last write
        if held is None:
            held = self._held[named] = _Held(obj, uid)
            self._by_kind.setdefault(named[0], {})[named[1:]] = held
        else:
            held.obj, held.uid = obj, uid
        held.entries.add(kv_key)
        self._deleted.pop(named, None)
        if resource.is_key_kind:
            self._gone.pop((resource.kind, uid), None)  # held again: its entries tell (as the projection's cache)
            if being_deleted(obj):
                self._deleting_at.setdefault((resource.kind, uid), revision)
            else:
                self._deleting_at.pop((resource.kind, uid), None)
            if self._on_edit is not None and before is not None and _generation(before) != _generation(obj):
                self._on_edit(resource.kind, obj)
        return None

    def _remove(self, kv_key: str) -> None:
        known = self._entries.pop(kv_key, None)
        if known is None:
            self._remember_unseen_deletion(kv_key)
            return
        held = self._held.get(known.named)
        if held is None:
            return
        held.entries.discard(kv_key)
        if held.entries:
            return  # still stored under another reconcile key: not a deletion
        del self._held[known.named]
        by_name = self._by_kind.get(known.named[0], {})
        by_name.pop(known.named[1:], None)
        self._remember_deletion(known.named)
        if known.key_kind:
            self._forget_incarnation(known.named[0], held.uid)

    def _remember_unseen_deletion(self, kv_key: str) -> None:
        """A delete marker of an entry this view never saw written (among the initial values)."""
        try:
            key, entry_kind, name = subjects.parse_entry_key(kv_key)
        except ValueError:
            return self._skip(kv_key, "not an entry key")
        resource = by_kind(entry_kind)
        if resource is None or not resource.watched:
            return None
        named = (resource.kind, key.namespace, name)
        if named not in self._held:
            self._remember_deletion(named)
        return None

    def _remember_deletion(self, named: Named) -> None:
        self._deleted[named] = None
        self._deleted.move_to_end(named)
        if len(self._deleted) > REMEMBERED_DELETIONS:
            self._deleted.popitem(last=False)

    def _forget_incarnation(self, kind: str, uid: str) -> None:
        """A custom resource's incarnation ``uid`` was deleted."""
        self._deleting_at.pop((kind, uid), None)
        if uid:
            self._gone[(kind, uid)] = None
            if len(self._gone) > GONE_MEMORY:
                del self._gone[next(iter(self._gone))]

    def _skip(self, kv_key: str, why: str) -> None:
        self.skipped += 1
        log.warning("ignoring KV entry %s: %s", kv_key, why)
