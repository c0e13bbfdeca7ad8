"""Informers: one list+watch loop per resource type (and namespace) in a worker thread, feeding asyncio.

Role: keep the projection told about every change of one resource in one scope (a namespace, or the
whole cluster). Its requests are blocking (urllib3, ``kubeapi``), so each informer runs in its own daemon thread;
it hands batches (all the lines of one read chunk, or a whole listing) to the event loop through a
bounded :class:`Handoff`, so a slow projection slows the watch down instead of growing memory.

The resume logic is a small state machine (:class:`WatchDriver`, lightkube's WatchDriver): it keeps the
last resourceVersion seen and builds the next request from it; a ``410 Gone`` (HTTP or an ``ERROR``
line) clears it, and the next request is a list, never a silent restart. The projection compares a
listing with what it holds and publishes synthetic DELETED events for objects that vanished.

Drift check: every ``check_interval`` seconds (jittered, so the scopes do not list at once) an informer
lists its scope again between two watch requests (the watch before it is asked to end by then) and hands
the list over as a :class:`Check`, then watches on from where the watch stood. The projection compares
the check with what it holds and repairs what a lost event left wrong (``projection``).

Invariants:
- Lines are decoded with msgspec in the informer thread; objects are sanitized there
  (``resources.sanitize``), so Secret content never even reaches the event loop.
- An object too deep or too large to decode safely (``schema.bounds``; a CRD keeps arbitrary JSON in
  pod templates) is not projected: a Warning Event on it says why, the informer goes on, and a listing
  does not count it as deleted. Its deletion is still projected (from its readable, shallow part).
- Errors other than 410 reconnect with backoff from the same resourceVersion.
- ``stop()`` interrupts a blocking read by shutting the socket down; the thread exits promptly.

Not here: what a change means (``projection``); where resume points are stored (``resume``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

import msgspec
import urllib3

from schema.bounds import MAX_NESTING, TooComplex, check_bounds, truncate_nesting
from schema.messages import EmitEvent, ObjectRef, WatchEventType
from services.edge import pipeline_metrics
from services.edge.calls import ApiError
from services.edge.events import event_call
from services.edge.kubeapi import KubeApi
from services.edge.resources import ResourceType, sanitize
from services.runtime.backoff import Backoff
from services.runtime.errors import PermanentError

log = logging.getLogger(__name__)

WATCH_TIMEOUT: Final = 290
"""``timeoutSeconds`` of one watch request; the server ends it and the informer resumes from its rv."""
READ_TIMEOUT: Final = 330.0
"""Seconds without a byte before a watch connection is considered dead (bookmarks keep it alive)."""
CONNECT_TIMEOUT: Final = 10.0
LIST_PAGE: Final = 500
"""Objects per list page (``limit``); pages keep the API server's and our memory bounded."""
REFUSED_REASON: Final = "ObjectNotDecodable"
"""Reason of the Warning Event on an object the informer does not project."""
RECONNECT_BACKOFF: Final = Backoff(base=0.1, cap=10.0)
"""Pauses before reconnecting after consecutive errors (also the watcher's discovery retries)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """A resource in a namespace ("" = cluster-wide): the unit of one informer and one resume point."""

    resource: ResourceType
    namespace: str = ""

    @property
    def name(self) -> str:
        """``rayclusters.ray.io`` or ``rayclusters.ray.io/<ns>``: the resume-point name."""
        return f"{self.resource.name}/{self.namespace}" if self.namespace else self.resource.name


@dataclass(frozen=True, slots=True)
class Change:
    """One object as the informer saw it (already sanitized), with its JSON bytes."""

    type: WatchEventType
    obj: dict[str, Any]
    raw: bytes
    uid: str
    resource_version: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Refused:
    """An object the informer does not project, why, and what of it could be read (deep parts cut off)."""

    change: Change
    reason: str


@dataclass(frozen=True, slots=True)
class Listing:
    """A complete list of the scope at ``resource_version`` (after a start without resume point or a 410).

    ``refused`` are the uids of listed objects that were not decoded (:class:`Refused`): they still exist.
    """

    objects: tuple[Change, ...]
    resource_version: str
    refused: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Check:
    """A complete list of the scope at ``listed_at``, taken while the watch stood at ``resource_version``.

    The watch goes on from ``resource_version``: what changed between the two still arrives as events, so
    only what the watch should already have shown may differ from the projection (``projection``).
    ``refused`` as in :class:`Listing`.
    """

    objects: tuple[Change, ...]
    listed_at: str
    resource_version: str
    refused: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Bookmark:
    """The watch reached ``resource_version`` with nothing to report."""

    resource_version: str


Item = Change | Listing | Check | Bookmark


@dataclass(frozen=True, slots=True)
class Batch:
    """What one informer hands to the projection at once, and when it was received (monotonic seconds)."""

    scope: Scope
    items: tuple[Item, ...]
    received: float = field(default_factory=time.monotonic)


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""


class _ObjectHead(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _Line(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    # "continue" is a Python keyword: renamed on the wire.
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


_line_decoder: Final[msgspec.json.Decoder[_Line]] = msgspec.json.Decoder(_Line)
_list_decoder: Final[msgspec.json.Decoder[_List]] = msgspec.json.Decoder(_List)
_object_decoder: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])
_head_decoder: Final[msgspec.json.Decoder[_ObjectHead]] = msgspec.json.Decoder(_ObjectHead)
_encoder: Final = msgspec.json.Encoder()


class Gone(Exception):
    """The resourceVersion is too old (410): relist."""


_CUT: Final = rb'"\u0000raybus: nested too deeply"'
"""What :func:`truncate_nesting` puts in place of a listed object's too-deep parts, to find it again."""
_LIST_DEPTH: Final = 2
"""Levels a list page adds above its items (the page object, its ``items`` array)."""


