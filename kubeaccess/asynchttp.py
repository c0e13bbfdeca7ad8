"""An HTTP/1.1 client on asyncio's own streams, for the request-and-answer calls of the long-running
processes (the edge's API calls and dashboard calls, the status service's access reviews).

It does what those calls need and no more: one request, its whole answer read (``Content-Length``,
chunked, or up to the connection's end), kept-alive connections reused, TLS with a given context and
server name, a total timeout. No redirects, no proxies, no compression, no cookies: a general client
(aiohttp) holds about 10 MB in each process that imports it.

Errors: :class:`HttpError` for a request without an answer (the connection failed or broke, the server
broke the protocol); the builtin :class:`TimeoutError` when the timeout passed first. Neither names a
request header, so no credential reaches a message.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

KEEP_IDLE: Final = 30.0
"""Seconds an idle connection is kept for reuse; servers close theirs after a while (Go's after 90 s)."""
MAX_HEADERS: Final = 128
"""Header lines an answer may have before it is refused."""
MAX_BODY: Final = 64 * 1024 * 1024
"""Bytes an answer's body may have before it is refused: a single object of the API server is at most a few
MB (etcd's limit), so more is a broken or hostile server."""
_NO_BODY: Final = frozenset({204, 304})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_USER_AGENT: Final = "raybus"


class HttpError(Exception):
    """A request that got no answer: the message says what failed, never a header."""


@dataclass(frozen=True)
class Answer:
    """A server's answer: status, reason, headers (names in lower case) and the whole body."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return self.headers.get(name.lower())


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0
    reused: bool = False

    def usable(self, now: float) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing() or now - self.idle_since > KEEP_IDLE)

    def close(self) -> None:
        self.writer.close()


class _Stale(Exception):
    """A reused connection the server had closed before the request reached it: sent again on a new one."""


@dataclass
class _Target:
    scheme: str
    host: str
    port: int
    host_header: str
    path: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def _target(url: str) -> _Target:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HttpError(f"bad URL {url!r}: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise HttpError(f"bad URL {url!r}: only http and https URLs with a host are sent")
    host_header = parts.netloc.rpartition("@")[2]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme], host_header, path)


def _request_head(method: str, target: _Target, headers: Mapping[str, str], body: bytes | None) -> bytes:
    fields = {"Host": target.host_header, "User-Agent": _USER_AGENT, "Accept-Encoding": "identity", **headers}
    if body is not None or method in ("POST", "PUT", "PATCH"):
        fields["Content-Length"] = str(len(body or b""))
    if any("\r" in text or "\n" in text for text in (method, target.path, *fields, *fields.values())):
        raise HttpError(f"{method!r} {target.path!r}: a line break in the method, path or a header")
    lines = [f"{method} {target.path} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items())]
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise HttpError(f"{method} {target.path}: a header holds a character HTTP cannot carry") from None


@dataclass
class AsyncHttp:
    """A pool of kept-alive connections and the requests sent on them; at most ``limit`` at once.

    Attributes:
        context: TLS settings for ``https`` URLs (None: the system's defaults).
        server_hostname: the name to check the server's certificate against (None: the URL's host).
        limit: requests in flight at once, over all hosts; more wait for a free one.
        max_body: the largest answer body accepted (a larger one is an :class:`HttpError`).
        keep_alive: whether a connection is kept for the next request (else closed after its answer).
    """

    context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    limit: int = 16
    max_body: int = MAX_BODY
    keep_alive: bool = True
    _idle: dict[tuple[str, str, int], list[_Connection]] = field(default_factory=dict, init=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    @property
    def idle(self) -> int:
        """How many kept-alive connections wait for a request."""
        return sum(len(connections) for connections in self._idle.values())

    async def close(self) -> None:
        """Close the idle connections; a connection in use is closed when its request ends."""
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float,
    ) -> Answer:
        """Send one request and read its whole answer, within ``timeout`` seconds in all.

        Raises:
            HttpError: no answer (the URL, connection or protocol failed).
            TimeoutError: no whole answer within ``timeout``.
        """
        if self._closed:
            raise HttpError(f"{method} {url}: the client is closed")
        target = _target(url)
        head = _request_head(method, target, headers or {}, body)
        if self._slots is None:
            self._slots = asyncio.Semaphore(max(1, self.limit))
        message = head + (body or b"")
        async with asyncio.timeout(timeout), self._slots:
            kept = self._take(target)
            if kept is not None:
                try:
                    return await self._exchange(kept, target, method, message)
                except _Stale:
                    pass
            return await self._exchange(await self._connect(target, method), target, method, message)

    def _take(self, target: _Target) -> _Connection | None:
        idle = self._idle.get(target.key, [])
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            if connection.usable(now):
                connection.reused = True
                return connection
            connection.close()
        return None

    def _put(self, target: _Target, connection: _Connection) -> None:
        if self._closed or not self.keep_alive:
            connection.close()
            return
        connection.idle_since = asyncio.get_running_loop().time()
        idle = self._idle.setdefault(target.key, [])
        idle.append(connection)
        if len(idle) > self.limit:
            idle.pop(0).close()

    async def _connect(self, target: _Target, method: str) -> _Connection:
        tls: ssl.SSLContext | None = None
        if target.scheme == "https":
            tls = self.context or ssl.create_default_context()
        try:
            reader, writer = await asyncio.open_connection(
                target.host,
                target.port,
                ssl=tls,
                server_hostname=(self.server_hostname or target.host) if tls is not None else None,
            )
        except OSError as exc:
            raise HttpError(f"{method} {target.path}: cannot connect to {target.host_header}: {_reason(exc)}") from exc
        return _Connection(reader, writer)

    async def _exchange(self, connection: _Connection, target: _Target, method: str, message: bytes) -> Answer:
        """Send ``message`` and read the answer; the connection goes back to the pool only after a whole
        answer that allows it (any failure, timeout or cancellation closes it)."""
        reusable = False
        try:
            try:
                connection.writer.write(message)
                await connection.writer.drain()
                status_line = await connection.reader.readline()
            except (ConnectionResetError, BrokenPipeError) as exc:
                if connection.reused:
                    raise _Stale from exc
                raise
            if not status_line and connection.reused:
                raise _Stale
            answer, reusable = await _read_answer(connection.reader, method, status_line, self.max_body)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise HttpError(f"{method} {target.path}: {_reason(exc)}") from exc
        finally:
            if not reusable:
                connection.close()
        if reusable:
            self._put(target, connection)
        return answer


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the connection closed in the middle of the answer"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _read_answer(
    reader: asyncio.StreamReader, method: str, status_line: bytes, max_body: int
) -> tuple[Answer, bool]:
    """The answer after its first line, and whether the connection may carry another request."""
    while True:
        version, status, reason = _status(status_line)
        headers = await _headers(reader)
        if status != 100:  # 100 Continue comes before the real answer
            break
        status_line = await reader.readline()
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    if method == "HEAD" or status in _NO_BODY or 100 <= status < 200:
        return Answer(status, reason, headers, b""), keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Answer(status, reason, headers, await _chunked(reader, max_body)), keep
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ValueError(f"bad Content-Length {length[:40]!r}")
        return Answer(status, reason, headers, await reader.readexactly(_bounded(int(length), max_body))), keep
    body = await reader.read(max_body + 1)
    while len(body) <= max_body and (more := await reader.read(max_body + 1 - len(body))):
        body += more
    return Answer(status, reason, headers, body[: _bounded(len(body), max_body)]), False


def _bounded(size: int, max_body: int) -> int:
    if size > max_body:
        raise ValueError(f"an answer of more than {max_body} bytes")
    return size


def _status(line: bytes) -> tuple[str, int, str]:
    if not line:
        raise ValueError("the server closed the connection without an answer")
    text = line.decode("latin-1").rstrip("\r\n")
    version, _, rest = text.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {text[:80]!r}")
    return version, int(code), reason


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = (await reader.readline()).decode("latin-1")
        if line in ("\r\n", "\n"):
            return headers
        if not line.endswith("\n"):
            raise ValueError("the connection closed in the middle of the answer's headers")
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ValueError(f"bad header line {line[:80]!r}")
        key, value = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    raise ValueError(f"more than {MAX_HEADERS} header lines")


async def _chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = bytearray()
    while True:
        size_text = (await reader.readline()).split(b";", 1)[0].strip()
        if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
            raise ValueError(f"bad chunk size {size_text[:40]!r}")
        size = _bounded(len(body) + int(size_text, 16), max_body) - len(body)
        if size == 0:
            await _headers(reader)  # trailers, if any, end with an empty line
            return bytes(body)
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("a chunk does not end with CRLF")
