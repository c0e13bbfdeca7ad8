"""The watcher's API adapter against kubesim: bodies, errors and the limits of a streaming watch."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from kubeaccess.configuration import Configuration
from kubeaccess.credentials import TokenFile
from services.edge.calls import ApiError
from services.edge.kubeapi import KubeApi


def test_a_body_goes_out_as_json_and_an_error_comes_back_with_its_status(kube_api: KubeApi) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeapi-body"}, "data": {"k": "v"}}
    created = kube_api.request("POST", "/api/v1/namespaces/default/configmaps", body=body)
    assert created.status == 201
    assert msgspec.json.decode(created.data)["data"] == {"k": "v"}
    with pytest.raises(ApiError) as refused:
        kube_api.request("POST", "/api/v1/namespaces/default/configmaps", body=body)
    assert refused.value.status == 409 and refused.value.reason == "AlreadyExists"
    kube_api.request("DELETE", "/api/v1/namespaces/default/configmaps/kubeapi-body")


def test_a_quiet_watch_outlives_its_connect_timeout(kube_api: KubeApi) -> None:
    """The connect timeout bounds the connection only; the read timeout bounds each wait for a line. A
    watch with no events stays open until the server ends it (``timeoutSeconds``)."""
    started = time.monotonic()
    response = kube_api.open_stream(
        "/api/v1/namespaces/kubeapi-quiet/configmaps",
        query=[("watch", "true"), ("timeoutSeconds", "2")],
        connect_timeout=0.5,
        read_timeout=10.0,
    )
    try:
        assert list(response.stream()) == []  # ends cleanly when the server closes it
    finally:
        response.release_conn()
    assert time.monotonic() - started >= 1.5


async def test_the_async_side_sends_the_same_request_and_reads_the_same_errors(kube_api: KubeApi) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    body = {"metadata": {"name": "kubeapi-async", "labels": {"app": "a.b", "tier": "x"}}, "data": {"k": "v"}}
    created = await kube_api.arequest("POST", path, body=body)
    assert created.status == 201
    with pytest.raises(ApiError) as refused:
        await kube_api.arequest("POST", path, body=body)
    assert refused.value.status == 409 and refused.value.reason == "AlreadyExists"
    # A query the official client encodes (spaces, commas, equals signs) arrives as it was meant.
    listed = await kube_api.arequest("GET", path, query=[("labelSelector", "app=a.b,tier in (x)")])
    assert [item["metadata"]["name"] for item in msgspec.json.decode(listed.data)["items"]] == ["kubeapi-async"]
    await kube_api.arequest("DELETE", f"{path}/kubeapi-async")


async def test_a_closed_adapter_sends_nothing_and_opens_no_connection(kube_api: KubeApi) -> None:
    """A request after ``close`` (a thread or task that outlived the watcher's stop) fails at once: it would
    open a connection pool or session that nothing closes any more."""
    path = "/api/v1/namespaces/default/configmaps"
    kube_api.request("GET", path)
    await kube_api.close()
    with pytest.raises(ApiError) as blocking:
        kube_api.request("GET", path)
    with pytest.raises(ApiError) as streaming:
        kube_api.open_stream(path, query=[("watch", "true")], connect_timeout=1.0, read_timeout=1.0)
    with pytest.raises(ApiError) as asynchronous:
        await kube_api.arequest("GET", path)
    for failed in (blocking, streaming, asynchronous):
        assert failed.value.status == 0 and "the client is closed" in str(failed.value)
    assert len(kube_api._pool.pools) == 0 and kube_api._http.idle == 0


async def test_no_answer_is_an_error_of_status_zero() -> None:
    quiet = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        for port, timeout, expected in ((quiet.getsockname()[1], 0.3, "no answer within 0.3s"), (closed_port, 5, "")):
            api = KubeApi(Configuration(host=f"http://127.0.0.1:{port}"), concurrency=1)
            try:
                with pytest.raises(ApiError) as failed:
                    await api.arequest("GET", "/api/v1/namespaces", timeout=timeout)
            finally:
                await api.close()
            assert failed.value.status == 0 and failed.value.reason == "ConnectionError"
            assert "GET /api/v1/namespaces" in str(failed.value) and expected in str(failed.value)
    finally:
        quiet.close()


async def test_a_token_file_s_token_goes_out_on_both_sides_and_a_lost_one_is_a_status_zero_error(
    tmp_path: Path,
) -> None:
    """The Authorization header comes from the configuration's credentials on the async and the blocking
    side alike; a credential that cannot be read fails the request without sending it."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"kind": "NamespaceList", "items": []})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    token = tmp_path / "token"
    token.write_text("token-0\n")
    api = KubeApi(Configuration(host=f"http://127.0.0.1:{port}", credentials=TokenFile(token)), concurrency=1)
    missing = KubeApi(Configuration(host=f"http://127.0.0.1:{port}", credentials=TokenFile(tmp_path / "gone")))
    try:
        await api.arequest("GET", "/api/v1/namespaces")
        # The blocking side (on a thread: this loop serves the requests).
        await asyncio.to_thread(api.request, "GET", "/api/v1/namespaces")
        with pytest.raises(ApiError) as failed:
            await missing.arequest("GET", "/api/v1/namespaces")
    finally:
        await api.close()
        await missing.close()
        await runner.cleanup()
    assert seen == ["Bearer token-0"] * 2
    assert failed.value.status == 0 and "cannot read the token file" in str(failed.value)
