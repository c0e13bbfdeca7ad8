"""The async HTTP client against a real loopback server that answers with scripted bytes: how it frames
answers, when it keeps or drops a connection, and what a broken or hostile server costs (an
:class:`HttpError` or a :class:`TimeoutError`, never a hang or a crash)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from kubeaccess.asynchttp import AsyncHttp, HttpError

Script = Callable[[bytes], bytes | None]
"""What the server writes for one request head (None: write nothing and keep the connection open)."""


@dataclass
class ScriptedServer:
    """A loopback server that reads request heads (and bodies of a Content-Length) and answers by script."""

    script: Script
    close_after_answer: bool = False
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    closed_by_client: asyncio.Event = field(default_factory=asyncio.Event)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
                answer = self.script(request)
                if answer is None:
                    await reader.read()  # until the client gives up and closes
                    self.closed_by_client.set()
                    return
                await asyncio.sleep(0)  # let other connections' requests arrive while this one is open
                self.open_now -= 1
                writer.write(answer)
                await writer.drain()
                if self.close_after_answer:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client.set()
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


Serve = Callable[..., Awaitable[ScriptedServer]]
"""Starts a :class:`ScriptedServer` with a script (and ``close_after_answer``)."""


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []
    scripted: list[ScriptedServer] = []

    async def started(script: Script, close_after_answer: bool = False) -> ScriptedServer:
        server = ScriptedServer(script, close_after_answer)
        scripted.append(server)
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        servers.append(listening)
        server.port = listening.sockets[0].getsockname()[1]
        return server

    yield started
    for listening in servers:
        listening.close()
    for server in scripted:
        for writer in server.writers:
            writer.close()


def ok(body: bytes = b"{}", *, extra: str = "") -> Script:
    return lambda _: f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def test_a_request_reaches_the_server_whole_and_the_connection_is_kept_for_the_next(serve: Serve) -> None:
    server = await serve(ok(b'{"kind":"Status"}', extra="Retry-After: 3\r\n"))
    client = AsyncHttp()
    answer = await client.request(
        "POST",
        server.url + "/api/v1/pods?labelSelector=a%3Db",
        headers={"Authorization": "Bearer t"},
        body=b"{1}",
        timeout=10,
    )
    assert (answer.status, answer.reason, answer.body) == (200, "OK", b'{"kind":"Status"}')
    assert answer.header("retry-after") == answer.header("Retry-After") == "3"
    assert client.idle == 1
    await client.request("GET", server.url + "/healthz", timeout=10)
    first, second = server.requests
    assert first.startswith(b"POST /api/v1/pods?labelSelector=a%3Db HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n".encode() in first
    assert b"Content-Length: 3\r\n" in first and first.endswith(b"\r\n\r\n{1}")
    assert b"Authorization: Bearer t\r\n" in first
    assert second.startswith(b"GET /healthz HTTP/1.1\r\n") and b"Content-Length" not in second
    assert server.connections == 1
    await client.close()
    assert client.idle == 0


async def test_a_chunked_answer_is_joined_and_its_extensions_and_trailers_are_read_past(serve: Serve) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = head + b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
    server = await serve(lambda _: chunked)
    client = AsyncHttp()
    assert (await client.request("GET", server.url + "/", timeout=10)).body == b"Wikipedia"
    assert (await client.request("GET", server.url + "/", timeout=10)).body == b"Wikipedia"
    assert server.connections == 1
    await client.close()


@pytest.mark.parametrize(
    ("method", "answer", "status", "body"),
    [
        ("GET", b"HTTP/1.0 200 OK\r\n\r\nuntil the end", 200, b"until the end"),  # no length: up to the end
        ("DELETE", b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", 204, b""),
    ],
)
async def test_an_answer_that_ends_its_connection_is_read_and_the_connection_not_kept(
    serve: Serve, method: str, answer: bytes, status: int, body: bytes
) -> None:
    server = await serve(lambda _: answer, close_after_answer=True)
    client = AsyncHttp()
    received = await client.request(method, server.url + "/x", timeout=10)
    assert (received.status, received.body, client.idle) == (status, body, 0)
    await client.close()


async def test_a_kept_connection_the_server_closed_meanwhile_costs_nothing(serve: Serve) -> None:
    server = await serve(ok())
    client = AsyncHttp()
    await client.request("GET", server.url + "/", timeout=10)
    for writer in server.writers:  # the server drops its idle connection, as servers do after a while
        writer.close()
    await server.closed_by_client.wait()
    assert (await client.request("PUT", server.url + "/", body=b"{}", timeout=10)).status == 200
    assert server.connections == 2
    await client.close()


async def test_a_server_that_never_answers_times_out_and_its_connection_is_closed(serve: Serve) -> None:
    server = await serve(lambda _: None)
    client = AsyncHttp()
    with pytest.raises(TimeoutError):
        await client.request("GET", server.url + "/slow", timeout=0.2)
    await server.closed_by_client.wait()
    assert client.idle == 0
    await client.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n", "not an HTTP/1.x status line: 'SSH-2.0-OpenSSH'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: twelve\r\n\r\n", "bad Content-Length 'twelve'"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 200 + b"\r\n", "more than 128 header lines"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x10\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "closed in the middle of the answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "an answer of more than 1024 bytes"),
        (b"HTTP/1.1 200 OK\r\n" + b"X" * 70000, "Separator is not found"),
        (b"", "the server closed the connection without an answer"),
    ],
)
async def test_a_broken_or_hostile_answer_is_an_error_that_says_what_was_wrong(
    serve: Serve, answer: bytes, message: str
) -> None:
    server = await serve(lambda _: answer, close_after_answer=True)
    client = AsyncHttp(max_body=1024)
    with pytest.raises(HttpError, match="^GET /broken: .*" + message.replace("(", r"\(")):
        await client.request("GET", server.url + "/broken", timeout=10)
    assert client.idle == 0
    await client.close()


async def test_a_close_delimited_body_beyond_the_bound_is_refused(serve: Serve) -> None:
    server = await serve(lambda _: b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000, close_after_answer=True)
    client = AsyncHttp(max_body=1024)
    with pytest.raises(HttpError, match="an answer of more than 1024 bytes"):
        await client.request("GET", server.url + "/big", timeout=10)
    await client.close()


async def test_a_line_break_in_a_header_is_refused_before_anything_is_sent(serve: Serve) -> None:
    server = await serve(ok())
    client = AsyncHttp()
    with pytest.raises(HttpError, match="a line break") as refused:
        await client.request("GET", server.url + "/", headers={"Authorization": "Bearer x\r\nX-Evil: 1"}, timeout=10)
    assert "Bearer" not in str(refused.value)
    with pytest.raises(HttpError, match="only http and https URLs"):
        await client.request("GET", "ftp://127.0.0.1/", timeout=10)
    assert server.connections == 0
    await client.close()


async def test_an_unreachable_server_is_an_error_naming_the_address_not_the_headers(unused_tcp_port: int) -> None:
    client = AsyncHttp()
    with pytest.raises(HttpError, match=f"cannot connect to 127.0.0.1:{unused_tcp_port}") as refused:
        await client.request(
            "GET", f"http://127.0.0.1:{unused_tcp_port}/", headers={"Authorization": "Bearer s3cret"}, timeout=10
        )
    assert "s3cret" not in str(refused.value)
    await client.close()


async def test_requests_beyond_the_limit_wait_for_a_free_one(serve: Serve) -> None:
    server = await serve(ok())
    client = AsyncHttp(limit=2)
    answers = await asyncio.gather(*(client.request("GET", server.url + f"/{n}", timeout=10) for n in range(8)))
    assert [answer.status for answer in answers] == [200] * 8
    assert server.most_open <= 2 and server.connections <= 2
    await client.close()
    with pytest.raises(HttpError, match="the client is closed"):
        await client.request("GET", server.url + "/", timeout=10)