def make_change(resource: ResourceType, type_: WatchEventType, raw: bytes) -> Change:
    """Decode and sanitize one object; fill apiVersion/kind when the server left them out (list items).

    Raises:
        TooComplex: the object is too large or too deep to decode safely (see :func:`refusal`).
    """
    check_bounds(raw)
    return _change(resource, type_, _object_decoder.decode(raw), raw)


def refusal(resource: ResourceType, type_: WatchEventType, raw: bytes, reason: str) -> Refused:
    """A refused object: its shallow part (metadata, to say which object it is), and why."""
    obj = _object_decoder.decode(truncate_nesting(raw, MAX_NESTING))
    return Refused(_change(resource, type_, obj, b""), reason)


def _change(resource: ResourceType, type_: WatchEventType, obj: dict[str, Any], raw: bytes) -> Change:
    clean = sanitize(resource, obj)
    if "kind" not in clean or "apiVersion" not in clean:
        clean = {"apiVersion": resource.api_version, "kind": resource.kind, **clean}
    if clean is not obj:
        raw = _encoder.encode(clean)
    metadata = clean.get("metadata") or {}
    return Change(
        type=type_,
        obj=clean,
        raw=raw,
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
    )


def decode_page(resource: ResourceType, data: bytes) -> tuple[list[Change], str, str]:
    """One list answer: its objects (as ADDED changes), its resourceVersion and its continue token.

    Raises:
        TooComplex: an object is too large or too deep to decode safely.
    """
    page = _list_decoder.decode(data)
    objects = [make_change(resource, "ADDED", bytes(item)) for item in page.items]
    return objects, page.metadata.resourceVersion, page.metadata.continue_


def decode_line(resource: ResourceType, line: bytes) -> Item | Refused:
    """One watch line as an item (a refused object's deletion is still a :class:`Change`).

    Raises:
        Gone: an ERROR line with code 410.
        ApiError: any other ERROR line.
        msgspec.DecodeError: not a watch line.
    """
    try:
        check_bounds(line, max_nesting=MAX_NESTING + 1)
    except TooComplex as exc:
        head = _line_decoder.decode(truncate_nesting(line, MAX_NESTING + 1))
        if head.type not in ("ADDED", "MODIFIED", "DELETED"):
            raise
        refused = refusal(resource, cast(WatchEventType, head.type), bytes(head.object), str(exc))
        return refused.change if head.type == "DELETED" else refused
    decoded = _line_decoder.decode(line)
    if decoded.type == "BOOKMARK":
        return Bookmark(resource_version=_head_decoder.decode(decoded.object).metadata.resourceVersion)
    if decoded.type == "ERROR":
        status = _object_decoder.decode(decoded.object)
        code = int(status.get("code") or 0)
        if code == 410:
            raise Gone(str(status.get("message") or "resourceVersion too old"))
        raise ApiError(code, str(status.get("reason") or ""), str(status.get("message") or ""))
    if decoded.type not in ("ADDED", "MODIFIED", "DELETED"):
        raise ApiError(0, "BadWatchLine", f"unknown watch event type {decoded.type!r}")
    type_ = cast(WatchEventType, decoded.type)  # checked above
    return make_change(resource, type_, bytes(decoded.object))


