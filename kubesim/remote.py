"""The :class:`kubesim.hooks.Store` protocol over HTTP: kubesim's simulators attached to any API server.

:class:`RemoteStore` gives the simulators (kubelet, Job controller, EndpointSlices, Gateways, Ray heads)
the store they run on in process, backed by a Kubernetes API server (kubesim's own over HTTP, or a real
kube-apiserver) through :class:`kubesim.apiclient.ApiConnection`:

- Reads (``get``, ``view``, ``list``) answer from a cache per resource, kept by an informer: one LIST,
  then a WATCH from its resourceVersion (bookmarks keep it current), resumed from the last version seen
  when the server ends it, and re-listed after a ``410 Gone``. The first read of a resource lists it
  (blocking); a resource the server does not serve is a 404 ``ApiError`` (checked again every
  :data:`ABSENT_RETRY` seconds).
- Writes (``create``, ``update`` with or without ``subresource="status"``, ``delete`` with grace period
  and propagation policy) are blocking requests: the protocol is synchronous, as the simulators expect a
  write's result (a generated name, a 409) at once. What a write returns goes into the cache at once
  (when newer than what it holds), so the simulator's next read sees its own write. A status update that
  meets a 409 Conflict is sent again on the latest resourceVersion: the simulators own the status they
  write (the kubelet a Pod's, the Job controller a Job's), as in process where their reads are never
  stale; Pod and Job status goes without a resourceVersion at all (:data:`UNCONDITIONAL_STATUS_GROUPS`).
  Any other 409 refreshes the cached object and is raised.
- ``subscribe`` registers at call time and delivers every event of the watched resources in the order the
  server sent them: nothing is dropped, the queue is unbounded. After a 410 the re-list is compared with
  the cache and the differences are delivered as ADDED, MODIFIED and DELETED events. Order holds per
  resource; events of different resources arrive in the order their watches deliver them.

Everything runs on one event loop, the simulators' own; each write of the synchronous protocol holds that
loop for one round trip. ``acreate`` and ``aupdate`` do not (their request runs in a worker thread, the
cache is updated on the loop): the kubelet writes through them (``kubesim.sims.objects.create_in``), so
the bindings and status writes of many Pods are in flight at once instead of one after another.
Errors are ``kubesim.errors.ApiError`` with the HTTP code (0 when the server did not answer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from kubesim import codec
from kubesim.apiclient import ApiConnection
from kubesim.errors import ApiError
from kubesim.hooks import GVR, EventType, StoreEvent
from kubesim.selectors import parse_label_selector

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""

ABSENT_RETRY: Final = 5.0
"""Seconds before a resource the server did not serve is asked for again."""
RETRY_MIN: Final = 0.2
RETRY_MAX: Final = 5.0
"""Backoff bounds (seconds) between failed watch attempts."""
UNCONDITIONAL_STATUS_GROUPS: Final = frozenset({"", "batch"})
"""API groups whose status updates go without a resourceVersion: these built-in kinds allow unconditional
updates, and the simulators own what they write there (a real kubelet patches Pod status without one too).
It spares the conflict a cache one event behind would meet, e.g. right after a Pod's binding."""
CONFLICT_RETRIES: Final = 5
"""How many times a status update is sent again after a 409 Conflict."""


