"""The projection: informer changes → KV ``raybus-objects`` entries → WatchEvents on the key subjects.

Role: for every change and every reconcile key it maps to (``keymap``), write the object to KV at
``entry_key(key, kind, name)`` (or delete it), then publish a :class:`WatchEvent` carrying that write's
revision on ``events_subject(key)``; finally advance the scope's resume point. The projection keeps a
cache of every object it placed (its JSON packed, ``packing``) and under which keys, so it can (a) move
an object between keys when its labels/owners or a relation changes (a RayJob starts selecting a
cluster; a Service gains keys and its EndpointSlices follow), (b) answer a relist with synthetic DELETED
events for vanished objects, (c) rebuild itself from the KV at start, which is what lets a restarted
watcher resume its watches instead of relisting, and (d) repair drift: an informer's periodic
:class:`~services.edge.watch.informer.Check` is compared with what it holds (``_plan_check``), and what it
holds with the keys of KV (:meth:`Projection.check_entries`); each difference is written as an ordinary
event and counted in ``raybus_projection_repairs_total{kind, reason}``.

Lifecycle facts: the first sight of a RayCluster/RayJob/RayService/RayCronJob and its deletion are
published as ``CommandResult(verb="observe")`` with a ``lifecycle`` transition on the key's results
subject, so the status service keeps rows after the object is gone.

Invariants:
- Per change, writes are planned synchronously (cache and relations update atomically on the loop);
  the planned writes of successive changes run concurrently in a bounded window, each one KV write then
  one publish; a failed write is retried until it succeeds or the watcher stops, and is skipped only
  when a newer version of the same entry is queued behind it.
- Writes of one entry are strictly ordered: each waits for the previous write of the same KV entry to
  finish (retries included), so an older version never overwrites a newer one. Across a restart too: a
  write JetStream acknowledges as a duplicate is checked against the entry, and written again under a
  fresh id when the entry holds an older version of the object (``_overwritten`` says how that happens).
- A custom resource's deletion is projected no later than the deletions of its children: before a
  child's deletion (or deletionTimestamp) whose owner is held alive, the owner is read from the API
  server, and its deletion, if it happened, is projected and published first (``owners``). Its own
  DELETE arriving later changes nothing; its older events arriving later are skipped.
- A KV write is checked against its key's last write (``keywrites``; revision 0 for a key the loaded
  bucket did not hold), and its event then names that write's revision (``kv_previous``), so a reconciler
  holding the key, or a new key's, needs no read.
- Message ids: ``<uid>/<rv>/<type>/<key token>`` for a change, with ``/<cause uid>/<cause rv>`` appended
  when a relation change moved the object (so the same version can re-enter a key later). The KV writes
  carry the same id, so HA replicas store each version once and agree on ``kv_revision``.

Not here: list/watch (``informer``), the mapping rules (``keymap``), resume storage (``resume``).
Rejected: one KV get per key on the reconcile side (a snapshot is one prefix read), and re-encoding objects on the loop
(the informer thread hands over the JSON bytes; WatchEvents embed them as ``msgspec.Raw``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, cast

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_OP, KeyValue
from opentelemetry.trace import Tracer

from schema import codec, subjects
from schema.bounds import TooComplex
from schema.keys import ReconcileKey
from schema.messages import CommandResult, Transition, WatchEvent, WatchEventType
from schema.times import parse_time
from services.edge import pipeline_metrics
from services.edge.calls import ApiError
from services.edge.resources import ResourceType, by_kind
from services.edge.watch.informer import Batch, Bookmark, Change, Check, Handoff, Item, Listing, Scope, make_change
from services.edge.watch.keymap import dependencies, keys_for
from services.edge.watch.keywrites import KeyWrites
from services.edge.watch.owners import OwnerReader, deleting, owners_of_going
from services.edge.watch.packing import Packer
from services.edge.watch.podfacts import POD, slim_pod
from services.edge.watch.relations import ObjectId, Relations
from services.edge.watch.resume import Ticket, Watermarks, store_resume_points
from services.edge.watch.statusonly import status_only
from services.runtime.aio import cancel_and_wait, raise_if_cancelling
from services.runtime.backoff import Backoff, retry
from services.runtime.bus import bus_unavailable, publish
from services.runtime.clock import Clock, utc_now
from services.runtime.kvread import read_entries
from services.runtime.tracing import ENTRY_WRITTEN, current_trace_id, key_attributes, tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)

KV_PREFIX: Final = subjects.kv_subject(subjects.OBJECTS_BUCKET)
WRITE_BACKOFF: Final = Backoff(base=0.05, cap=5.0)
"""Pauses between attempts of a failed bus write, retried until it succeeds or the watcher stops."""

REMEMBERED_DELETIONS: Final = 65536
"""Deleted objects remembered by name, so a command decided just before a deletion was projected is
recognised as late rather than as a command on an unknown object."""

_CHUNK: Final = 64
"""Writes per window slot when one item (a listing) plans many."""
GONE_MEMORY: Final = 100_000
"""Deleted custom resources (by uid) the projection remembers, for :meth:`Projection.owner_gone`."""


def message_id(change: Change, event_type: WatchEventType, key: ReconcileKey, cause: Change | None = None) -> str:
    """The de-duplication id of one projected event (also used for its KV write)."""
    base = f"{change.uid}/{change.resource_version}/{event_type}/{key.token()}"
    return f"{base}/{cause.uid}/{cause.resource_version}" if cause is not None else base


def written_version(msg_id: str) -> tuple[str, int]:
    """The uid and resourceVersion (-1: not a number) of the object a :func:`message_id` names."""
    uid, _, rest = msg_id.partition("/")
    return uid, _rv(rest.partition("/")[0])


def lifecycle_id(uid: str, what: str) -> str:
    """The de-duplication id of a lifecycle fact."""
    return f"lifecycle/{uid}/{what}"


def _rv(resource_version: str) -> int:
    """A resourceVersion as a number (-1 when it is not one: then nothing is assumed about its order)."""
    return int(resource_version) if resource_version.isdigit() else -1


def _parse_time(value: object, default: datetime) -> datetime:
    return parse_time(value) or default


@dataclass(slots=True)
class Placed:
    """An object the projection holds and the keys it is stored under. Once held (``Projection._hold``),
    ``change`` has no ``raw`` bytes: they are ``packed`` (``packing``)."""

    resource: ResourceType
    change: Change
    keys: tuple[ReconcileKey, ...]
    packed: bytes = b""


@dataclass(slots=True)
class _Write:
    key: ReconcileKey
    resource: ResourceType
    change: Change
    event_type: WatchEventType
    msg_id: str
    # Per-entry order: a write starts only when the previous write of the same entry has finished.
    after: asyncio.Future[None] | None = None
    done: asyncio.Future[None] | None = None
    status_only: bool = False
    """The key's own custom resource changed in its status alone (``statusonly``)."""