def split_lines(chunks: Iterator[bytes]) -> Iterator[list[bytes]]:
    """Group a byte stream into complete lines, one list per chunk that completed at least one line."""
    buffer = b""
    for chunk in chunks:
        if not chunk:
            continue
        buffer += chunk
        if b"\n" not in chunk:
            continue
        *lines, buffer = buffer.split(b"\n")
        complete = [line for line in lines if line.strip()]
        if complete:
            yield complete


class WatchDriver:
    """The resume state machine: which request comes next, given what was seen."""

    def __init__(self, scope: Scope, resource_version: str | None) -> None:
        self.scope = scope
        self.resource_version = resource_version or None

    @property
    def needs_list(self) -> bool:
        """No usable resourceVersion: the next request is a list."""
        return self.resource_version is None

    def listed(self, resource_version: str) -> None:
        """A listing completed at ``resource_version``."""
        self.resource_version = resource_version

    def seen(self, resource_version: str) -> None:
        """An event or bookmark carried ``resource_version``."""
        if resource_version:
            self.resource_version = resource_version

    def gone(self) -> None:
        """410: the resourceVersion is too old; relist."""
        self.resource_version = None

    def list_query(self, continue_token: str) -> tuple[tuple[str, str], ...]:
        """Query of one list page."""
        query: list[tuple[str, str]] = [("limit", str(LIST_PAGE))]
        if self.scope.resource.label_selector:
            query.append(("labelSelector", self.scope.resource.label_selector))
        if continue_token:
            query.append(("continue", continue_token))
        return tuple(query)

    def watch_query(self, timeout_seconds: int = WATCH_TIMEOUT) -> tuple[tuple[str, str], ...]:
        """Query of the next watch request (from the current resourceVersion)."""
        assert self.resource_version is not None, "watch without a resourceVersion: list first"
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if self.scope.resource.label_selector:
            query.append(("labelSelector", self.scope.resource.label_selector))
        return tuple(query)


def check_delay(interval: float) -> float:
    """Seconds until a drift check: ``interval`` ±20 %, so the informers of one watcher (and the watchers of
    several clusters) spread their lists over time."""
    return interval * random.uniform(0.8, 1.2)


Deliver = Callable[[Batch], bool]
"""Hands a batch to the event loop; blocks while the queue is full; False once stopping."""


