"""The read-only history API, used by ``raybus history`` and by people with ``curl``.

Routes (all GET, JSON; errors are ``ErrorOut`` with 400 / 404 / 503, and 401 / 403 when a guard reviews the
callers, see ``access``):

- ``/v1/resources?kind=&namespace=&status=&since=&limit=&after=``: resources (incarnations), alive or
  deleted; ``since`` keeps those updated at or after an RFC 3339 time;
- ``/v1/resources/{kind}/{namespace}/{name}[?uid=]``: the latest incarnation (by first_seen), or an older
  one by uid;
- ``/v1/resources/{kind}/{namespace}/{name}/transitions[?uid=&limit=&after=]``: that resource and a page of
  its timeline (by time, then storage order);
- ``/v1/commands?kind=&namespace=&name=&outcome=&limit=&after=``: the command audit trail;
- ``/v1/raycronjobs/{namespace}/{name}/runs[?uid=&limit=]``: a RayCronJob's latest scheduled runs (its
  ``schedule`` transitions), each joined with the RayJob it created: uid, statuses, and the path of that
  RayJob's own history;
- per kind, aliases with the kind fixed: ``/v1/rayjobs``, ``/v1/rayjobs/{namespace}/{name}``,
  ``/v1/rayjobs/{namespace}/{name}/transitions`` (and rayservices, rayclusters, raycronjobs), where
  ``status`` filters on the kind's status field (``kinds.KINDS``);
- ``/openapi.json``: the OpenAPI document generated from this very route table.

``{kind}`` accepts ``RayJob``, ``rayjob`` or ``rayjobs``. Pages hold up to ``limit`` items (default 100,
at most 1000); ``next_after`` is the cursor of the next page. Bad input (a time that is not RFC 3339, a
NUL character) is a 400 that says what is wrong, never a database error. ``/healthz`` and ``/readyz`` are not here:
the runtime's health server serves them on its own port.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, get_args

import msgspec

from schema.messages import Outcome
from schema.times import parse_time
from services.runtime.errors import RetryableError
from services.runtime.webserver import Handler, Reply, Request, Routes, WebServer
from services.status.kinds import KINDS, KindInfo, kind_info, parse_kind
from services.status.openapi import Param, Route, build_document
from services.status.responses import (
    CommandPage,
    ErrorOut,
    History,
    ResourceOut,
    ResourcePage,
    RunsOut,
    command_out,
    resource_out,
    run_out,
    transition_out,
)
from services.status.store import ResourceRecord, StatusStore

log = logging.getLogger(__name__)

API_VERSION: Final = "1"
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000

_KIND_NAMES = [info.kind for info in KINDS]
_RAYCRONJOB = kind_info("RayCronJob")
_OUTCOMES = list(get_args(Outcome))
_P_NAMESPACE = Param("namespace", "path", "namespace of the custom resource")
_P_NAME = Param("name", "path", "name of the custom resource")
_P_KIND = Param("kind", "path", "RayJob, RayService, RayCluster or RayCronJob (any case, or plural)")
_P_UID = Param("uid", "query", "a specific incarnation; default: the latest (by first seen)")
_Q_NAMESPACE = Param("namespace", "query", "only this namespace")
_Q_STATUS = Param("status", "query", "only resources whose status field has this value")
_Q_SINCE = Param(
    "since", "query", "only resources updated at or after (RFC 3339)", {"type": "string", "format": "date-time"}
)
_Q_LIMIT = Param(
    "limit", "query", "page size", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
)
_Q_AFTER = Param("after", "query", "cursor: next_after of the previous page", {"type": "integer", "minimum": 0})
_Q_AFTER_TRANSITION = Param(
    "after", "query", "cursor: next_after of the previous page (a transition id)", {"type": "integer", "minimum": 0}
)


class ApiError(Exception):
    """An answer other than 200, raised by a handler and rendered as ``ErrorOut``."""

    def __init__(self, status: int, error: str, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.headers = dict(headers or {})


Guard = Callable[[Request], Awaitable[None]]
"""Lets a request through, or raises the :class:`ApiError` that answers it (``access``)."""
JSON_TYPE: Final = "application/json"


def json_response(body: msgspec.Struct | dict[str, Any], *, status: int = 200) -> Reply:
    """``body`` encoded as a JSON answer."""
    return Reply(status, msgspec.json.encode(body), JSON_TYPE)


def not_found(request: Request) -> ApiError:
    """The 404 of a path nothing serves."""
    return ApiError(404, "not_found", f"Not Found: {request.path}")


def parse_kind_param(text: str) -> KindInfo:
    """The kind a path names.

    Raises:
        ApiError: 404, not a kind.
    """
    return _kind(text, status=404)


def _kind(text: str, *, status: int) -> KindInfo:
    info = parse_kind(text)
    if info is None:
        error = "not_found" if status == 404 else "bad_request"
        raise ApiError(status, error, f"unknown kind {text!r}; one of {', '.join(_KIND_NAMES)}")
    return info


def _int(query: Mapping[str, str], name: str, *, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name}={text!r}: not an integer") from None
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"{name}={value}: must be between {low} and {high}")
    return value


def _since(query: Mapping[str, str]) -> datetime | None:
    text = query.get("since")
    if text is None:
        return None
    # In UTC, as stored: a time near year 1 or 9999 whose offset leaves the calendar is refused here,
    # not by the database driver (as an unavailable database).
    value = parse_time(text)
    if value is None:
        raise ApiError(400, "bad_request", f"since={text!r}: not an RFC 3339 time (e.g. 2026-01-01T12:00:00Z)")
    return value


def _page_size(query: Mapping[str, str]) -> tuple[int, int]:
    limit = _int(query, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    return limit, _int(query, "after", default=0, low=0, high=2**63 - 1)


class StatusApi:
    """The route table and handlers over one store."""

    def __init__(
        self,
        store: StatusStore,
        *,
        extra_routes: Sequence[Route] = (),
        pages: Callable[[Routes], None] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self._store = store
        self._guard = guard
        self.routes: tuple[Route, ...] = (*self._route_table(), *extra_routes)
        self.document = build_document(self.routes, title="raybus status API", version=API_VERSION)
        self.served = Routes()
        """Every served path: :attr:`routes` and the pages, when given."""
        for route in self.routes:
            self.served.add(route.path, route.handler)
        if pages is not None:
            pages(self.served)

    async def respond(self, request: Request) -> Reply:
        """The answer to ``request``, let through ``guard`` first (when given); every failure is an
        ``ErrorOut``."""
        try:
            if "\x00" in request.path or any("\x00" in f"{k}{v}" for k, v in request.query.items()):
                # No database stores a NUL in text (PostgreSQL refuses it): bad input, not an outage.
                raise ApiError(400, "bad_request", "a NUL character in the path or the query")
            if self._guard is not None:
                await self._guard(request)
            found = self.served.find(request)
            if found is None:
                raise not_found(request)
            handler, routed = found
            return await handler(routed)
        except ApiError as exc:
            response = json_response(ErrorOut(error=exc.error, message=exc.message), status=exc.status)
            return dataclasses.replace(response, headers=exc.headers)
        except RetryableError as exc:
            log.warning("status API %s: %s", request.path, exc)
            unavailable = ErrorOut(error="unavailable", message="the status database is unavailable")
            return json_response(unavailable, status=503)

    def _route_table(self) -> tuple[Route, ...]:
        routes = [
            Route(
                "/v1/resources",
                self._list_resources(None),
                "listResources",
                "Custom resources (every incarnation), alive or deleted",
                ResourcePage,
                (
                    Param("kind", "query", "only this kind", {"enum": _KIND_NAMES}),
                    _Q_NAMESPACE,
                    _Q_STATUS,
                    _Q_SINCE,
                    _Q_LIMIT,
                    _Q_AFTER,
                ),
            ),
            Route(
                "/v1/resources/{kind}/{namespace}/{name}",
                self._get_resource(None),
                "getResource",
                "The latest incarnation of a custom resource, or the one with ?uid=",
                ResourceOut,
                (_P_KIND, _P_NAMESPACE, _P_NAME, _P_UID),
                (404,),
            ),
            Route(
                "/v1/resources/{kind}/{namespace}/{name}/transitions",
                self._get_history(None),
                "getResourceTransitions",
                "A custom resource and a page of its transitions, ordered by time",
                History,
                (_P_KIND, _P_NAMESPACE, _P_NAME, _P_UID, _Q_LIMIT, _Q_AFTER_TRANSITION),
                (400, 404),
            ),
            Route(
                "/v1/commands",
                self._list_commands,
                "listCommands",
                "The command audit trail, in storage order",
                CommandPage,
                (
                    Param("kind", "query", "reconcile key kind", {"enum": _KIND_NAMES}),
                    Param("namespace", "query", "reconcile key namespace"),
                    Param("name", "query", "reconcile key name"),
                    Param("outcome", "query", "only this outcome", {"enum": _OUTCOMES}),
                    _Q_LIMIT,
                    _Q_AFTER,
                ),
            ),
        ]
        for info in KINDS:
            base = f"/v1/{info.plural}"
            title = info.kind
            routes += [
                Route(
                    base,
                    self._list_resources(info),
                    f"list{title}s",
                    f"{title}s (alias of /v1/resources)",
                    ResourcePage,
                    (_Q_NAMESPACE, _Q_STATUS, _Q_SINCE, _Q_LIMIT, _Q_AFTER),
                ),
                Route(
                    f"{base}/{{namespace}}/{{name}}",
                    self._get_resource(info),
                    f"get{title}",
                    f"The latest {title} of that name, or the one with ?uid=",
                    ResourceOut,
                    (_P_NAMESPACE, _P_NAME, _P_UID),
                    (404,),
                ),
                Route(
                    f"{base}/{{namespace}}/{{name}}/transitions",
                    self._get_history(info),
                    f"get{title}Transitions",
                    f"A {title} and a page of its transitions",
                    History,
                    (_P_NAMESPACE, _P_NAME, _P_UID, _Q_LIMIT, _Q_AFTER_TRANSITION),
                    (400, 404),
                ),
            ]
        routes.append(
            Route(
                "/v1/raycronjobs/{namespace}/{name}/runs",
                self._get_runs,
                "getRayCronJobRuns",
                "A RayCronJob's scheduled runs, each linked to the history of the RayJob it created",
                RunsOut,
                (
                    _P_NAMESPACE,
                    _P_NAME,
                    _P_UID,
                    Param(
                        "limit",
                        "query",
                        "how many of the latest runs",
                        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                    ),
                ),
                (400, 404),
            )
        )
        routes.append(Route("/openapi.json", self._openapi, "getOpenApi", "This document", None, (), ()))
        return tuple(routes)

    # --- handlers ----------------------------------------------------------------------------------

    def _list_resources(self, fixed: KindInfo | None) -> Handler:
        async def handler(request: Request) -> Reply:
            query = request.query
            kind = fixed
            if kind is None and "kind" in query:
                kind = _kind(query["kind"], status=400)
            limit, after = _page_size(query)
            records = await self._store.list_resources(
                kind=kind.kind if kind else None,
                namespace=query.get("namespace"),
                status=query.get("status"),
                since=_since(query),
                limit=limit,
                after=after,
            )
            next_after = records[-1].resource.id if len(records) == limit else None
            return json_response(ResourcePage(items=[resource_out(r) for r in records], next_after=next_after))

        return handler

    async def _find(self, request: Request, fixed: KindInfo | None) -> ResourceRecord:
        info = fixed or _kind(request.match["kind"], status=404)
        namespace, name = request.match["namespace"], request.match["name"]
        uid = request.query.get("uid")
        record = await self._store.find_resource(kind=info.kind, namespace=namespace, name=name, uid=uid)
        if record is None:
            which = f" with uid {uid}" if uid else ""
            raise ApiError(404, "not_found", f"no {info.kind} {namespace}/{name}{which} in the history")
        return record

    def _get_resource(self, fixed: KindInfo | None) -> Handler:
        async def handler(request: Request) -> Reply:
            return json_response(resource_out(await self._find(request, fixed)))

        return handler

    def _get_history(self, fixed: KindInfo | None) -> Handler:
        async def handler(request: Request) -> Reply:
            record = await self._find(request, fixed)
            limit, after = _page_size(request.query)
            rows = await self._store.list_transitions(record.resource.uid, limit=limit, after=after)
            next_after = rows[-1].id if len(rows) == limit else None
            return json_response(
                History(
                    resource=resource_out(record), transitions=[transition_out(t) for t in rows], next_after=next_after
                )
            )

        return handler

    async def _get_runs(self, request: Request) -> Reply:
        record = await self._find(request, _RAYCRONJOB)
        limit = _int(request.query, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        runs, total = await self._store.list_runs(record.resource, limit=limit)
        return json_response(RunsOut(resource=resource_out(record), runs=[run_out(r) for r in runs], total=total))

    async def _list_commands(self, request: Request) -> Reply:
        query = request.query
        kind = _kind(query["kind"], status=400).kind if "kind" in query else None
        outcome = query.get("outcome")
        if outcome is not None and outcome not in _OUTCOMES:
            raise ApiError(400, "bad_request", f"outcome={outcome!r}: one of {', '.join(_OUTCOMES)}")
        limit, after = _page_size(query)
        rows = await self._store.list_commands(
            kind=kind,
            namespace=query.get("namespace"),
            name=query.get("name"),
            outcome=outcome,
            limit=limit,
            after=after,
        )
        next_after = rows[-1].id if len(rows) == limit else None
        return json_response(CommandPage(items=[command_out(r) for r in rows], next_after=next_after))

    async def _openapi(self, _: Request) -> Reply:
        return json_response(self.document)


class ApiServer:
    """Serves a :class:`StatusApi` on ``host:port`` (port 0 picks a free one) until stopped."""

    def __init__(self, api: StatusApi, *, host: str, port: int) -> None:
        self._server = WebServer(api.respond, host=host, ports=[port])
        self._host = host
        self.port = port

    @property
    def url(self) -> str:
        """Base URL of the API."""
        return f"http://{self._host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve."""
        await self._server.start()
        (self.port,) = self._server.ports

    async def stop(self) -> None:
        """Stop serving."""
        await self._server.stop()
