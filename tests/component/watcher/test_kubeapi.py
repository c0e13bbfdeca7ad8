"""The watcher's API adapter against kubesim: bodies, errors and the limits of a streaming watch."""

from __future__ import annotations

import asyncio
import socket
import time

import msgspec
import pytest
from aiohttp import web
from kubernetes import client

from kubeaccess.configuration import AUTH_REUSE
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
    pool_manager = kube_api._client.rest_client.pool_manager
    assert len(pool_manager.pools) == 0 and kube_api._session is None


async def test_no_answer_is_an_error_of_status_zero() -> None:
    quiet = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        for port, timeout, expected in ((quiet.getsockname()[1], 0.3, "no answer within 0.3s"), (closed_port, 5, "")):
            configuration = client.Configuration()
            configuration.host = f"http://127.0.0.1:{port}"
            api = KubeApi(configuration, concurrency=1)
            try:
                with pytest.raises(ApiError) as failed:
                    await api.arequest("GET", "/api/v1/namespaces", timeout=timeout)
            finally:
                await api.close()
            assert failed.value.status == 0 and failed.value.reason == "ConnectionError"
            assert "GET /api/v1/namespaces" in str(failed.value) and expected in str(failed.value)
    finally:
        quiet.close()


async def test_the_auth_headers_are_asked_for_once_a_second_and_a_refreshed_token_is_then_sent() -> None:
    """The official client's refresh hook re-applies the whole configuration: it runs at most once per
    ``AUTH_REUSE`` seconds, and what it refreshed goes out from then on."""
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
    refreshed: list[int] = []

    def refresh(configuration: client.Configuration) -> None:
        refreshed.append(1)
        configuration.api_key["BearerToken"] = f"token-{len(refreshed)}"

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.api_key["BearerToken"] = "token-0"
    configuration.api_key_prefix["BearerToken"] = "Bearer"
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]  # typed None in the client
    now = [0.0]
    api = KubeApi(configuration, concurrency=1, clock=lambda: now[0])
    try:
        for at in (0.0, 0.4, 0.9, AUTH_REUSE, AUTH_REUSE + 0.5, 2 * AUTH_REUSE):
            now[0] = at
            await api.arequest("GET", "/api/v1/namespaces")
        # The blocking side uses the same headers (on a thread: this loop serves the requests).
        await asyncio.to_thread(api.request, "GET", "/api/v1/namespaces")
    finally:
        await api.close()
        await runner.cleanup()
    assert seen == ["Bearer token-1"] * 3 + ["Bearer token-2"] * 2 + ["Bearer token-3"] * 2
    assert len(refreshed) == 3