def is_newer(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is later than ``current``.

    Resource versions are opaque to clients, but every API server in use numbers them with one growing
    integer (etcd's revision, kubesim's counter); this is the comparison client-go's mutation cache makes.
    Versions that are not integers count as newer whenever they differ.
    """
    try:
        return int(candidate) > int(current)
    except ValueError:
        return candidate != current


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def _key(obj: Mapping[str, Any]) -> Key:
    meta = _meta(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("resourceVersion") or "")


def resource_path(
    gvr: GVR, namespace: str | None = None, name: str | None = None, subresource: str | None = None
) -> str:
    """The API path of a resource, one namespace of it, one object or one object's subresource."""
    path = f"/api/{gvr.version}" if not gvr.group else f"/apis/{gvr.group}/{gvr.version}"
    if namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{gvr.plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    if subresource:
        path += f"/{subresource}"
    return path


@dataclass(frozen=True)
class ServedResource:
    """What discovery says of a resource."""

    kind: str


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _Subscription:
    """One ``subscribe`` call's event stream."""

    def __init__(self, store: RemoteStore) -> None:
        self._store = store
        self._queue: asyncio.Queue[StoreEvent | None] = asyncio.Queue()

    def offer(self, event: StoreEvent) -> None:
        self._queue.put_nowait(event)

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> StoreEvent:
        event = await self._queue.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Stop receiving events."""
        self._store.unsubscribe(self)
        self._queue.put_nowait(None)


class _Informer:
    """The cache of one resource (all namespaces) and the watch that keeps it."""

    def __init__(self, store: RemoteStore, gvr: GVR) -> None:
        self.store = store
        self.gvr = gvr
        self.path = resource_path(gvr)
        self.objects: dict[Key, Obj] = {}
        """The read cache: the latest version seen, from an event, a list or a write's answer."""
        self.known: dict[Key, Obj] = {}
        """What the subscribers were last told of each object (from events and lists only)."""
        self.rv = ""
        self.listed = False
        """True once a list succeeded: reads answer from the cache from then on (also while the watch
        re-lists after a 410, when the cache is as of the last event)."""
        self.need_list = True
        """The watch must list before it resumes (first start, 410 Gone, resource not served)."""
        self.absent_until = 0.0
        self.subscribers: set[_Subscription] = set()
        self.task: asyncio.Task[None] | None = None

    # -- cache -----------------------------------------------------------------------------------

    def sync(self) -> None:
        """List the resource (blocking) unless the cache holds it, and keep it current from then on.

        Raises:
            ApiError: the list failed (404: the resource is not served).
        """
        if not self.listed:
            if time.monotonic() < self.absent_until:
                raise _not_served(self.gvr)
            try:
                listing = self.store.connection.request("GET", self.path)
            except ApiError as exc:
                if exc.code == 404:
                    self.absent_until = time.monotonic() + ABSENT_RETRY
                raise
            # A running watch (waiting for the resource to be served) has subscribers who listed nothing.
            self._merge(listing, publish=self.task is not None)
        self.start()

    def start(self) -> None:
        """Run the watch (needs the running event loop)."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(), name=f"kubesim-remote:{self.gvr.plural}")

    def put(self, obj: Obj) -> None:
        """Take a write's answer into the read cache unless it holds a later version already."""
        if not self.listed or not isinstance(obj.get("metadata"), dict) or obj.get("kind") == "Status":
            return
        key = _key(obj)
        current = self.objects.get(key)
        if current is None or not is_newer(_rv(current), _rv(obj)):
            self.objects[key] = obj

    def _apply(self, type_: EventType, obj: Obj) -> None:
        key = _key(obj)
        if type_ == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = obj
        current = self.objects.get(key)
        # The read cache may hold a later write's answer already: it stays.
        if current is None or not is_newer(_rv(current), _rv(obj)):
            if type_ == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
        self._publish(type_, obj)

    def _publish(self, type_: EventType, obj: Obj) -> None:
        event = StoreEvent(type_, self.gvr, obj)
        for subscriber in (*self.subscribers, *self.store.everything):
            subscriber.offer(event)

    def _merge(self, listing: Any, *, publish: bool) -> None:
        """Take a list answer. With ``publish``, what changed since the last event delivered (a gap after a
        410, or everything for a resource that was not served) goes to the subscribers as events; the read
        cache becomes the list but keeps any later version a write left in it."""
        body = listing if isinstance(listing, dict) else {}
        items = body.get("items")
        list_rv = str(_meta(body).get("resourceVersion") or "")
        kind = str(body.get("kind", "")).removesuffix("List")
        api_version = str(body.get("apiVersion", ""))
        listed: dict[Key, Obj] = {}
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                # List items carry no kind or apiVersion; watch events and single reads do.
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", api_version)
                listed[_key(item)] = item
        if publish:
            for key, item in listed.items():
                known = self.known.get(key)
                if known is None:
                    self._publish("ADDED", item)
                elif _rv(known) != _rv(item):
                    self._publish("MODIFIED", item)
            for key, known in self.known.items():
                if key not in listed:
                    self._publish("DELETED", known)
        self.known = dict(listed)
        for key in [k for k in self.objects if k not in listed]:
            if not (list_rv and is_newer(_rv(self.objects[key]), list_rv)):
                del self.objects[key]  # else written after the list was taken
        for key, item in listed.items():
            current = self.objects.get(key)
            if current is None or not is_newer(_rv(current), _rv(item)):
                self.objects[key] = item
        if not self.rv or self.need_list or is_newer(list_rv, self.rv):
            self.rv = list_rv
        self.listed = True
        self.need_list = False

    # -- watch -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = RETRY_MIN
        while True:
            try:
                if self.need_list:
                    self._merge(await self.store.connection.arequest("GET", self.path), publish=True)
                async for line in self.store.connection.watch(self.path, resource_version=self.rv):
                    self._on_line(line)
                    delay = RETRY_MIN
            except _Gone:
                self.need_list = True
            except ApiError as exc:
                if exc.code == 410:
                    self.need_list = True
                    continue
                if exc.code == 404:
                    self.need_list = True
                    await asyncio.sleep(ABSENT_RETRY)
                    continue
                log.warning("kubesim remote: watch of %s failed, retrying: %s", self.gvr.plural, exc.message)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    def _on_line(self, line: Any) -> None:
        if not isinstance(line, dict) or not isinstance(line.get("object"), dict):
            raise ApiError(0, "ConnectionError", f"malformed watch event on {self.path}")
        type_, obj = line.get("type"), line["object"]
        if type_ == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone
            reason, message = str(obj.get("reason", "")), str(obj.get("message", ""))
            raise ApiError(int(code) if isinstance(code, int) else 0, reason, message)
        rv = _rv(obj)
        if rv and self.rv and not is_newer(rv, self.rv):
            return  # already taken in by a list made meanwhile
        if rv:
            self.rv = rv
        if type_ == "BOOKMARK":
            return
        if type_ in ("ADDED", "MODIFIED", "DELETED"):
            self._apply(type_, obj)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None


def _not_served(gvr: GVR) -> ApiError:
    resource = f"{gvr.plural}.{gvr.group}" if gvr.group else gvr.plural
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({resource})")


class _Put:
    """One update's request, and how a 409 Conflict changes it: a status update the simulators own goes
    again on the latest resourceVersion; any other conflict is raised."""

    def __init__(self, gvr: GVR, obj: Obj, subresource: str | None, body: Obj) -> None:
        namespace, name = _key(obj)
        self.path = resource_path(gvr, namespace or None, name, subresource)
        self.object_path = resource_path(gvr, namespace or None, name)
        self.status = subresource == "status"
        if self.status and gvr.group in UNCONDITIONAL_STATUS_GROUPS and _rv(body):
            body = {**body, "metadata": {k: v for k, v in _meta(body).items() if k != "resourceVersion"}}
        self.body = body

    def retry_on(self, latest: Any, conflict: ApiError, *, last: bool) -> None:
        """After a 409 and a read of the ``latest`` object: set the body to retry with, or raise."""
        if not self.status or last or not _rv(self.body):
            raise conflict
        self.body = {**self.body, "metadata": {**_meta(self.body), "resourceVersion": _rv(latest)}}


class RemoteStore:
    """A ``kubesim.hooks.Store`` on an API server reached over HTTP (use it on one event loop)."""

    def __init__(self, connection: ApiConnection) -> None:
        self.connection = connection
        self._informers: dict[GVR, _Informer] = {}
        self.everything: set[_Subscription] = set()
        """Subscribers to every resource (``subscribe()`` without resources)."""
        self._discovery: dict[tuple[str, str], tuple[float, dict[str, ServedResource]]] = {}

    async def close(self) -> None:
        """Stop every watch, end the subscriptions and close the connection."""
        for informer in self._informers.values():
            await informer.stop()
        for subscriber in {s for i in self._informers.values() for s in i.subscribers} | self.everything:
            await subscriber.aclose()
        await self.connection.close()

    # -- discovery -------------------------------------------------------------------------------

    def served(self, gvr: GVR) -> ServedResource | None:
        """What the server's discovery says of ``gvr`` (None when it is not served); asked again after
        :data:`ABSENT_RETRY` seconds for a resource that was missing."""
        group_version = (gvr.group, gvr.version)
        cached = self._discovery.get(group_version)
        now = time.monotonic()
        if cached is None or (gvr.plural not in cached[1] and now - cached[0] > ABSENT_RETRY):
            path = f"/api/{gvr.version}" if not gvr.group else f"/apis/{gvr.group}/{gvr.version}"
            try:
                doc = self.connection.request("GET", path)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                doc = {}
            resources = {
                str(entry["name"]): ServedResource(str(entry.get("kind", "")))
                for entry in (doc or {}).get("resources") or []
                if isinstance(entry, dict) and "/" not in str(entry.get("name", "/"))
            }
            cached = (now, resources)
            self._discovery[group_version] = cached
        return cached[1].get(gvr.plural)

    def _typed(self, gvr: GVR, obj: Obj) -> Obj:
        """``obj`` with its apiVersion and kind (the simulators may leave them out, as the core fills them)."""
        if obj.get("kind") and obj.get("apiVersion"):
            return obj
        served = self.served(gvr)
        if served is None:
            raise _not_served(gvr)
        api_version = f"{gvr.group}/{gvr.version}" if gvr.group else gvr.version
        return {**obj, "apiVersion": api_version, "kind": served.kind}

    # -- reads -----------------------------------------------------------------------------------

    def _informer(self, gvr: GVR) -> _Informer:
        informer = self._informers.get(gvr)
        if informer is None:
            informer = self._informers[gvr] = _Informer(self, gvr)
        return informer

    def _synced(self, gvr: GVR) -> _Informer:
        informer = self._informer(gvr)
        informer.sync()
        return informer

    def get(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        """A copy of the cached object, or None."""
        obj = self._synced(gvr).objects.get((namespace or "", name))
        return None if obj is None else codec.clone(obj)

    def view(self, gvr: GVR, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The cached object itself (never changed in place: a newer version replaces it), or None."""
        return self._synced(gvr).objects.get((namespace or "", name))

    def list(self, gvr: GVR, namespace: str | None = None, label_selector: str | None = None) -> list[Obj]:
        """Copies of the cached objects that match, sorted by namespace and name."""
        matcher = parse_label_selector(label_selector)
        informer = self._synced(gvr)
        out = []
        for key in sorted(informer.objects):
            if namespace is not None and key[0] != namespace:
                continue
            obj = informer.objects[key]
            if matcher is None or matcher(obj):
                out.append(codec.clone(obj))
        return out

    # -- writes ----------------------------------------------------------------------------------

    def _took(self, gvr: GVR, answer: Any) -> None:
        informer = self._informers.get(gvr)
        if informer is not None and isinstance(answer, dict):
            informer.put(answer)

    def create(self, gvr: GVR, obj: Obj) -> Obj:
        """Create ``obj`` (in ``metadata.namespace`` when it has one); returns what the server stored."""
        namespace = str(_meta(obj).get("namespace") or "") or None
        answer = self.connection.request("POST", resource_path(gvr, namespace), body=self._typed(gvr, obj))
        self._took(gvr, answer)
        return dict(answer) if isinstance(answer, dict) else {}

    async def acreate(self, gvr: GVR, obj: Obj) -> Obj:
        """:meth:`create` without holding the event loop: the request runs in a worker thread, so the writes
        of many simulated objects (a burst of Pods' bindings) are in flight at once."""
        namespace = str(_meta(obj).get("namespace") or "") or None
        body = self._typed(gvr, obj)
        answer = await asyncio.to_thread(self.connection.request, "POST", resource_path(gvr, namespace), body=body)
        self._took(gvr, answer)
        return dict(answer) if isinstance(answer, dict) else {}

    def update(self, gvr: GVR, obj: Obj, *, subresource: str | None = None) -> None:
        """Replace the object, or only its status with ``subresource="status"``.

        Raises:
            ApiError: as the server answered; a status update's 409 only after :data:`CONFLICT_RETRIES`.
        """
        put = _Put(gvr, obj, subresource, self._typed(gvr, obj))
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                answer = self.connection.request("PUT", put.path, body=put.body)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                latest = self.connection.request("GET", put.object_path)
                self._took(gvr, latest)
                put.retry_on(latest, exc, last=attempt == CONFLICT_RETRIES)
                continue
            self._took(gvr, answer)
            return

    async def aupdate(self, gvr: GVR, obj: Obj, *, subresource: str | None = None) -> None:
        """:meth:`update` without holding the event loop (see :meth:`acreate`).

        Raises:
            ApiError: as :meth:`update`.
        """
        put = _Put(gvr, obj, subresource, self._typed(gvr, obj))
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                answer = await asyncio.to_thread(self.connection.request, "PUT", put.path, body=put.body)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                latest = await asyncio.to_thread(self.connection.request, "GET", put.object_path)
                self._took(gvr, latest)
                put.retry_on(latest, exc, last=attempt == CONFLICT_RETRIES)
                continue
            self._took(gvr, answer)
            return

    def delete(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> None:
        """Delete as a client would; ``grace_period_seconds=0`` finishes a terminating Pod."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        self.connection.request("DELETE", resource_path(gvr, namespace, name), body=options)

    # -- events ----------------------------------------------------------------------------------

    def subscribe(self, resources: Collection[GVR] | None = None) -> AsyncIterator[StoreEvent]:
        """Every event of ``resources`` (of every resource read so far and later, when None) from now on.

        A resource the server does not serve yet is watched for: once it is, its objects arrive as ADDED.
        """
        wanted = frozenset(resources) if resources is not None else None
        subscription = _Subscription(self)
        if wanted is None:
            self.everything.add(subscription)
            return subscription
        for gvr in wanted:
            informer = self._informer(gvr)
            informer.subscribers.add(subscription)
            try:
                informer.sync()
            except ApiError as exc:
                if exc.code not in (0, 404):
                    raise
                informer.start()  # lists once the server serves (or answers) it
        return subscription

    def unsubscribe(self, subscription: _Subscription) -> None:
        """Forget a subscription (its ``aclose``)."""
        self.everything.discard(subscription)
        for informer in self._informers.values():
            informer.subscribers.discard(subscription)