@dataclass(slots=True)
class _Fact:
    key: ReconcileKey
    change: Change
    what: str


_Op = _Write | _Fact


class Projection:
    """Holds the projected objects and turns informer batches into bus writes."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        resume_kv: KeyValue | None = None,
        resume_points: dict[str, str] | None = None,
        clock: Clock = utc_now,
        tracer: Tracer | None = None,
        window: int = 512,
        resume_interval: float = 0.5,
        owners: OwnerReader | None = None,
    ) -> None:
        self._js = js
        self._resume_kv = resume_kv
        self._clock = clock
        self._tracer = tracer or _tracer
        self._relations = Relations()
        self._objects: dict[ObjectId, Placed] = {}
        self._packer = Packer()
        self._by_kind: dict[str, dict[str, Placed]] = {}
        # The applier's facts (services/edge/apply/authorize.Facts): objects by name, recent deletions.
        self._by_name: dict[tuple[str, str, str], Placed] = {}
        self._deleted: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._watermarks = Watermarks(resume_points)
        self._slots = asyncio.Semaphore(window)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._resume_interval = resume_interval
        self._tails: dict[str, _Write] = {}
        """KV subject → the latest write of that entry planned and not yet finished."""
        self._key_writes = KeyWrites(subjects.OBJECTS_BUCKET)
        self._gone: dict[str, None] = {}
        """uids of custom resources whose deletion was projected, oldest first (bounded)."""
        self._owners = owners
        self._alive_at: dict[str, int] = {}
        """uid of a custom resource → the API server's resourceVersion at which it was read alive."""
        self._read_at: dict[str, int] = {}
        """uid of a custom resource projected from a read → its resourceVersion (older events are stale)."""
        self._deleting_at: dict[str, int] = {}
        """uid of a custom resource being deleted → KV revision of the first write that showed it so."""
        self._suspects: dict[str, dict[str, str]] = {}
        """Scope → uid → resourceVersion of held objects its last check did not list (``_plan_check``)."""
        self.events_published = 0
        self.writes_done = 0
        self.writes_folded = 0
        """Writes left to a newer version of their entry queued behind them (:meth:`_fold`)."""
        self.repairs = 0
        """Drift repairs planned (``raybus_projection_repairs_total``)."""

    # --- state ----------------------------------------------------------------------------------

    def get(self, kind: str, uid: str) -> Placed | None:
        """The held object of ``kind`` with ``uid``."""
        return self._objects.get((kind, uid))

    def owner_gone(self, kind: str, uid: str, snapshot_revision: int) -> bool:
        """Whether a decision made on a snapshot at ``snapshot_revision`` missed the deletion of the custom
        resource ``kind``/``uid``: the watch has shown it deleted, or being deleted from a later KV
        revision on (or in a write still under way)."""
        placed = self._objects.get((kind, uid))
        if placed is None:
            return uid in self._gone
        if not deleting(placed.change.obj):
            return False
        since = self._deleting_at.get(uid)
        return since is None or snapshot_revision < since

    def find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The held object of ``kind`` named ``namespace/name``, or None."""
        placed = self._by_name.get((kind, namespace, name))
        return placed.change.obj if placed is not None else None

    async def caught_up(self, revision: int) -> None:
        """At once: the cache changes before the KV write it makes, so it is ahead of any snapshot."""

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        """Whether one of the last :data:`REMEMBERED_DELETIONS` deletions was that object (not seen since)."""
        return (kind, namespace, name) in self._deleted

    def objects_of(self, kind: str) -> list[Placed]:
        """Every held object of one kind."""
        return list(self._by_kind.get(kind, {}).values())

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """Every held object of one kind, as the prober reads them (``prober.ObjectSource``)."""
        return [placed.change.obj for placed in self._by_kind.get(kind, {}).values()]

    def committed(self, scope: Scope) -> str | None:
        """The scope's fully published resourceVersion."""
        return self._watermarks.committed(scope.name)

    async def load(self, nc: Client) -> int:
        """Rebuild the cache from KV ``raybus-objects`` (a restarted watcher resumes instead of relisting).

        The bucket is read with batched direct gets (``kvread``), which end with the sequence they reflect,
        not with a KV watch: nats-py ends a watch's initial values with a marker it may deliver before the
        values themselves (its consumer reports nothing pending while they are still on the way), and a
        load cut short would project every object again as missing.

        Returns:
            The number of objects loaded.

        Raises:
            RetryableError: the bucket could not be read.
        """
        found: dict[ObjectId, tuple[int, Placed]] = {}
        read = await read_entries(nc, subjects.OBJECTS_BUCKET, ">")
        for kv_key, entry in read.entries.items():
            try:
                key, entry_kind, name = subjects.parse_entry_key(kv_key)
            except ValueError as exc:
                log.warning("ignoring KV entry %s: %s", kv_key, exc)
                continue
            self._key_writes.seed(key, entry.revision)  # deletions too: their markers are the key's writes
            if entry.value is None:
                continue
            resource = by_kind(entry_kind)
            if resource is None or not resource.watched:
                continue  # observations and anything else that is not a watched object
            try:
                obj: dict[str, Any] = msgspec.json.decode(entry.value, type=dict[str, Any])
            except msgspec.DecodeError:
                log.warning("ignoring undecodable KV entry %s", kv_key)
                continue
            metadata = obj.get("metadata") or {}
            change = Change(
                type="ADDED",
                obj=obj,
                raw=entry.value,
                uid=str(metadata.get("uid") or ""),
                resource_version=str(metadata.get("resourceVersion") or ""),
                namespace=str(metadata.get("namespace") or ""),
                name=name,
            )
            oid = (resource.kind, change.uid)
            held = found.get(oid)
            if held is None:
                found[oid] = (entry.revision, Placed(resource, change, (key,)))
            else:
                revision, placed = held
                keys = (*placed.keys, key) if key not in placed.keys else placed.keys
                newer = entry.revision > revision
                found[oid] = (max(revision, entry.revision), Placed(resource, change if newer else placed.change, keys))
        for oid, (revision, placed) in found.items():
            self._hold(oid, placed)
            if placed.resource.is_key_kind and deleting(placed.change.obj):
                self._deleting_at[placed.change.uid] = revision
            self._relations.record(placed.resource.kind, placed.change.obj, placed.keys)
            self._relations.track(oid, dependencies(placed.resource.kind, placed.change.obj))
        return len(found)

    def _hold(self, oid: ObjectId, placed: Placed) -> None:
        change, kind = placed.change, placed.resource.kind
        # A Pod is kept slim: its bytes go to KV whole, the rest of the watch side reads little of it.
        obj = slim_pod(change.obj) if kind == POD else change.obj
        placed = Placed(
            placed.resource, replace(change, obj=obj, raw=b""), placed.keys, self._packer.pack(kind, change.raw)
        )
        self._objects[oid] = placed
        self._by_kind.setdefault(oid[0], {})[oid[1]] = placed
        named = (oid[0], placed.change.namespace, placed.change.name)
        self._by_name[named] = placed
        self._deleted.pop(named, None)

    def _whole(self, placed: Placed) -> Change:
        """A held object with its JSON, to be written again."""
        return replace(placed.change, raw=self._packer.unpack(placed.resource.kind, placed.packed))

    def _drop(self, oid: ObjectId) -> None:
        placed = self._objects.pop(oid, None)
        if placed is not None:
            named = (oid[0], placed.change.namespace, placed.change.name)
            if self._by_name.get(named) is placed:
                del self._by_name[named]
                self._deleted[named] = None
                if len(self._deleted) > REMEMBERED_DELETIONS:
                    self._deleted.popitem(last=False)
        by_uid = self._by_kind.get(oid[0])
        if by_uid is not None:
            by_uid.pop(oid[1], None)

    # --- planning (synchronous: the cache and relations change atomically) ------------------------

    def plan(self, scope: Scope, item: Item) -> list[_Op]:
        """Update the cache for one informer item and return the writes it needs."""
        if isinstance(item, Bookmark):
            return []
        if isinstance(item, Listing):
            return self._plan_listing(scope, item)
        if isinstance(item, Check):
            return self._plan_check(scope, item)
        return self._plan_change(scope.resource, item)

    def _plan_change(self, resource: ResourceType, change: Change, cause: Change | None = None) -> list[_Op]:
        oid = (resource.kind, change.uid)
        prev = self._objects.get(oid)
        if change.type == "DELETED":
            self._read_at.pop(change.uid, None)
            return self._plan_removal(resource, oid, change, prev)
        if self._read_at.get(change.uid, -1) >= _rv(change.resource_version) >= 0:
            return []  # older than what was read from the API server and projected already
        keys = keys_for(resource.kind, change.obj, self._relations.index)
        ops: list[_Op] = []
        old_keys = prev.keys if prev is not None else ()
        for key in keys:
            event_type: WatchEventType = change.type if key in old_keys else "ADDED"
            write = _Write(key, resource, change, event_type, message_id(change, event_type, key, cause))
            if event_type == "MODIFIED" and prev is not None:
                write.status_only = status_only(key, resource.kind, prev.change.obj, change.obj)
            ops.append(write)
        for key in old_keys:
            if key not in keys:
                ops.append(_Write(key, resource, change, "DELETED", message_id(change, "DELETED", key, cause)))
        self._hold(oid, Placed(resource, change, keys))
        if resource.is_key_kind and prev is None:
            own = ReconcileKey(kind=resource.kind, namespace=change.namespace, name=change.name)  # type: ignore[arg-type]
            ops.append(_Fact(own, change, "created"))
        self._relations.track(oid, dependencies(resource.kind, change.obj))
        changed = self._relations.record(resource.kind, change.obj, keys)
        if changed:
            ops.extend(self._plan_remaps(changed, change))
        return ops

    def _plan_removal(self, resource: ResourceType, oid: ObjectId, change: Change, prev: Placed | None) -> list[_Op]:
        if prev is None and change.uid in self._gone:
            return []  # its deletion was projected already (read from the API server before a child's)
        keys = dict.fromkeys(prev.keys if prev is not None else ())
        for key in keys_for(resource.kind, change.obj, self._relations.index):
            keys[key] = None
        ops: list[_Op] = [_Write(key, resource, change, "DELETED", message_id(change, "DELETED", key)) for key in keys]
        self._drop(oid)
        self._relations.untrack(oid)
        if resource.is_key_kind:
            own = ReconcileKey(kind=resource.kind, namespace=change.namespace, name=change.name)  # type: ignore[arg-type]
            ops.append(_Fact(own, change, "deleted"))
            self._gone[change.uid] = None
            self._deleting_at.pop(change.uid, None)
            self._alive_at.pop(change.uid, None)
            if len(self._gone) > GONE_MEMORY:
                del self._gone[next(iter(self._gone))]
        changed = self._relations.forget(resource.kind, change.obj)
        if changed:
            ops.extend(self._plan_remaps(changed, change))
        return ops

    def _plan_remaps(self, refs: list[Any], cause: Change, depth: int = 0) -> list[_Op]:
        """Move the dependents of changed relations to their new keys (only the keys that changed)."""
        ops: list[_Op] = []
        for ref in refs:
            for oid in self._relations.dependents(ref):
                placed = self._objects.get(oid)
                if placed is None or placed.change.uid == cause.uid:
                    continue
                keys = keys_for(placed.resource.kind, placed.change.obj, self._relations.index)
                if keys == placed.keys:
                    continue
                change = self._whole(placed)
                for key in keys:
                    if key not in placed.keys:
                        ops.append(
                            _Write(key, placed.resource, change, "ADDED", message_id(change, "ADDED", key, cause))
                        )
                for key in placed.keys:
                    if key not in keys:
                        ops.append(
                            _Write(key, placed.resource, change, "DELETED", message_id(change, "DELETED", key, cause))
                        )
                placed.keys = keys
                further = self._relations.record(placed.resource.kind, change.obj, keys)
                if further and depth < 3:
                    ops.extend(self._plan_remaps(further, cause, depth + 1))
        return ops

    def _plan_listing(self, scope: Scope, listing: Listing) -> list[_Op]:
        resource = scope.resource
        listed = {change.uid: change for change in listing.objects}
        held = self._by_kind.get(resource.kind, {})
        ops: list[_Op] = []
        for uid, placed in list(held.items()):
            if (
                uid in listed
                or uid in listing.refused
                or (scope.namespace and placed.change.namespace != scope.namespace)
            ):
                continue
            gone = replace(self._whole(placed), type="DELETED")
            ops.extend(self._plan_change(resource, gone))
        for uid, change in listed.items():
            known = held.get(uid)
            if known is not None and known.change.resource_version == change.resource_version:
                continue
            ops.extend(self._plan_change(resource, replace(change, type="MODIFIED" if known else "ADDED")))
        return ops

    def _plan_check(self, scope: Scope, check: Check) -> list[_Op]:
        """Repair what the watch should have shown by ``check.resource_version`` and the projection lacks.

        The cache holds exactly the watch's events up to that point (a check arrives in order with them),
        the list shows the API server at ``check.listed_at``, later. A listed object unchanged since the
        watch's point must be held at its version (else ``missing``/``stale``). A held object that is not
        listed was deleted before the list, maybe after the watch's point (its DELETED is on the way): it
        is repaired (``vanished``) when the next check of the scope still finds it so.
        """
        watched, listed_at = _rv(check.resource_version), _rv(check.listed_at)
        if watched < 0 or listed_at < 0:
            return []  # resourceVersions that are not numbers tell nothing about order: nothing to compare
        resource = scope.resource
        listed = {change.uid: change for change in check.objects}
        held = self._by_kind.get(resource.kind, {})
        ops: list[_Op] = []
        tag = f"check/{check.listed_at}"
        earlier = self._suspects.pop(scope.name, {})
        suspects: dict[str, str] = {}
        for uid, placed in list(held.items()):
            version = placed.change.resource_version
            if (
                uid in listed
                or uid in check.refused
                or (scope.namespace and placed.change.namespace != scope.namespace)
                or not 0 <= _rv(version) <= listed_at
            ):
                continue
            if not placed.keys:  # nothing of it is projected: only what is held changes
                ops.extend(self._plan_change(resource, replace(self._whole(placed), type="DELETED")))
            elif earlier.get(uid) == version:
                ops.extend(self._repair(resource, replace(self._whole(placed), type="DELETED"), "vanished", tag))
            else:
                suspects[uid] = version
        if suspects:
            self._suspects[scope.name] = suspects
        for uid, change in listed.items():
            listed_version = _rv(change.resource_version)
            if not 0 <= listed_version <= watched:
                continue  # changed after the watch's point: its event is on the way
            known = held.get(uid)
            if known is not None and _rv(known.change.resource_version) >= listed_version:
                continue
            if known is None and uid in self._gone:
                continue  # its deletion was read from the API server and projected already
            if not (known.keys if known is not None else ()) and not keys_for(
                resource.kind, change.obj, self._relations.index
            ):
                # Belongs to no key (a restarted watcher holds only what KV had): nothing was lost.
                ops.extend(self._plan_change(resource, replace(change, type="MODIFIED" if known else "ADDED")))
            elif known is None:
                ops.extend(self._repair(resource, change, "missing", tag))
            else:
                ops.extend(self._repair(resource, replace(change, type="MODIFIED"), "stale", tag))
        return ops

    def _repair(self, resource: ResourceType, change: Change, reason: str, tag: str) -> list[_Op]:
        """Plan ``change`` as an ordinary one, written under fresh message ids (``tag``): the bus may have
        de-duplicated the same version's earlier writes that were lost since."""
        log.warning(
            "projection drift: %s %s/%s %s (resourceVersion %s); repairing",
            resource.kind,
            change.namespace,
            change.name,
            reason,
            change.resource_version,
        )
        pipeline_metrics.repaired(resource.kind, reason)
        self.repairs += 1
        ops = self._plan_change(resource, change)
        for op in ops:
            if isinstance(op, _Write):
                op.msg_id = f"{op.msg_id}/{tag}"
        return ops

    # --- the entries check (KV against what is held) -------------------------------------------------

    async def check_entries(self, kv: KeyValue) -> int:
        """Compare KV ``raybus-objects`` with what the projection holds; repair, as ordinary events, an entry
        a held object should have and KV lacks (``lost``: deleted behind the projection's back, or gone with
        a bus that lost acknowledged writes), and delete an entry KV holds that no held object places there
        (``orphaned``) once the API server confirms the object is gone; if it is not, the projection is what
        lacks it (``missing``), and it is projected again. Only the keys are read, unless one differs; an
        entry with a write under way is left to that write. Not seen: an entry overwritten with other
        content under the right key.

        Returns:
            The entries repaired.
        """
        live = await self._live_entries(kv)
        expected = self._expected_entries()
        tag = f"entries/{int(self._clock().timestamp() * 1000)}"
        ops: list[_Op] = []
        for entry, (key, oid) in expected.items():
            if entry in live or KV_PREFIX + entry in self._tails:
                continue
            try:
                await kv.get(entry)
                continue  # written meanwhile
            except KeyNotFoundError:
                pass
            placed = self._objects.get(oid)
            if placed is None or key not in placed.keys or KV_PREFIX + entry in self._tails:
                continue  # changed meanwhile: its own writes decide
            ops.append(self._entry_repair(key, placed.resource, self._whole(placed), "MODIFIED", "lost", tag))
        for entry, (key, resource) in live.items():
            if entry in expected or KV_PREFIX + entry in self._tails:
                continue
            try:
                found = await kv.get(entry)
                change = make_change(resource, "DELETED", found.value or b"")
            except KeyNotFoundError:
                continue  # deleted meanwhile
            except (msgspec.DecodeError, TooComplex) as exc:
                log.warning("KV entry %s is not an object (%s); leaving it", entry, exc)
                continue
            alive = await self._alive(resource, change)
            if alive is None:
                continue  # the API server did not say: the next check asks again
            if alive.uid and (resource.kind, alive.uid) not in self._objects:
                # The API server has it: what lacks it is the projection, not KV.
                ops.extend(self._repair(resource, replace(alive, type="ADDED"), "missing", tag))
                continue
            if entry in self._expected_entries() or KV_PREFIX + entry in self._tails:
                continue
            ops.append(self._entry_repair(key, resource, change, "DELETED", "orphaned", tag))
        if ops:
            self._chain(ops)
            now = self._clock()
            await asyncio.gather(*(self._do(op, now) for op in ops))
        return len(ops)

    async def _alive(self, resource: ResourceType, change: Change) -> Change | None:
        """The object of an entry nothing places, as the API server has it now (an empty change when it
        has none of that uid); None when it cannot be read (or there is no API server to ask)."""
        if self._owners is None:
            return None
        try:
            current = await self._owners(resource, change.namespace, change.name)
        except (ApiError, TooComplex) as exc:
            log.warning("could not read %s %s/%s: %s", resource.kind, change.namespace, change.name, exc)
            return None
        found = current.change
        if found is None or found.uid != change.uid:
            return replace(change, uid="")
        return found

    async def _live_entries(self, kv: KeyValue) -> dict[str, tuple[ReconcileKey, ResourceType]]:
        """The KV entries of watched objects that are not deleted, by entry key (headers only, no values)."""
        live: dict[str, tuple[ReconcileKey, ResourceType]] = {}
        watcher = await kv.watch(">", ignore_deletes=True, meta_only=True)
        try:
            async for entry in watcher:
                if entry is None:
                    break
                try:
                    key, entry_kind, _ = subjects.parse_entry_key(entry.key)
                except ValueError:
                    continue
                resource = by_kind(entry_kind)
                if resource is not None and resource.watched:
                    live[entry.key] = (key, resource)
        finally:
            with contextlib.suppress(Exception):
                await cast(Callable[[], Awaitable[None]], watcher.stop)()
        return live

    def _expected_entries(self) -> dict[str, tuple[ReconcileKey, ObjectId]]:
        """Every entry the held objects should have in KV, with its key and object."""
        return {
            subjects.entry_key(key, oid[0], placed.change.name): (key, oid)
            for oid, placed in self._objects.items()
            for key in placed.keys
        }

    def _entry_repair(
        self,
        key: ReconcileKey,
        resource: ResourceType,
        change: Change,
        event_type: WatchEventType,
        reason: str,
        tag: str,
    ) -> _Write:
        log.warning(
            "projection drift: the KV entry of %s %s/%s under %s is %s; repairing",
            resource.kind,
            change.namespace,
            change.name,
            key,
            reason,
        )
        pipeline_metrics.repaired(resource.kind, reason)
        self.repairs += 1
        return _Write(key, resource, change, event_type, f"{message_id(change, event_type, key)}/{tag}")

    # --- writing ----------------------------------------------------------------------------------

    async def run(self, batches: Handoff) -> None:
        """Project batches until cancelled; a write failure that is not transient ends it (loudly)."""
        flusher = asyncio.create_task(self._flush_loop(), name="watcher-resume-flush")
        try:
            while True:
                raise_if_cancelling()
                batch = await batches.get()
                await self.project(batch)
        finally:
            await cancel_and_wait([flusher], timeout=2.0)

    async def project(self, batch: Batch) -> None:
        """Plan one batch and start its writes (waits only for free slots in the window)."""
        if self._failure is not None:
            raise RuntimeError("a projection write failed") from self._failure
        pipeline_metrics.projected(batch.scope.resource.plural, time.monotonic() - batch.received)
        for item in batch.items:
            if self._owners is not None and isinstance(item, Change):
                await self._owners_first(batch.scope, item)
            ops = self.plan(batch.scope, item)
            self._chain(ops)
            # A listing can plan thousands of writes: run them in chunks, each holding one window slot;
            # only the last chunk's ticket carries the resourceVersion (earlier ones never commit alone).
            chunks = [ops[i : i + _CHUNK] for i in range(0, len(ops), _CHUNK)] or [[]]
            for index, chunk in enumerate(chunks):
                last = index == len(chunks) - 1
                ticket = self._watermarks.open(batch.scope.name, item.resource_version if last else "")
                if not chunk:
                    ticket.done()
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._perform(chunk, ticket))
                self._tasks.add(task)
                task.add_done_callback(self._finished)

    def _chain(self, ops: list[_Op]) -> None:
        """Order each write after the previous write of its entry."""
        loop = asyncio.get_running_loop()
        for op in ops:
            if isinstance(op, _Write):
                subject = self._kv_subject(op)
                before = self._tails.get(subject)
                op.after = before.done if before is not None else None
                op.done = loop.create_future()
                self._tails[subject] = op

    async def _owners_first(self, scope: Scope, change: Change) -> None:
        """Before a child's deletion, project its owners' deletions that the API server already made
        (``services/edge/watch/owners.py`` says why); waits until those writes are published."""
        assert self._owners is not None
        for owner in owners_of_going(change):
            placed = self._objects.get((owner.kind, owner.uid))
            if placed is None or deleting(placed.change.obj):
                continue
            if self._alive_at.get(owner.uid, -1) >= _rv(change.resource_version) >= 0:
                continue  # read alive after this change already
            try:
                current = await self._owners(placed.resource, placed.change.namespace, placed.change.name)
            except (ApiError, TooComplex) as exc:  # ordering is lost for this child, nothing else
                log.warning("could not read %s %s: %s", owner.kind, placed.change.name, exc)
                continue
            found = current.change
            if found is not None and found.uid == owner.uid and not deleting(found.obj):
                self._alive_at[owner.uid] = _rv(current.resource_version)
                continue
            if found is None or found.uid != owner.uid:
                ops = self._plan_change(placed.resource, replace(self._whole(placed), type="DELETED"))
            else:
                ops = self._plan_change(placed.resource, replace(found, type="MODIFIED"))
                self._read_at[owner.uid] = _rv(found.resource_version)
            self._chain(ops)
            ticket = self._watermarks.open(scope.name, "")  # commits nothing by itself
            await self._perform(ops, ticket)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()

    async def drain(self) -> None:
        """Wait for every started write."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._failure is not None:
            raise RuntimeError("a projection write failed") from self._failure

    async def close(self) -> None:
        """Cancel unfinished writes (their items stay uncommitted) and store the committed resume points."""
        lingering = await cancel_and_wait(list(self._tasks), timeout=2.0)
        if lingering:
            log.warning("%d projection writes did not stop", len(lingering))
        await self.flush()

    async def flush(self) -> None:
        """Store the resume points committed since the last flush."""
        if self._resume_kv is None:
            return
        dirty = self._watermarks.take_dirty()
        if dirty:
            await store_resume_points(self._resume_kv, dirty)

    async def _flush_loop(self) -> None:
        while True:
            raise_if_cancelling()
            await asyncio.sleep(self._resume_interval)
            try:
                await self.flush()
            except (nats.errors.Error, TimeoutError) as exc:
                raise_if_cancelling()
                log.warning("storing resume points failed: %s", exc)

    async def _perform(self, ops: list[_Op], ticket: Ticket) -> None:
        now = self._clock()
        if len(ops) == 1:
            await self._do(ops[0], now)
        else:
            await asyncio.gather(*(self._do(op, now) for op in ops))
        ticket.done()

    @staticmethod
    def _kv_subject(op: _Write) -> str:
        return KV_PREFIX + subjects.entry_key(op.key, op.resource.kind, op.change.name)

    async def _do(self, op: _Op, now: datetime) -> None:
        if isinstance(op, _Fact):
            with self._tracer.start_as_current_span(
                "watcher.lifecycle",
                attributes={
                    **key_attributes(op.key),
                    "k8s.resource_version": op.change.resource_version,
                    "raybus.lifecycle": op.what,
                },
            ):
                await self._retrying(lambda: self._publish_fact(op, now))
            return
        subject = self._kv_subject(op)

        def superseded() -> bool:
            # A retried write need not happen once a newer version of the same entry is queued behind it.
            return self._tails.get(subject) is not op

        try:
            if op.after is not None and not op.after.done():
                await asyncio.shield(op.after)
            if self._fold(op, self._tails.get(subject)):
                return
            with self._tracer.start_as_current_span(
                "watcher.project",
                attributes={
                    "k8s.namespace.name": op.change.namespace,
                    "raybus.kind": op.resource.kind,
                    "raybus.key": str(op.key),
                    "k8s.resource_version": op.change.resource_version,
                    "raybus.event_type": op.event_type,
                },
            ) as span:
                written = await self._retrying(lambda: self._write_kv(op, subject), superseded)
                if written is None:
                    return
                revision, previous = written
                span.add_event(ENTRY_WRITTEN, {"raybus.kv_revision": revision})
                if op.resource.is_key_kind and op.event_type != "DELETED" and deleting(op.change.obj):
                    since = self._deleting_at.get(op.change.uid)
                    self._deleting_at[op.change.uid] = revision if since is None else min(since, revision)
                event = WatchEvent(
                    key=op.key,
                    event_type=op.event_type,
                    entry_kind=op.resource.kind,
                    # The informer thread already produced the object's JSON: embed it as is.
                    object=cast(dict[str, Any], msgspec.Raw(op.change.raw)),
                    resource_version=op.change.resource_version,
                    observed_at=now,
                    kv_revision=revision,
                    kv_previous=previous,
                    status_only=op.status_only,
                )
                payload = codec.encode(event)
                await self._retrying(lambda: self._publish_event(op, payload), superseded)
            self.writes_done += 1
        finally:
            if op.done is not None:
                if not op.done.done():
                    op.done.set_result(None)
                if self._tails.get(subject) is op:
                    del self._tails[subject]

    def _fold(self, op: _Write, newest: _Write | None) -> bool:
        """Leave ``op`` to ``newest``, a later version of the same object queued behind it for the same
        entry, when neither is a deletion and the object is not a custom resource of a key; ``newest`` then
        stands for both (an ADDED stays one, and it is status-only only if both are). True when ``op`` is
        left.

        Under load the watch falls behind the API server, and the versions of a Pod come in the same batch
        (its creation, binding and start): its entry and event carry only the latest, as an informer's
        cache holds only the latest. A single change is never held back for a later one. A key's custom
        resource is never folded: a version that was never written has no id for JetStream to know it by,
        so a replica behind (a deposed leader, a watcher resuming from an older point) could write it over
        the newer one until that one comes again, and for a custom resource an older spec means other
        Pods; for a Pod it means an older status for a moment."""
        if newest is None or newest is op or newest.change.uid != op.change.uid or op.resource.is_key_kind:
            return False
        if "DELETED" in (op.event_type, newest.event_type):
            return False
        if op.event_type == "ADDED":
            newest.event_type = "ADDED"
        newest.status_only = newest.status_only and op.status_only
        self.writes_folded += 1
        pipeline_metrics.folded(op.resource.kind)
        return True

    async def _write_kv(self, op: _Write, subject: str) -> tuple[int, int | None]:
        """Write ``op``'s entry; its revision, and the revision of its key's previous write when the bucket
        checked it (``keywrites``)."""
        ack, previous = await self._put(op, subject)
        if not ack.duplicate or self._tails.get(subject) is not op:
            return int(ack.seq), previous  # stored now, or a newer version of the entry is queued behind it
        older = await self._overwritten(op, subject)
        if older is None:
            return int(ack.seq), None
        # The entry went back to an older version after this one was stored: write it again under a fresh
        # id (the same in every replica that finds the same older write), and publish its event under it.
        log.warning(
            "the KV entry of %s %s/%s under %s went back to an older version; writing resourceVersion %s again",
            op.resource.kind,
            op.change.namespace,
            op.change.name,
            op.key,
            op.change.resource_version,
        )
        pipeline_metrics.repaired(op.resource.kind, "overwritten")
        self.repairs += 1
        op.msg_id = f"{op.msg_id}/over/{older}"
        ack, previous = await self._put(op, subject)
        return int(ack.seq), previous

    async def _put(self, op: _Write, subject: str) -> tuple[PubAck, int | None]:
        return await self._key_writes.write(op.key, lambda checks: self._publish_entry(op, subject, checks))

    async def _publish_entry(self, op: _Write, subject: str, checks: dict[str, str]) -> PubAck:
        if op.event_type == "DELETED":
            headers = {KV_OP: KV_DEL, "Nats-Msg-Id": op.msg_id, **checks}
            return await self._js.publish(subject, b"", headers=headers)
        return await self._js.publish(subject, op.change.raw, headers={"Nats-Msg-Id": op.msg_id, **checks})

    async def _overwritten(self, op: _Write, subject: str) -> int | None:
        """The stream sequence of an older version of ``op``'s object that the entry holds now, written after
        ``op``'s own write was stored (None: the entry holds this version, a newer one, or another object).

        A duplicate acknowledgement says a message with the write's id was stored once, not that the entry
        still holds it. A watcher that resumes from a point older than its last writes replays versions
        the entry already had; a restarted nats-server knows only the ids of the messages it still stores,
        so it stores the replayed older version (its first message was replaced in the one-version bucket)
        and drops the newer one's replay as a duplicate of the message the older one just replaced."""
        try:
            stored = await self._js.get_last_msg(subjects.kv_stream(subjects.OBJECTS_BUCKET), subject, direct=True)
        except nats.js.errors.NotFoundError:
            return None  # removed since: the entries check repairs an entry KV lacks
        uid, version = written_version((stored.headers or {}).get("Nats-Msg-Id", ""))
        if uid != op.change.uid or not 0 <= version < _rv(op.change.resource_version):
            return None
        return stored.seq

    async def _publish_event(self, op: _Write, payload: bytes) -> None:
        ack = await publish(self._js, subjects.events_subject(op.key), payload, msg_id=op.msg_id)
        if not ack.duplicate:
            self.events_published += 1

    async def _publish_fact(self, fact: _Fact, now: datetime) -> None:
        change = fact.change
        metadata = change.obj.get("metadata") or {}
        if fact.what == "created":
            at = _parse_time(metadata.get("creationTimestamp"), now)
        else:
            at = _parse_time(metadata.get("deletionTimestamp"), now)
        transition = Transition(
            kind=fact.key.kind,
            uid=change.uid,
            namespace=change.namespace,
            name=change.name,
            field="lifecycle",
            from_value="",
            to_value=fact.what,
            at=at,
            resource_version=change.resource_version,
        )
        result = CommandResult(
            batch_id="",
            command_id=lifecycle_id(change.uid, fact.what),
            key=fact.key,
            verb="observe",
            target=f"{fact.key.kind} {change.namespace}/{change.name}",
            outcome="applied",
            at=now,
            resource_version=change.resource_version,
            transitions=(transition,),
            trace_id=current_trace_id(),
        )
        await publish(
            self._js,
            subjects.result_subject(fact.key),
            codec.encode(result),
            msg_id=lifecycle_id(change.uid, fact.what),
        )

    async def _retrying(self, attempt: Callable[[], Any], superseded: Callable[[], bool] | None = None) -> Any:
        """Run a bus write until it succeeds (transient NATS errors are retried with backoff).

        Returns:
            The write's result, or None when ``superseded`` says a newer write made it pointless.
        """
        try:
            return await retry(
                attempt,
                WRITE_BACKOFF,
                transient=bus_unavailable,
                give_up=superseded or (lambda: False),
                on_retry=lambda exc, _, delay: log.warning("bus write failed (%s); retrying in %.2fs", exc, delay),
            )
        except (nats.errors.Error, TimeoutError):  # only ever raised once superseded
            return None
