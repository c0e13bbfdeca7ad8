"""The HTTP face of the store: CRUD, list (with chunking and Table output), watch and DeleteOptions.

One aiohttp handler serves every resource URL (:mod:`kubesim.routing` decodes it). Errors leave as
``Status`` bodies. Watches stream ``application/json`` lines: initial ADDED events (no or ``0``
resourceVersion) or replayed history, then live events; an expired resourceVersion yields one ERROR
line carrying a 410 Status, as the real server does; BOOKMARKs go out every ``bookmark_interval``
when allowed; ``timeoutSeconds`` ends the stream.

The service/pod proxy is :mod:`kubesim.proxy`; discovery is :mod:`kubesim.discovery`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from kubesim import codec, tables
from kubesim.deletion import DeleteOptions
from kubesim.errors import ApiError, Cause, bad_request, invalid, method_not_allowed, page_not_found, too_large
from kubesim.resources import POD_KEY, ResourceInfo
from kubesim.routing import Target
from kubesim.selectors import combine, parse_field_selector, parse_label_selector
from kubesim.settings import KubeSimSettings
from kubesim.store import ObjectStore, present
from kubesim.watchhub import Watcher, event_line

Obj = dict[str, Any]

log = logging.getLogger(__name__)

_JSON = "application/json"
# Immediate deletions of these return the object; others return a Success Status (as kube-apiserver).
_DELETE_RETURNS_OBJECT = frozenset({("", "pods"), ("", "services"), ("", "namespaces")})


def json_response(body: object, status: int = 200) -> web.Response:
    """A JSON response."""
    return web.Response(body=codec.encode(body), status=status, content_type=_JSON)


def error_response(error: ApiError) -> web.Response:
    """The ``Status`` response of an error."""
    return json_response(error.status(), error.code)


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def _int_param(query: Any, name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise bad_request(f"invalid {name}: {value!r}") from exc


def _encode_continue(rv: int, namespace: str, name: str) -> str:
    raw = codec.encode({"rv": rv, "start": [namespace, name]})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        data = codec.decode(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ns, name = data["start"]
        return str(ns), str(name)
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"invalid continue token: {exc}") from exc


class ResourceApi:
    """Request handling for every resource endpoint."""

    def __init__(self, *, store: ObjectStore, settings: KubeSimSettings) -> None:
        self._store = store
        self._settings = settings
        self._open_watches: set[Watcher] = set()

    @property
    def open_watches(self) -> int:
        """How many watch streams are open."""
        return len(self._open_watches)

    def close_watches(self) -> None:
        """End every open watch stream (server shutdown)."""
        for watcher in self._open_watches:
            watcher.queue.put_nowait(b"")

    def resolve(self, target: Target) -> ResourceInfo:
        """The served resource a URL names.

        Raises:
            ApiError: 404 when the resource is not served.
        """
        info = self._store.registry.lookup(target.group, target.version, target.plural)
        if info is None or (target.namespace is not None and not info.namespaced):
            raise page_not_found()
        return info

    async def handle(self, request: web.Request, target: Target) -> web.StreamResponse:
        """Serve a (non-proxy) resource request."""
        if target.plural == "bindings" and target.group == "" and target.namespace is not None and target.name is None:
            return await self._bind(request, target.namespace, None)
        info = self.resolve(target)
        method = request.method
        if target.subresource == "binding" and info.storage_key == POD_KEY and target.name is not None:
            return await self._bind(request, target.namespace or "", target.name)
        if target.subresource is not None and (target.subresource != "status" or not info.status):
            raise page_not_found()
        watch = target.watch_prefix or _flag(request.query.get("watch"))
        namespace = target.namespace
        if info.namespaced is False:
            namespace = None
        if target.name is None:
            if method == "GET":
                if watch:
                    return await self._watch(request, info, namespace, None)
                return self._list(request, info, namespace)
            if method == "POST":
                body = await self.read_object(request)
                created = self._store.create_object(info, namespace, body)
                return json_response(present(info, created), 201)
            if method == "DELETE":
                return await self._delete_collection(request, info, namespace)
            raise method_not_allowed(method)
        name = target.name
        if method == "GET":
            if watch:
                return await self._watch(request, info, namespace, name)
            return self._get(request, info, namespace, name)
        if method == "PUT":
            body = await self.read_object(request)
            updated = self._store.update_object(
                info, namespace, name, body, subresource=target.subresource, require_rv=info.custom
            )
            return json_response(present(info, updated))
        if method == "PATCH":
            raw = await self._raw(request)
            patched, was_created = self._store.patch_object(
                info, namespace, name, request.headers.get("Content-Type", ""), raw, subresource=target.subresource
            )
            return json_response(present(info, patched), 201 if was_created else 200)
        if method == "DELETE" and target.subresource is None:
            return await self._delete(request, info, namespace, name)
        raise method_not_allowed(method)

    async def _bind(self, request: web.Request, namespace: str, pod: str | None) -> web.Response:
        """``POST namespaces/<ns>/bindings`` or ``POST .../pods/<name>/binding``: assign a Pod to a node."""
        if request.method != "POST":
            raise method_not_allowed(request.method)
        body = await self.read_object(request)
        return json_response(self._store.bind_pod(namespace, body, pod_name=pod), 201)

    # -- bodies --------------------------------------------------------------------------------

    async def _raw(self, request: web.Request) -> bytes:
        limit = self._settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large()
        raw = await request.read()
        if len(raw) > limit:
            raise too_large()
        return raw

    async def read_object(self, request: web.Request) -> Obj:
        """The request's body, a JSON object (400 otherwise, 413 when too large)."""
        raw = await self._raw(request)
        try:
            body = codec.decode(raw)
        except codec.DecodeError as exc:
            raise bad_request(f"the object provided is unrecognized or malformed JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise bad_request("the object provided must be a JSON object")
        return body

    # -- reads ---------------------------------------------------------------------------------

    def _get(self, request: web.Request, info: ResourceInfo, namespace: str | None, name: str) -> web.Response:
        obj = present(info, self._store.require(info, namespace or "", name))
        if tables.wants_table(request.headers.get("Accept", "")):
            return json_response(tables.to_table(info, [obj], resource_version=str(self._store.rv), now=time.time()))
        return json_response(obj)

    def _matcher(self, request: web.Request, info: ResourceInfo, name: str | None = None) -> Any:
        label = parse_label_selector(request.query.get("labelSelector"))
        field = parse_field_selector(request.query.get("fieldSelector"), info.storage_key, custom=info.custom)
        by_name = parse_field_selector(f"metadata.name={name}", info.storage_key) if name else None
        return combine(label, field, by_name)

    def _list(self, request: web.Request, info: ResourceInfo, namespace: str | None) -> web.Response:
        matcher = self._matcher(request, info)
        objs = self._store.select(info.storage_key, namespace, matcher)
        rv = self._store.rv
        limit = _int_param(request.query, "limit")
        token = request.query.get("continue")
        if token:
            start = _decode_continue(token)
            objs = [o for o in objs if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        list_meta: Obj = {"resourceVersion": str(rv)}
        if limit and limit > 0 and len(objs) > limit:
            remaining = len(objs) - limit
            objs = objs[:limit]
            last = objs[-1]["metadata"]
            list_meta["continue"] = _encode_continue(rv, last.get("namespace", ""), last["name"])
            # The real server counts what remains only when no selector filters the list.
            if matcher is None:
                list_meta["remainingItemCount"] = remaining
        items = [present(info, o) for o in objs]
        if tables.wants_table(request.headers.get("Accept", "")):
            table = tables.to_table(info, items, resource_version=str(rv), now=time.time())
            table["metadata"] = list_meta
            return json_response(table)
        return json_response(
            {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta, "items": items}
        )

    # -- watch ---------------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, info: ResourceInfo, namespace: str | None, name: str | None
    ) -> web.StreamResponse:
        store = self._store
        if (
            _flag(request.query.get("sendInitialEvents"))
            and request.query.get("resourceVersionMatch") != "NotOlderThan"
        ):
            message = "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            raise invalid(
                "ListOptions", "meta.k8s.io", "", [Cause("FieldValueForbidden", "resourceVersionMatch", message)]
            )
        render = self._table_renderer(info) if tables.wants_table(request.headers.get("Accept", "")) else None
        watcher = Watcher(info.storage_key, namespace, self._matcher(request, info, name), info.api_version, render)
        rv_param = request.query.get("resourceVersion") or "0"
        timeout = _int_param(request.query, "timeoutSeconds")
        bookmarks = _flag(request.query.get("allowWatchBookmarks"))
        expired: ApiError | None = None
        # Initial state and registration happen without an await in between, so no event is missed.
        if rv_param == "0":
            for obj in store.select(info.storage_key, namespace, watcher.matcher):
                body = render(obj) if render is not None else codec.encode(present(info, obj))
                watcher.queue.put_nowait(event_line("ADDED", body))
            if _flag(request.query.get("sendInitialEvents")) and bookmarks:
                # Watch-list clients (client-go's streaming lists) wait for this marker.
                watcher.queue.put_nowait(self._bookmark(info, initial_events_end=True))
        else:
            try:
                since = int(rv_param)
            except ValueError as exc:
                raise bad_request(f'invalid resource version "{rv_param}"') from exc
            try:
                for change in store.hub.changes_since(info.storage_key, since):
                    watcher.offer(change)
            except ApiError as exc:
                expired = exc
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json;stream=watch", "Cache-Control": "no-cache"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        if expired is not None:
            await response.write(event_line("ERROR", codec.encode(expired.status())))
            await response.write_eof()
            return response
        store.hub.add(watcher)
        self._open_watches.add(watcher)
        try:
            await self._pump(response, watcher, info, timeout=timeout, bookmarks=bookmarks)
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            store.hub.remove(watcher)
            self._open_watches.discard(watcher)
        return response

    async def _pump(
        self,
        response: web.StreamResponse,
        watcher: Watcher,
        info: ResourceInfo,
        *,
        timeout: int | None,
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout if timeout is not None and timeout > 0 else self._settings.watch_timeout)
        interval = self._settings.bookmark_interval
        next_bookmark = loop.time() + interval
        queue = watcher.queue
        while True:
            now = loop.time()
            if now >= deadline:
                break
            if bookmarks and now >= next_bookmark and queue.empty():
                await response.write(self._bookmark(info))
                next_bookmark = now + interval
                continue
            wait = min(deadline, next_bookmark) - now if bookmarks else deadline - now
            try:
                async with asyncio.timeout(wait):
                    line = await queue.get()
            except TimeoutError:
                continue
            chunks = [line]
            while not queue.empty():
                chunks.append(queue.get_nowait())
            if not all(chunks):
                await response.write(b"".join(c for c in chunks if c))
                break
            await response.write(b"".join(chunks))
        await response.write_eof()

    def _table_renderer(self, info: ResourceInfo) -> Callable[[Obj], bytes]:
        # Like the real server, only the first event of a Table watch carries the column definitions.
        first = True

        def render(obj: Obj) -> bytes:
            nonlocal first
            table = tables.to_table(info, [present(info, obj)], resource_version=str(self._store.rv), now=time.time())
            if not first:
                table["columnDefinitions"] = []
            first = False
            return codec.encode(table)

        return render

    def _bookmark(self, info: ResourceInfo, *, initial_events_end: bool = False) -> bytes:
        meta: Obj = {"resourceVersion": str(self._store.rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": info.kind, "apiVersion": info.api_version, "metadata": meta}
        return event_line("BOOKMARK", codec.encode(obj))

    # -- deletes -------------------------------------------------------------------------------

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        raw = await self._raw(request) if request.can_read_body else b""
        body: Obj = {}
        if raw.strip():
            try:
                decoded = codec.decode(raw)
            except codec.DecodeError as exc:
                raise bad_request(f"malformed DeleteOptions: {exc}") from exc
            if isinstance(decoded, dict):
                body = decoded
        query = request.query
        grace = _int_param(query, "gracePeriodSeconds")
        if grace is None and isinstance(body.get("gracePeriodSeconds"), int):
            grace = body["gracePeriodSeconds"]
        policy = query.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = query.get("orphanDependents")
        if policy is None and (_flag(orphan) or body.get("orphanDependents") is True):
            policy = "Orphan"
        if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
            raise bad_request(f'propagationPolicy: Unsupported value: "{policy}"')
        pre = body.get("preconditions") or {}
        return DeleteOptions(
            grace_period_seconds=grace,
            propagation_policy=policy,
            precondition_uid=pre.get("uid"),
            precondition_rv=pre.get("resourceVersion"),
        )

    async def _delete(self, request: web.Request, info: ResourceInfo, namespace: str | None, name: str) -> web.Response:
        options = await self._delete_options(request)
        obj, gone = self._store.deletion.delete_object(info, namespace or "", name, options)
        if gone and info.storage_key not in _DELETE_RETURNS_OBJECT:
            details: Obj = {"name": name, "kind": info.plural, "uid": obj["metadata"]["uid"]}
            if info.group:
                details["group"] = info.group
            return json_response(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
            )
        return json_response(present(info, obj))

    async def _delete_collection(self, request: web.Request, info: ResourceInfo, namespace: str | None) -> web.Response:
        options = await self._delete_options(request)
        objs = self._store.select(info.storage_key, namespace, self._matcher(request, info))
        self._store.deletion.delete_collection(info, namespace, objs, options)
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
