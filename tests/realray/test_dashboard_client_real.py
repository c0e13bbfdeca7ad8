"""raybus's dashboard client against a real Ray head with token auth: a rejected token (real Ray answers
403) is dropped from the cache at once, and a Serve config PUT that times out while Ray carries it out
counts as applied, once, instead of failing and being sent again."""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from kubernetes import client

from schema.messages import DashboardRef, PutServeConfig
from schema.probes import SERVE_APPLICATIONS_PATH
from services.edge.dashboard import DashboardClient
from services.edge.kubeapi import KubeApi, load_configuration
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, start_kubesim
from tests.realray.heads import Head, create_head
from tests.realray.test_rayservice_real import APPS

TOKEN = "real-" + secrets.token_hex(8)
GREETER = {"name": "greeter", "import_path": "greeter:app", "route_prefix": "/", "args": {"cluster": "c"}}


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    kube = start_kubesim(
        kubelet="instant", ray="real", crd_paths=default_crd_paths(), workdir=tmp_path_factory.mktemp("dash-real")
    )
    try:
        core = client.CoreV1Api(kube.api_client)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="dash")))
        yield create_head(kube, "dash", "c", token=TOKEN, env={"PYTHONPATH": str(APPS)})
    finally:
        kube.close()


@pytest_asyncio.fixture
async def dashboard(head: Head) -> AsyncIterator[DashboardClient]:
    api = KubeApi(load_configuration(str(head.kube.kubeconfig)), concurrency=2)
    # A PUT timeout far below the first PUT's (Serve starts first), and a long confirm window.
    found = DashboardClient(api, use_proxy=True, serve_put_timeout=0.05, put_confirm_window=120)
    try:
        yield found
    finally:
        await found.close()
        await api.close()


def _secret(kube: KubeSimHandle, name: str, token: str, *, create: bool) -> None:
    core = client.CoreV1Api(kube.api_client)
    body = {"metadata": {"name": name}, "data": {"auth_token": base64.b64encode(token.encode()).decode()}}
    if create:
        core.create_namespaced_secret("dash", body)  # type: ignore[arg-type]
    else:
        core.replace_namespaced_secret(name, "dash", body)  # type: ignore[arg-type]


async def test_a_rejected_token_is_read_again(head: Head, dashboard: DashboardClient) -> None:
    _secret(head.kube, "stale", "not-the-token", create=True)
    ref = DashboardRef(namespace="dash", service=head.service, port=8265, cluster="c", auth_secret="stale")
    assert (await dashboard.request(ref, "GET", "/api/jobs/")).status == 403
    _secret(head.kube, "stale", TOKEN, create=False)
    # Within the cache's lifetime: only a dropped cache reads the replaced Secret.
    assert (await dashboard.request(ref, "GET", "/api/jobs/")).status == 200


async def test_a_timed_out_serve_put_that_ray_applied_counts_as_applied(
    head: Head, dashboard: DashboardClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.edge.dashboard")
    ref = DashboardRef(namespace="dash", service=head.service, port=8265, cluster="c", auth_secret="c")
    config = {"applications": [GREETER]}
    result = await dashboard.apply(PutServeConfig(dashboard=ref, config=config))
    assert (result.outcome, result.error) == ("applied", "")
    assert "a timed-out Serve config PUT" in caplog.text
    answer = await dashboard.request(ref, "GET", SERVE_APPLICATIONS_PATH)
    details = answer.json()
    assert details is not None and list(details["applications"]) == ["greeter"]
    assert details["applications"]["greeter"]["deployed_app_config"]["import_path"] == "greeter:app"
