"""``raybus reconciler`` as a real process: its health endpoints answer without aiohttp ever loaded.

The reconciler serves nothing but ``/healthz``, ``/readyz`` and ``/metrics``, on the runtime's own small
HTTP server, and keeps nats-py from importing aiohttp for a websocket transport raybus does not use.
"""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.nats import NatsServer, free_port
from tests.helpers import REPO, eventually_sync


@pytest.fixture
def reconciler(nats_server: NatsServer, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    argv = ["reconciler", "--nats-url", nats_server.url, "--health-port", str(port), "--worker-id", "w-1"]
    with (tmp_path / "reconciler.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", *argv], stdout=log, stderr=log, cwd=REPO)
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ask(port: int, method: str, path: str) -> tuple[int, str, bytes]:
    """Status, content type and body of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


def raw(port: int, request: bytes) -> bytes:
    """What the server answers to ``request`` as sent, until it closes the connection (a reset, when it
    closes with part of the request unread, counts as closing)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


def test_health_endpoints_answer_and_aiohttp_is_never_loaded(
    reconciler: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = reconciler
    eventually_sync(lambda: ask(port, "GET", "/readyz")[0] == 200, timeout=60, message="reconciler ready")
    assert ask(port, "GET", "/readyz") == (200, "application/json; charset=utf-8", b'{"ready": true}')
    assert ask(port, "GET", "/healthz") == (200, "text/plain; charset=utf-8", b"ok")
    status, content_type, body = ask(port, "GET", "/metrics?name=x")
    assert status == 200 and content_type.startswith("text/plain") and b"# TYPE" in body
    assert ask(port, "HEAD", "/healthz")[::2] == (200, b"")
    assert ask(port, "GET", "/nope")[0] == 404
    assert ask(port, "POST", "/healthz")[0] == 405
    assert raw(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(port, b"GET /healthz HTTP/1.1\r\n") == b""  # a head cut short: closed, nothing answered
    assert raw(port, b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\n\r\n") == b""  # too long: closed
    assert ask(port, "GET", "/healthz")[0] == 200  # and the server still answers
    mapped = Path(f"/proc/{proc.pid}/maps").read_text()  # every extension module loaded
    assert "site-packages/msgspec/" in mapped and "site-packages/aiohttp/" not in mapped
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
