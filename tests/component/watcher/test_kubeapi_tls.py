"""The edge's and kubesim's API clients over TLS: the kubeconfig's CA, client certificate and server name;
and the dashboard client through the API server's service proxy, which sends with the same settings.

A real TLS server (aiohttp) that requires a client certificate signed by its CA answers with the subject it
authenticated, as an API server authenticates a client certificate's user.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from kubeaccess.configuration import load
from kubesim.apiclient import ApiConnection
from kubesim.errors import ApiError as SimApiError
from realkube.pki import CertificateAuthority
from schema.messages import DashboardRef
from services.edge.calls import ApiError
from services.edge.dashboard import DashboardClient
from services.edge.kubeapi import KubeApi

SERVER_NAME = "kube.internal"
"""The only name in the server's certificate: a client reaching 127.0.0.1 must be told to expect it."""


async def whoami(request: web.Request) -> web.Response:
    peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
    subject = dict(item[0] for item in (peer or {}).get("subject", ()))
    return web.json_response({"kind": "SelfSubjectReview", "user": subject.get("commonName", "")})


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, CertificateAuthority]]:
    authority = CertificateAuthority(tmp_path / "pki")
    serving = authority.serving("server", [SERVER_NAME])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.files.cert))
    context.load_cert_chain(str(serving.cert), str(serving.key))
    context.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    app.router.add_get("/whoami", whoami)
    app.router.add_get("/api/v1/namespaces/{proxied:.*}", whoami)  # the service proxy's paths
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    try:
        yield runner.addresses[0][1], authority
    finally:
        await runner.cleanup()


def _kubeconfig(folder: Path, port: int, authority: CertificateAuthority, *, server_name: str | None) -> Path:
    client = authority.client("alice", "alice")
    cluster = {
        "server": f"https://127.0.0.1:{port}",
        "certificate-authority-data": base64.b64encode(authority.files.cert.read_bytes()).decode(),
    }
    if server_name:
        cluster["tls-server-name"] = server_name
    user = {
        "client-certificate": str(client.cert),
        "client-key-data": base64.b64encode(client.key.read_bytes()).decode(),
    }
    path = folder / f"kubeconfig-{server_name or 'plain'}"
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "tls",
                "clusters": [{"name": "tls", "cluster": cluster}],
                "users": [{"name": "alice", "user": user}],
                "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "alice"}}],
            }
        )
    )
    return path


async def test_both_sides_present_the_client_certificate_and_expect_the_server_name(
    tls_server: tuple[int, CertificateAuthority], tmp_path: Path
) -> None:
    port, authority = tls_server
    api = KubeApi(load(str(_kubeconfig(tmp_path, port, authority, server_name=SERVER_NAME))), concurrency=1)
    try:
        asynchronous = await api.arequest("GET", "/whoami")
        blocking = await asyncio.to_thread(api.request, "GET", "/whoami")
    finally:
        await api.close()
    assert b'"user": "alice"' in asynchronous.data and b'"user": "alice"' in blocking.data


async def test_kubesim_s_client_for_attached_simulators_does_the_same(
    tls_server: tuple[int, CertificateAuthority], tmp_path: Path
) -> None:
    port, authority = tls_server
    connection = ApiConnection.from_kubeconfig(str(_kubeconfig(tmp_path, port, authority, server_name=SERVER_NAME)))
    try:
        assert (await connection.arequest("GET", "/whoami"))["user"] == "alice"
        assert (await asyncio.to_thread(connection.request, "GET", "/whoami"))["user"] == "alice"
    finally:
        await connection.close()


async def test_a_server_certificate_for_another_name_is_refused_on_both_sides(
    tls_server: tuple[int, CertificateAuthority], tmp_path: Path
) -> None:
    port, authority = tls_server
    api = KubeApi(load(str(_kubeconfig(tmp_path, port, authority, server_name=None))), concurrency=1)
    try:
        with pytest.raises(ApiError) as asynchronous:
            await api.arequest("GET", "/whoami")
        with pytest.raises(ApiError) as blocking:
            await asyncio.to_thread(api.request, "GET", "/whoami", timeout=5.0)
    finally:
        await api.close()
    for failed in (asynchronous, blocking):
        assert failed.value.status == 0 and "GET /whoami" in str(failed.value)
    connection = ApiConnection.from_kubeconfig(str(_kubeconfig(tmp_path, port, authority, server_name=None)))
    try:
        with pytest.raises(SimApiError) as simulated:
            await connection.arequest("GET", "/whoami")
    finally:
        await connection.close()
    assert simulated.value.code == 0


async def test_the_dashboard_client_reaches_the_service_proxy_with_the_same_certificate_and_name(
    tls_server: tuple[int, CertificateAuthority], tmp_path: Path
) -> None:
    port, authority = tls_server
    ref = DashboardRef(namespace="default", service="head-svc", port=8265, cluster="raycluster")
    for server_name, answered in ((SERVER_NAME, 200), (None, 0)):
        api = KubeApi(load(str(_kubeconfig(tmp_path, port, authority, server_name=server_name))), concurrency=1)
        dashboard = DashboardClient(api, use_proxy=True)
        try:
            answer = await dashboard.request(ref, "GET", "/api/jobs/")
        finally:
            await dashboard.close()
            await api.close()
        assert answer.status == answered
        if answered:
            assert answer.json() == {"kind": "SelfSubjectReview", "user": "alice"}
        else:
            assert "CERTIFICATE_VERIFY_FAILED" in answer.error
