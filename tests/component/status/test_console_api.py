"""The console's routes on a real nats-server: the pages are served from the package, a replay with no
reconciler running is a clear 503, unknown kinds and bad steps are 404/400, and the OpenAPI document
describes the console's routes with the history API's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from nats.aio.client import Client

from services.status.api import ApiServer, StatusApi
from services.status.console import PAGES, Console
from services.status.store import StatusStore


@pytest.fixture
async def console_url(store: StatusStore, nc: Client) -> AsyncIterator[str]:
    console = Console(nc, partitions=1, trace_url_template="https://traces.example/{trace_id}")
    server = ApiServer(
        StatusApi(store, extra_routes=console.routes(), pages=console.add_pages), host="127.0.0.1", port=0
    )
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()


async def get(url: str) -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()


def message(body: bytes) -> Any:
    return json.loads(body)["message"]


async def test_pages_settings_and_clear_errors(console_url: str) -> None:
    status, kind, body = await get(f"{console_url}/")  # redirected to /console/
    assert status == 200 and kind.startswith("text/html") and b"/console/app.js" in body
    for page, content_type in PAGES.items():
        status, kind, _ = await get(f"{console_url}/console/{page}")
        assert status == 200 and kind.startswith(content_type)
    assert (await get(f"{console_url}/console/../api.py"))[0] == 404

    status, _, body = await get(f"{console_url}/v1/console")
    assert status == 200
    assert json.loads(body) == {"trace_url_template": "https://traces.example/{trace_id}", "partitions": 1}

    status, _, body = await get(f"{console_url}/v1/bus")
    bus = json.loads(body)
    assert status == 200 and [p["partition"] for p in bus["partitions"]] == [0]
    assert bus["dead_letters"] == [] and bus["dead_letters_total"] == 0

    status, _, body = await get(f"{console_url}/v1/replay/RayJob/default/nothing")
    assert status == 503 and message(body) == "no reconciler is running to replay with today's code"
    assert (await get(f"{console_url}/v1/replay/Pod/default/x"))[0] == 404
    assert (await get(f"{console_url}/v1/replay/RayJob/default/x?step=first"))[0] == 400
    status, _, body = await get(f"{console_url}/v1/events/rayjobs/default/nothing")
    assert status == 200 and json.loads(body) == {"items": []}

    paths = json.loads((await get(f"{console_url}/openapi.json"))[2])["paths"]
    assert {
        "/v1/bus",
        "/v1/console",
        "/v1/events/{kind}/{namespace}/{name}",
        "/v1/replay/{kind}/{namespace}/{name}",
    } <= set(paths)
