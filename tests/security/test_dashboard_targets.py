"""Dashboard references become URLs of the named Service only: DNS-1123 names, quoted path segments.

A :class:`DashboardRef` arrives on the bus. Its namespace once went into the API server's proxy path
unescaped (``kube-system/pods?x=`` turned a job submission into ``POST .../namespaces/kube-system/pods``)
and its service into the host of a direct URL (the Ray token went to any ``host:port``). Here the
dashboard client is driven against a real kubesim and a real local listener.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from schema.messages import DashboardRef
from schema.probes import PodEndpoint
from services.edge.dashboard import (
    DashboardClient,
    dashboard_base_url,
    dashboard_ref_problem,
    pod_base_url,
    secret_path,
)
from services.edge.kubeapi import KubeApi, load_configuration
from services.runtime.errors import PermanentError
from tests.fixtures.kubesim import KubeSimHandle, running_kubesim
from tests.kubeobjects import name_of

NS = "team"
TOKEN = "victim-token-" + "x" * 20

HOSTILE = [
    pytest.param(DashboardRef(namespace="kube-system/pods?x=", service="svc", port=8265, cluster="c"), id="ns-path"),
    pytest.param(DashboardRef(namespace=NS, service="svc:80/../../pods?x=", port=8265, cluster="c"), id="svc-path"),
    pytest.param(DashboardRef(namespace=NS, service="127.0.0.1:9/#", port=8265, cluster="c"), id="svc-host"),
    pytest.param(DashboardRef(namespace="x@evil.example", service="svc", port=8265, cluster="c"), id="ns-userinfo"),
    pytest.param(DashboardRef(namespace=NS, service="svc", port=0, cluster="c"), id="port"),
    pytest.param(DashboardRef(namespace=NS, service="svc", port=8265, cluster="c", auth_secret="../x"), id="secret"),
    pytest.param(DashboardRef(namespace="", service="svc", port=8265, cluster="c"), id="empty-ns"),
    pytest.param(DashboardRef(namespace=NS, service="a" * 64, port=8265, cluster="c"), id="svc-too-long"),
]


@pytest.mark.parametrize("ref", HOSTILE)
@pytest.mark.parametrize("use_proxy", [True, False], ids=["proxy", "direct"])
def test_a_hostile_reference_never_becomes_a_url(ref: DashboardRef, use_proxy: bool) -> None:
    assert dashboard_ref_problem(ref)
    with pytest.raises(PermanentError, match="invalid dashboard reference"):
        dashboard_base_url(ref, use_proxy=use_proxy, api_host="https://api", cluster_domain="cluster.local")


def test_a_valid_reference_names_its_service_only() -> None:
    ref = DashboardRef(namespace=NS, service="rc-head-svc", port=8265, cluster="rc", auth_secret="rc")
    assert dashboard_ref_problem(ref) == ""
    proxied = dashboard_base_url(ref, use_proxy=True, api_host="https://api/", cluster_domain="cluster.local")
    assert proxied == "https://api/api/v1/namespaces/team/services/rc-head-svc:8265/proxy"
    direct = dashboard_base_url(ref, use_proxy=False, api_host="", cluster_domain="cluster.local")
    assert direct == "http://rc-head-svc.team.svc.cluster.local:8265"
    assert secret_path(DashboardRef(namespace="a/b", service="s", port=1, cluster="c", auth_secret="x?y")) == (
        "/api/v1/namespaces/a%2Fb/secrets/x%3Fy"
    )
    pod = PodEndpoint(namespace="a/b", name="p?q", uid="u", ip="10.0.0.1", port=8000)
    assert pod_base_url(pod, use_proxy=True, api_host="https://api") == (
        "https://api/api/v1/namespaces/a%2Fb/pods/p%3Fq:8000/proxy"
    )


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeSimHandle]:
    async with running_kubesim(kubelet="instant", workdir=tmp_path / "kube") as handle:
        core = client.CoreV1Api(handle.api_client)
        await asyncio.to_thread(core.create_namespace, client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        secret = {"metadata": {"name": "rc"}, "data": {"auth_token": base64.b64encode(TOKEN.encode()).decode()}}
        await asyncio.to_thread(core.create_namespaced_secret, NS, cast(Any, secret))
        yield handle


@pytest.fixture
async def kube_api(kube: KubeSimHandle) -> AsyncIterator[KubeApi]:
    api = KubeApi(load_configuration(str(kube.kubeconfig)), concurrency=2)
    try:
        yield api
    finally:
        await api.close()


async def test_a_namespace_with_a_path_reaches_no_other_api_through_the_proxy(
    kube: KubeSimHandle, kube_api: KubeApi
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "planted"}, "spec": {"containers": [{"name": "c"}]}}
    ref = DashboardRef(namespace="kube-system/pods?x=", service="rc-head-svc", port=8265, cluster="rc")
    dashboard = DashboardClient(kube_api, use_proxy=True)
    try:
        with pytest.raises(PermanentError, match="not a DNS-1123 label"):
            await dashboard.request(ref, "POST", "/api/jobs/", pod)
    finally:
        await dashboard.close()
    pods = await asyncio.to_thread(client.CoreV1Api(kube.api_client).list_namespaced_pod, "kube-system")
    assert [name_of(p) for p in pods.items] == []


async def test_direct_mode_sends_the_token_to_no_other_host(kube_api: KubeApi) -> None:
    received: list[bytes] = []

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(listener, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ref = DashboardRef(namespace=NS, service=f"127.0.0.1:{port}/#", port=8265, cluster="rc", auth_secret="rc")
    dashboard = DashboardClient(kube_api, use_proxy=False, cluster_domain="cluster.local")
    try:
        with pytest.raises(PermanentError, match="not a DNS-1123 label"):
            await dashboard.request(ref, "POST", "/api/jobs/", {"entrypoint": "x"})
    finally:
        await dashboard.close()
        server.close()
        await server.wait_closed()
    assert received == []
