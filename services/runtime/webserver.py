"""HTTP/1.1 on asyncio's streams for what the services serve: every process's health and metrics endpoints
and the status service's read-only API and console.

All of it is GET (HEAD is answered too, without the body): a route table of paths with ``{placeholders}``
and a function from a :class:`Request` to a :class:`Reply`. Connections are kept alive for browsers and
scrapers; a request head larger than :data:`MAX_HEAD`, a body larger than :data:`MAX_BODY`, a chunked
body, or a caller that sends nothing for :data:`IDLE_TIMEOUT` seconds ends its connection. A web
framework (aiohttp) would hold about 10 MB in each process that serves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final
from urllib.parse import parse_qsl, unquote

from services.runtime.listen import start_cleanly

log = logging.getLogger(__name__)

TEXT: Final = "text/plain; charset=utf-8"
JSON: Final = "application/json; charset=utf-8"
MAX_HEAD: Final = 64 * 1024
"""Bytes a request line and its headers may take (a bearer token is a few KB)."""
MAX_BODY: Final = 64 * 1024
"""Bytes of a request body read and dropped: nothing served takes one."""
IDLE_TIMEOUT: Final = 75.0
"""Seconds a kept-alive connection may wait for its next request (and a caller for its request's head)."""
METHODS: Final = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Request:
    """One request: ``path`` percent-decoded, the first value of each query parameter, header names in
    lower case, and what the route's placeholders matched."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    match: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One answer: status, body and its content type, and any further headers."""

    status: int
    body: bytes = b""
    content_type: str = TEXT
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Reply]]


class Routes:
    """Paths to handlers; a ``{name}`` segment matches any one non-empty segment."""

    def __init__(self) -> None:
        self._exact: dict[str, Handler] = {}
        self._patterns: list[tuple[tuple[str, ...], Handler]] = []

    def add(self, path: str, handler: Handler) -> None:
        """Route ``path`` to ``handler``."""
        if "{" in path:
            self._patterns.append((tuple(path.split("/")), handler))
        else:
            self._exact[path] = handler

    def paths(self) -> list[str]:
        """Every routed path, placeholders as written."""
        return [*self._exact, *("/".join(pattern) for pattern, _ in self._patterns)]

    def find(self, request: Request) -> tuple[Handler, Request] | None:
        """The handler of ``request``'s path and the request with what its placeholders matched, or None."""
        exact = self._exact.get(request.path)
        if exact is not None:
            return exact, request
        segments = request.path.split("/")
        for pattern, handler in self._patterns:
            if len(pattern) == len(segments):
                matched = _match(pattern, segments)
                if matched is not None:
                    return handler, dataclasses.replace(request, match=matched)
        return None


def _match(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    matched: dict[str, str] = {}
    for expected, segment in zip(pattern, segments, strict=True):
        if expected.startswith("{") and expected.endswith("}"):
            if not segment:
                return None
            matched[expected[1:-1]] = unquote(segment)
        elif expected != segment:
            return None
    return matched


class WebServer:
    """Serves ``respond`` on ``host`` at each of ``ports`` (0 picks a free one) until stopped."""

    def __init__(self, respond: Handler, *, host: str, ports: Sequence[int]) -> None:
        self._respond = respond
        self._host = host
        self.ports = list(ports)
        """The ports asked for; after :meth:`start`, the bound ones."""
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Bind every port and serve; a failure or cancellation half-way closes what was bound."""
        self._servers = await start_cleanly(self._bind(self.ports), _close_servers)
        self.ports = [int(server.sockets[0].getsockname()[1]) for server in self._servers]

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        servers, self._servers = self._servers, []
        await _close_servers(servers)
        for writer in list(self._connections):
            writer.close()

    async def _bind(self, ports: Sequence[int]) -> list[asyncio.Server]:
        servers: list[asyncio.Server] = []
        try:
            for port in ports:
                servers.append(await asyncio.start_server(self._serve, self._host, port, limit=MAX_HEAD))
        except BaseException:
            await _close_servers(servers)
            raise
        return servers

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            keep = True
            while keep:
                async with asyncio.timeout(IDLE_TIMEOUT):
                    head = await reader.readuntil(b"\r\n\r\n")
                parsed = _parse(head)
                if isinstance(parsed, Reply):
                    reply, keep, head_only = parsed, False, False
                else:
                    request, keep = parsed
                    head_only = request.method == "HEAD"
                    refused = await _drop_body(reader, request)
                    if refused is not None:
                        keep = False
                    elif request.method not in METHODS:
                        refused = Reply(405, b"method not allowed", headers={"Allow": "GET, HEAD"})
                    reply = refused if refused is not None else await self._answer(request)
                writer.write(_encode(reply, keep=keep, head_only=head_only))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass  # a caller that went away, sent too much or too little, or nothing more: nothing to answer
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(self, request: Request) -> Reply:
        try:
            return await self._respond(request)
        except Exception:
            log.exception("serving %s %s failed", request.method, request.path)
            return Reply(500, b"internal server error")


def _parse(head: bytes) -> tuple[Request, bool] | Reply:
    """The request of ``head`` and whether its connection stays open after it, or the refusal of a head
    that is not HTTP/1.x."""
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    target, _, version = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not target.startswith("/"):
        return Reply(400, b"bad request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    raw_path, _, raw_query = target.partition("?")
    query: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        query.setdefault(name, value)  # the first of a repeated name wins
    return Request(method, unquote(raw_path), query, headers), keep


async def _drop_body(reader: asyncio.StreamReader, request: Request) -> Reply | None:
    """Read past a request's body; a refusal when it cannot be (the connection then closes)."""
    if "transfer-encoding" in request.headers:
        return Reply(400, b"a request body must have a Content-Length")
    length = request.headers.get("content-length", "0")
    if not length.isdigit():
        return Reply(400, b"bad Content-Length")
    if int(length) > MAX_BODY:
        return Reply(413, b"request body too large")
    await reader.readexactly(int(length))
    return None


def _encode(reply: Reply, *, keep: bool, head_only: bool) -> bytes:
    """The reply's bytes; a HEAD request's answer gives the body's length and leaves the body out."""
    try:
        phrase = HTTPStatus(reply.status).phrase
    except ValueError:  # a status without a registered phrase: the line stays valid without one
        phrase = ""
    lines = [
        f"HTTP/1.1 {reply.status} {phrase}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
        *(f"{name}: {value}" for name, value in reply.headers.items()),
    ]
    if not keep:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else reply.body)


async def _close_servers(servers: list[asyncio.Server]) -> None:
    for server in servers:
        server.close()
    for server in servers:
        await server.wait_closed()