class Informer:
    """List+watch of one scope in a daemon thread."""

    def __init__(
        self,
        api: KubeApi,
        scope: Scope,
        *,
        resource_version: str | None,
        deliver: Deliver,
        watch_timeout: int = WATCH_TIMEOUT,
        check_interval: float = 0.0,
    ) -> None:
        """``check_interval``: mean seconds between drift checks (0: none)."""
        self.scope = scope
        self._api = api
        self._driver = WatchDriver(scope, resource_version)
        self._deliver = deliver
        self._watch_timeout = watch_timeout
        self._check_interval = check_interval
        self._next_check = self._after_interval()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"informer-{scope.name}", daemon=True)
        self.relists = 0
        self.checks = 0
        """Drift checks handed to the projection."""
        self.failure: BaseException | None = None

    @property
    def synced(self) -> bool:
        """The first list completed, or the first resumed watch connected."""
        return self._synced.is_set()

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop and interrupt a blocking read."""
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # the socket may already be closed
                response.shutdown()

    def join(self, timeout: float) -> None:
        """Wait for the thread to exit."""
        self._thread.join(timeout)

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                if self._driver.needs_list:
                    if not self._list():
                        return  # stopping: the listing was not delivered, and a watch needs its resourceVersion
                elif self._check_due() and not self._check():
                    return
                self._watch()
                attempt = 0
            except Gone as exc:
                log.info("%s: %s; relisting", self.scope.name, exc)
                self._driver.gone()
            except ApiError as exc:
                if exc.status == 410:
                    log.info("%s: resourceVersion too old; relisting", self.scope.name)
                    self._driver.gone()
                    continue
                attempt += 1
                self._pause(exc, attempt)
            except (urllib3.exceptions.HTTPError, OSError, msgspec.DecodeError, ValueError) as exc:
                attempt += 1
                self._pause(exc, attempt)
            except BaseException as exc:  # a bug: record it so the service fails loudly
                self.failure = exc
                log.exception("informer %s crashed", self.scope.name)
                return

    def _pause(self, exc: BaseException, attempt: int) -> None:
        if self._stop.is_set():
            return
        delay = RECONNECT_BACKOFF.delay(attempt)
        log.warning("%s: watch failed (%s); reconnecting in %.1fs", self.scope.name, exc, delay)
        self._stop.wait(delay)

    def _refuse(self, refused: Refused) -> str:
        """Say on the object why it is not projected (a Warning Event; once per resourceVersion)."""
        change = refused.change
        log.warning("%s: not projecting %s/%s: %s", self.scope.name, change.namespace, change.name, refused.reason)
        if not change.namespace or not change.name:
            return change.uid
        event = EmitEvent(
            id=f"refused/{change.uid}/{change.resource_version}",
            regarding=ObjectRef(
                api_version=str(change.obj.get("apiVersion") or self.scope.resource.api_version),
                kind=self.scope.resource.kind,
                namespace=change.namespace,
                name=change.name,
                uid=change.uid,
            ),
            event_type="Warning",
            reason=REFUSED_REASON,
            message=f"raybus ignores this {self.scope.resource.kind} until it changes: {refused.reason}",
        )
        try:
            self._api.execute(event_call(event, now=datetime.now(UTC)))
        except ApiError as exc:
            if exc.status != 409:  # 409: this version's event exists already
                log.warning("%s: the event on %s was not recorded: %s", self.scope.name, change.name, exc)
        except (PermanentError, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("%s: the event on %s was not recorded: %s", self.scope.name, change.name, exc)
        return change.uid

    def _pages(self) -> tuple[list[Change], frozenset[str], str] | None:
        """List the scope page by page: its objects, the uids of those refused, the list's resourceVersion;
        None when stopped first."""
        resource = self.scope.resource
        path = resource.collection_path(self.scope.namespace)
        objects: list[Change] = []
        refused: list[str] = []
        continue_token = ""
        resource_version = ""
        while True:
            try:
                data = self._api.request("GET", path, query=self._driver.list_query(continue_token)).data
            except ApiError as exc:
                if exc.status == 410 and continue_token:  # the continue token expired: start over
                    objects, refused, continue_token = [], [], ""
                    continue
                raise
            try:
                check_bounds(data, max_bytes=len(data), max_nesting=MAX_NESTING + _LIST_DEPTH)
            except TooComplex:
                data = truncate_nesting(data, MAX_NESTING + _LIST_DEPTH, marker=_CUT)
            page = _list_decoder.decode(data)
            for item in page.items:
                raw = bytes(item)
                try:
                    if _CUT in raw:
                        raise TooComplex(f"nested deeper than {MAX_NESTING} levels")
                    objects.append(make_change(resource, "ADDED", raw))
                except TooComplex as exc:
                    refused.append(self._refuse(refusal(resource, "ADDED", raw, str(exc))))
            resource_version = page.metadata.resourceVersion
            continue_token = page.metadata.continue_
            if not continue_token or self._stop.is_set():
                break
        if self._stop.is_set():
            return None
        return objects, frozenset(refused), resource_version

    def _list(self) -> bool:
        """List the scope and deliver the listing; False when stopped first or the listing was not taken."""
        listed = self._pages()
        if listed is None:
            return False
        objects, refused, resource_version = listed
        self.relists += 1
        pipeline_metrics.relisted(self.scope.resource.plural)
        if not self._deliver(Batch(self.scope, (Listing(tuple(objects), resource_version, refused),))):
            return False
        self._driver.listed(resource_version)
        self._next_check = self._after_interval()
        self._synced.set()
        return True

    def _after_interval(self) -> float:
        """When the next drift check is due (monotonic seconds; infinity without checks)."""
        if self._check_interval <= 0:
            return math.inf
        return time.monotonic() + check_delay(self._check_interval)

    def _check_due(self) -> bool:
        return time.monotonic() >= self._next_check

    def _check(self) -> bool:
        """List the scope and deliver it as a :class:`Check` at the watch's current resourceVersion; False
        when stopped first or the check was not taken. The watch then goes on from where it stood."""
        watched = self._driver.resource_version
        assert watched is not None, "a check needs the watch's resourceVersion"
        listed = self._pages()
        if listed is None:
            return False
        objects, refused, resource_version = listed
        self._next_check = self._after_interval()
        self.checks += 1
        return self._deliver(Batch(self.scope, (Check(tuple(objects), resource_version, watched, refused),)))

    def _watch(self) -> None:
        path = self.scope.resource.collection_path(self.scope.namespace)
        # The server ends the watch when the next check is due (timeoutSeconds): no read is cut short.
        until_check = self._next_check - time.monotonic()
        timeout = self._watch_timeout if until_check >= self._watch_timeout else max(1, math.ceil(until_check))
        response = self._api.open_stream(
            path,
            query=self._driver.watch_query(timeout),
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
        )
        with self._lock:
            if self._stop.is_set():  # stop() ran while the request was being opened
                response.close()
                return
            self._response = response
        self._synced.set()
        try:
            chunks = response.stream(amt=None, decode_content=False)
            for lines in split_lines(chunks):
                items: list[Item] = []
                try:
                    for line in lines:
                        item = decode_line(self.scope.resource, line)
                        if isinstance(item, Change | Refused):
                            change = item if isinstance(item, Change) else item.change
                            pipeline_metrics.watch_event(self.scope.resource.plural, change.type)
                        if isinstance(item, Refused):
                            self._refuse(item)
                        else:
                            items.append(item)
                finally:
                    if items and self._deliver(Batch(self.scope, tuple(items))):
                        for item in items:
                            if isinstance(item, Change | Bookmark):
                                self._driver.seen(item.resource_version)
                if self._stop.is_set():
                    return
        finally:
            with self._lock:
                self._response = None
            # Closed before it is released: a stream cut short (``stop`` shuts its socket down) is no
            # connection to reuse, and one released first would go back to the pool open, where nothing
            # closes it once the client has been closed meanwhile.
            with contextlib.suppress(Exception):
                response.close()
            with contextlib.suppress(Exception):
                response.release_conn()


class Handoff:
    """Batches from the informer threads to the event loop, at most ``size`` of them waiting.

    :meth:`deliver` (a :data:`Deliver`, called in an informer thread) blocks while ``size`` batches wait,
    so a slow projection slows the watches down instead of growing memory. One wake-up of the loop takes
    every batch handed over since the previous one: while the loop is busy, a burst of watch chunks costs
    it one wake-up, not a scheduled task and a cross-thread future per chunk.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, stopping: threading.Event) -> None:
        self._loop = loop
        self._stopping = stopping
        self._slots = threading.Semaphore(size)
        self._lock = threading.Lock()
        self._handed: list[Batch] = []
        """Batches handed over since the loop last woke for them (under ``_lock``)."""
        self._ready: asyncio.Queue[Batch] = asyncio.Queue()

    def deliver(self, batch: Batch) -> bool:
        """Hand ``batch`` over (in an informer thread); False once stopping or the loop is gone."""
        while not self._slots.acquire(timeout=0.2):
            if self._stopping.is_set():
                return False
        if self._stopping.is_set():
            self._slots.release()
            return False
        with self._lock:
            self._handed.append(batch)
            wake = len(self._handed) == 1
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._take)
            except RuntimeError:  # the loop is closed: nobody will take it
                return False
        return True

    def _take(self) -> None:
        with self._lock:
            handed, self._handed = self._handed, []
        for batch in handed:
            self._ready.put_nowait(batch)

    async def get(self) -> Batch:
        """The next batch, in the order each informer handed them over (on the loop)."""
        batch = await self._ready.get()
        self._slots.release()
        return batch


def scopes_for(resources: list[ResourceType], namespaces: tuple[str, ...]) -> list[Scope]:
    """One scope per resource (cluster-wide) or per resource and namespace (``--watch-namespace``)."""
    scopes: list[Scope] = []
    for resource in resources:
        if namespaces and resource.namespaced:
            scopes.extend(Scope(resource, namespace) for namespace in namespaces)
        else:
            scopes.append(Scope(resource))
    return scopes
