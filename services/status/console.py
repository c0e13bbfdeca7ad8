"""The web console: read-only pages served by the status service beside the history API, and the routes
only the console needs.

Pages: ``/console/`` (``/`` redirects there) serves ``web/index.html`` and its script and style, shipped in
the package: hand-written HTML, CSS and JavaScript drawing inline SVG, so the console works with no
internet access. The pages read the history API and these routes:

- ``/v1/console``: the console's settings (the trace link template, the number of partitions);
- ``/v1/bus``: partitions with their owner and lag, live workers, the latest dead letters with reasons;
- ``/v1/events/{kind}/{namespace}/{name}``: the Kubernetes Events raybus emitted for a key;
- ``/v1/replay/{kind}/{namespace}/{name}[?step=&uid=]``: the key's recorded decisions replayed by a
  reconciler (which has today's reconcile code) over the bus's request/reply.

Only reads: direct gets and consumer infos on NATS, never a consumer or a publish to a stream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec
import nats.errors
from nats.aio.client import Client

from schema import subjects
from schema.keys import ReconcileKey
from schema.replayview import ReplayRequest, ReplayView
from services.runtime.errors import RetryableError
from services.runtime.webserver import Reply, Request, Routes
from services.status.api import ApiError, json_response, not_found, parse_kind_param
from services.status.busview import BusOut, bus_view
from services.status.eventsview import EventsOut, key_events
from services.status.openapi import Param, Route

WEB_DIR: Final = Path(__file__).parent / "web"
PAGES: Final = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"}
"""The console's files and their content types (nothing else under ``/console/`` is served)."""
REPLAY_TIMEOUT: Final = 30.0
"""Seconds a reconciler has to replay a key for the console."""

_P_KEY = (
    Param("kind", "path", "RayJob, RayService, RayCluster or RayCronJob (any case, or plural)"),
    Param("namespace", "path", "namespace of the custom resource"),
    Param("name", "path", "name of the custom resource"),
)
_view: msgspec.json.Decoder[ReplayView] = msgspec.json.Decoder(ReplayView)


class ConsoleOut(msgspec.Struct, frozen=True, kw_only=True):
    """What the pages need to know about this deployment."""

    trace_url_template: str
    """Link of a trace id, ``{trace_id}`` replaced ("" = trace ids are not links)."""
    partitions: int


class Console:
    """The console's routes over one NATS connection."""

    def __init__(self, nc: Client, *, partitions: int, trace_url_template: str) -> None:
        self._nc = nc
        self._settings = ConsoleOut(trace_url_template=trace_url_template, partitions=partitions)

    def routes(self) -> tuple[Route, ...]:
        """The JSON routes (documented in the OpenAPI document with the history API's)."""
        return (
            Route("/v1/console", self._console, "getConsole", "The console's settings", ConsoleOut, (), ()),
            Route("/v1/bus", self._bus, "getBus", "Partitions, owners, lag and dead letters", BusOut, (), (503,)),
            Route(
                "/v1/events/{kind}/{namespace}/{name}",
                self._events,
                "getEvents",
                "The Kubernetes Events raybus emitted for a key, oldest first",
                EventsOut,
                _P_KEY,
                (404, 503),
            ),
            Route(
                "/v1/replay/{kind}/{namespace}/{name}",
                self._replay,
                "getReplay",
                "The key's recorded decisions replayed with today's reconcile (by a reconciler)",
                ReplayView,
                (
                    *_P_KEY,
                    Param("step", "query", "also this step in full", {"type": "integer", "minimum": 1}),
                    Param("uid", "query", "only this incarnation"),
                ),
                (400, 404, 503),
            ),
        )

    def add_pages(self, routes: Routes) -> None:
        """Route ``/`` and ``/console/...`` to the shipped pages."""
        routes.add("/", self._root)
        routes.add("/console/", self._page)
        routes.add("/console/{file}", self._page)

    async def _root(self, _: Request) -> Reply:
        return Reply(302, b"302: Found", headers={"Location": "/console/"})

    async def _page(self, request: Request) -> Reply:
        name = request.match.get("file") or "index.html"
        if name not in PAGES:
            raise not_found(request)
        return Reply(200, (WEB_DIR / name).read_bytes(), f"{PAGES[name]}; charset=utf-8")

    async def _console(self, _: Request) -> Reply:
        return json_response(self._settings)

    async def _bus(self, _: Request) -> Reply:
        try:
            return json_response(await bus_view(self._nc, partitions=self._settings.partitions))
        except RetryableError as exc:
            raise ApiError(503, "unavailable", str(exc)) from exc

    async def _events(self, request: Request) -> Reply:
        try:
            return json_response(await key_events(self._nc, _key(request)))
        except RetryableError as exc:
            raise ApiError(503, "unavailable", str(exc)) from exc

    async def _replay(self, request: Request) -> Reply:
        key = _key(request)
        step_text = request.query.get("step")
        if step_text is not None and not step_text.isdigit():
            raise ApiError(400, "bad_request", f"step={step_text!r}: not a positive integer")
        ask = ReplayRequest(
            kind=key.kind,
            namespace=key.namespace,
            name=key.name,
            step=int(step_text) if step_text else None,
            uid=request.query.get("uid"),
        )
        try:
            answer = await self._nc.request(subjects.REPLAY_SUBJECT, msgspec.json.encode(ask), timeout=REPLAY_TIMEOUT)
        except nats.errors.NoRespondersError:
            raise ApiError(503, "unavailable", "no reconciler is running to replay with today's code") from None
        except nats.errors.TimeoutError:
            raise ApiError(503, "unavailable", f"no reconciler answered within {REPLAY_TIMEOUT:g}s") from None
        view = _view.decode(answer.data)
        if view.error:
            raise ApiError(404 if not view.steps else 400, "replay", view.error)
        return json_response(view)


def _key(request: Request) -> ReconcileKey:
    info = parse_kind_param(request.match["kind"])
    return ReconcileKey(kind=info.kind, namespace=request.match["namespace"], name=request.match["name"])
