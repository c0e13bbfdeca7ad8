"""The services' HTTP server over real loopback sockets: routes and placeholders, kept-alive connections,
what a broken or hostile caller gets, and that no listener outlives a start cut short at any step."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from kubeaccess.asynchttp import AsyncHttp
from services.runtime.webserver import MAX_BODY, Reply, Request, Routes, WebServer


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def _echo(request: Request) -> Reply:
    shown = f"{request.method} {request.path} {dict(request.match)} {dict(request.query)}"
    return Reply(200, shown.encode(), headers={"X-Seen": request.headers.get("x-token", "")})


async def _broken(_: Request) -> Reply:
    raise RuntimeError("a handler bug")


def _routes() -> Routes:
    routes = Routes()
    routes.add("/", _echo)
    routes.add("/v1/things/{namespace}/{name}", _echo)
    routes.add("/broken", _broken)
    return routes


async def _respond(request: Request) -> Reply:
    found = _routes().find(request)
    if found is None:
        return Reply(404, b"not found")
    handler, routed = found
    return await handler(routed)


@pytest.fixture
async def server() -> AsyncIterator[WebServer]:
    serving = WebServer(_respond, host="127.0.0.1", ports=[0])
    await serving.start()
    yield serving
    await serving.stop()


async def _exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw`` on a new connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_routes_placeholders_query_and_headers_reach_the_handler(server: WebServer) -> None:
    client = AsyncHttp()
    base = f"http://127.0.0.1:{server.ports[0]}"
    answer = await client.request(
        "GET", base + "/v1/things/ns/a%20b?limit=5&limit=6&empty=", headers={"X-Token": "t"}, timeout=10
    )
    assert answer.status == 200 and answer.header("x-seen") == "t"
    assert answer.body == b"GET /v1/things/ns/a b {'namespace': 'ns', 'name': 'a b'} {'limit': '5', 'empty': ''}"
    assert (await client.request("GET", base + "/v1/things/ns/", timeout=10)).status == 404
    head = await client.request("HEAD", base + "/", timeout=10)
    assert (head.status, head.body, head.header("content-length")) == (200, b"", str(len(b"HEAD / {} {}")))
    assert client.idle == 1  # one connection carried all three
    await client.close()


async def test_a_handler_that_fails_is_a_500_and_the_server_goes_on(server: WebServer) -> None:
    client = AsyncHttp()
    base = f"http://127.0.0.1:{server.ports[0]}"
    assert (await client.request("GET", base + "/broken", timeout=10)).status == 500
    assert (await client.request("GET", base + "/", timeout=10)).status == 200
    await client.close()


@pytest.mark.parametrize(
    ("raw", "answer"),
    [
        (b"GARBAGE\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET noslash HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", b"HTTP/1.1 405 Method Not Allowed"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (
            f"GET / HTTP/1.1\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode(),
            b"HTTP/1.1 413 Request Entity Too Large",
        ),
        (b"GET / HTTP/1.1\r\nX: " + b"y" * 70000 + b"\r\n\r\n", b""),  # a head beyond the bound: closed
        (b"GET / HTTP/1.0\r\n\r\n", b"HTTP/1.1 200 OK"),  # HTTP/1.0 without keep-alive: closed after
    ],
)
async def test_a_broken_or_hostile_request_is_refused_and_its_connection_closed(
    server: WebServer, raw: bytes, answer: bytes
) -> None:
    received = await _exchange(server.ports[0], raw)
    assert received.startswith(answer) if answer else received == b""


async def test_stop_closes_kept_alive_connections(server: WebServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.ports[0])
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    await reader.readuntil(b"GET / {} {}")
    await server.stop()
    assert await reader.read() == b""
    writer.close()


async def test_serves_on_every_port_asked_for() -> None:
    serving = WebServer(_respond, host="127.0.0.1", ports=[0, 0])
    await serving.start()
    try:
        assert len(set(serving.ports)) == 2 and 0 not in serving.ports
        for port in serving.ports:
            assert (await _exchange(port, b"GET / HTTP/1.0\r\n\r\n")).endswith(b"GET / {} {}")
    finally:
        await serving.stop()


@pytest.mark.parametrize("steps", range(10))
async def test_a_start_cancelled_at_any_step_leaves_no_listener(steps: int) -> None:
    before = _open_descriptors()
    serving = WebServer(_respond, host="127.0.0.1", ports=[0, 0])
    starting = asyncio.ensure_future(serving.start())
    for _ in range(steps):
        await asyncio.sleep(0)
    starting.cancel()
    (outcome,) = await asyncio.gather(starting, return_exceptions=True)
    if not isinstance(outcome, BaseException):  # it finished before the cancel arrived
        await serving.stop()
    assert _open_descriptors() <= before


async def test_a_port_in_use_closes_the_ports_already_opened(server: WebServer) -> None:
    before = _open_descriptors()
    with pytest.raises(OSError):
        await WebServer(_respond, host="127.0.0.1", ports=[0, server.ports[0]]).start()
    assert _open_descriptors() <= before
