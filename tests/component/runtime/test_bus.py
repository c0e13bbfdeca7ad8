"""NATS connection helpers against a real nats-server."""

from __future__ import annotations

import sys
from pathlib import Path

import nats
import pytest

from services.runtime.bus import connect, flush_sent
from services.runtime.errors import PermanentError
from services.runtime.settings import NatsSettings
from tests.fixtures.nats import NatsServer

SUBJECT = "raybus.flush-test"


async def test_flush_sent_returns_after_the_server_processed_a_subscription(tmp_path: Path) -> None:
    """The server traces each command it processes, in order: the SUB comes before the PING that
    ``flush_sent`` waits on (``Client.flush()`` alone writes its PING ahead of the queued SUB)."""
    config = tmp_path / "trace.conf"
    config.write_text("trace: true\n")
    server = NatsServer(tmp_path / "nats", config=config)
    server.start()
    try:
        nc = await nats.connect(server.url)
        try:
            await nc.subscribe(SUBJECT)
            await flush_sent(nc)
            trace = server.log_path.read_text().splitlines()
        finally:
            await nc.close()
    finally:
        server.stop()
    received = [line.split("<<- ", 1)[1] for line in trace if "<<- " in line]
    subscribed = next(i for i, command in enumerate(received) if command.startswith(f"[SUB {SUBJECT} "))
    last_ping = max(i for i, command in enumerate(received) if command == "[PING]")
    assert subscribed < last_ping, received


async def test_a_websocket_url_without_aiohttp_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in ``raybus reconciler``, which keeps aiohttp out of its process.
    monkeypatch.setitem(sys.modules, "aiohttp", None)
    with pytest.raises(PermanentError, match="websocket URLs need aiohttp") as raised:
        await connect(NatsSettings(url="ws://raybus:s3cret@127.0.0.1:1"), name="test")
    assert "s3cret" not in str(raised.value)
