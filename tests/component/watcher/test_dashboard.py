"""Dashboard commands and the prober through kubesim's service proxy, with token auth."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
import pytest
from kubernetes import client

from schema import codec, subjects
from schema.decision import OBS_RAY_JOB
from schema.keys import ReconcileKey
from schema.messages import (
    CommandBatch,
    DashboardRef,
    ObjectRef,
    PatchObject,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
)
from schema.probes import PodEndpoint
from services.edge.apply.applier import Applier
from services.edge.dashboard import DashboardClient
from services.edge.kubeapi import KubeApi, load_configuration
from services.runtime.bus import publish
from tests.component.watcher.conftest import (
    Bus,
    create_custom,
    in_thread,
    raycluster,
    running_watcher,
    until,
    watcher_settings,
)
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, start_kubesim
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

TOKEN = "tok-" + "s3cr3t" * 4
NOW = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    """A kubesim whose kubelet runs head pods with simulated Ray dashboards."""
    handle = start_kubesim(
        kubelet="instant", crd_paths=default_crd_paths(), workdir=tmp_path_factory.mktemp("kubesim-dash")
    )
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
async def kube_api(kube: KubeSimHandle) -> AsyncIterator[KubeApi]:
    api = KubeApi(load_configuration(str(kube.kubeconfig)), concurrency=4)
    try:
        yield api
    finally:
        await api.close()


def _head_pod(cluster: str) -> dict[str, Any]:
    env = [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": cluster, "key": "auth_token"}}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{cluster}-head-abcde",
            "labels": {"ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/group": "headgroup"},
        },
        "spec": {
            "containers": [
                {
                    "name": "ray-head",
                    "image": "rayproject/ray:2.52.0",
                    "env": env,
                    "ports": [{"name": "dashboard", "containerPort": 8265}],
                }
            ]
        },
    }


def _head_service(cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{cluster}-head-svc", "labels": {"ray.io/cluster": cluster, "ray.io/node-type": "head"}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"ray.io/cluster": cluster, "ray.io/node-type": "head"},
            "ports": [{"name": "dashboard", "port": 8265, "targetPort": 8265}],
        },
    }


def _start_head(kube: KubeSimHandle, ns: str, cluster: str) -> None:
    core = client.CoreV1Api(kube.api_client)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": cluster},
        "data": {"auth_token": base64.b64encode(TOKEN.encode()).decode()},
    }
    core.create_namespaced_secret(ns, cast(Any, secret))
    core.create_namespaced_service(ns, cast(Any, _head_service(cluster)))
    core.create_namespaced_pod(ns, cast(Any, _head_pod(cluster)))


def _ready(kube: KubeSimHandle, ns: str, name: str) -> bool:
    status = client.CoreV1Api(kube.api_client).read_namespaced_pod(name, ns).status
    conditions = status.conditions if status is not None else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


@contextlib.asynccontextmanager
async def namespace_with_head(kube: KubeSimHandle, cluster: str) -> AsyncIterator[str]:
    ns = f"dash-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube.api_client)
    await in_thread(lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))))
    try:
        await in_thread(_start_head, kube, ns, cluster)
        await eventually(lambda: _ready(kube, ns, f"{cluster}-head-abcde"), timeout=10, message="head ready")
        yield ns
    finally:
        await in_thread(core.delete_namespace, ns)


async def test_dashboard_commands_through_the_proxy_with_token_auth(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with namespace_with_head(kube, "c1") as ns:
        ref = DashboardRef(namespace=ns, service="c1-head-svc", port=8265, cluster="c1", auth_secret="c1")
        no_token = DashboardRef(namespace=ns, service="c1-head-svc", port=8265, cluster="c1")
        job = {"entrypoint": "KUBESIM_RUN_SECONDS=inf python job.py", "submission_id": "j1"}
        serve = {"applications": [{"name": "app", "import_path": "m:app", "route_prefix": "/"}]}
        svc = ObjectRef(api_version="v1", kind="Service", namespace=ns, name="c1-head-svc")

        def record(value: str) -> PatchObject:
            return PatchObject(target=svc, patch={"metadata": {"annotations": {f"test/{value}": value}}})

        commands = (
            SubmitRayJob(id="submit", dashboard=ref, request=job),
            SubmitRayJob(id="submit-again", dashboard=ref, request=job),
            StopRayJob(id="stop", dashboard=ref, job_id="j1"),
            StopRayJob(id="stop-unknown", dashboard=ref, job_id="nope"),
            PutServeConfig(id="serve", dashboard=ref, config=serve, record=record("recorded")),
            PutServeConfig(id="serve-refused", dashboard=ref, config={"applications": "x"}, record=record("nope")),
            SubmitRayJob(id="no-token", dashboard=no_token, request={**job, "submission_id": "j2"}),
        )
        key = ReconcileKey(kind="RayJob", namespace=ns, name="rj")
        dashboard = DashboardClient(kube_api, use_proxy=True)
        applier = Applier(bus.nc, kube_api, membership=bus.membership(), dashboard=dashboard, concurrency=2)
        try:
            stop = asyncio.Event()
            task = asyncio.create_task(applier.run(stop))
            batch = CommandBatch(id="dash-1", key=key, issued_at=NOW, commands=commands)
            await publish(bus.js, subjects.command_subject(key), codec.encode(batch), msg_id="dash-1")

            async def all_results() -> list[dict[str, Any]] | None:
                found = await bus.results(key)
                return found if len(found) == len(commands) else None

            results = await until(all_results, message="dashboard results")
            stop.set()
            await task
            answer = await dashboard.request(ref, "GET", "/api/jobs/j1")
            head_svc = await in_thread(client.CoreV1Api(kube.api_client).read_namespaced_service, "c1-head-svc", ns)
        finally:
            await dashboard.close()

    outcomes = {r["command_id"]: (r["outcome"], r["status_code"]) for r in results}
    assert outcomes == {
        "submit": ("applied", 200),
        "submit-again": ("already_done", 500),
        "stop": ("applied", 200),
        "stop-unknown": ("already_done", 404),
        "serve": ("applied", 200),
        "serve-refused": ("failed", 400),
        "no-token": ("failed", 401),
    }
    assert answer.json() is not None and answer.json()["status"] in ("STOPPED", "RUNNING")  # type: ignore[index]
    # a PUT's record is patched only after the dashboard accepted the PUT
    assert head_svc.metadata.annotations == {"test/recorded": "recorded"}
    everything = msgspec.json.encode(results).decode() + caplog.text
    assert TOKEN not in everything
    assert base64.b64encode(TOKEN.encode()).decode() not in everything


async def test_the_prober_publishes_every_change_and_only_changes(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle
) -> None:
    async with namespace_with_head(kube, "c2") as ns:
        await in_thread(create_custom, kube.api_client, ns, "rayclusters", raycluster("c2", auth=True))
        rayjob = {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "rj"},
            "spec": {"entrypoint": "python job.py", "clusterSelector": {"ray.io/cluster": "c2"}},
        }
        await in_thread(create_custom, kube.api_client, ns, "rayjobs", rayjob)
        status = {
            "status": {
                "jobDeploymentStatus": "Running",
                "jobId": "j-run",
                "rayClusterName": "c2",
                "dashboardURL": f"c2-head-svc.{ns}.svc.cluster.local:8265",
            }
        }
        await in_thread(
            lambda: client.CustomObjectsApi(kube.api_client).patch_namespaced_custom_object_status(
                "ray.io", "v1", ns, "rayjobs", "rj", status
            )
        )
        settings = watcher_settings(
            nats_server.url, str(kube.kubeconfig), ns, use_kubernetes_proxy=True, dashboard_poll_interval=0.05
        )
        key = ReconcileKey(kind="RayJob", namespace=ns, name="rj")
        async with running_watcher(settings, prober=True) as watcher:
            prober = watcher.prober
            assert prober is not None

            async def observations() -> list[dict[str, Any]]:
                return [e for e in await bus.events(key) if e["type"] == "observation"]

            first = await until(observations, message="an observation (job not found yet)")
            assert first[0]["data"]["http_status"] == 404
            assert first[0]["entry_name"] == "j-run" and first[0]["source"] == "rayjob"

            ref = DashboardRef(namespace=ns, service="c2-head-svc", port=8265, cluster="c2", auth_secret="c2")
            submitted = await watcher.dashboard.request(
                ref, "POST", "/api/jobs/", {"entrypoint": "KUBESIM_RUN_SECONDS=inf x", "submission_id": "j-run"}
            )
            assert submitted.status == 200

            async def running() -> list[dict[str, Any]] | None:
                found = await observations()
                return found if found[-1]["data"].get("status") == "RUNNING" else None

            seen = await until(running, message="the RUNNING observation")
            polls = prober.polls
            await eventually(lambda: prober.polls >= polls + 5, message="more polls")
            assert len(await observations()) == len(seen)  # nothing changed: nothing published

            entry = await bus.entry(key, OBS_RAY_JOB, "j-run")
            assert entry is not None and entry["status"] == "RUNNING"
            assert seen[-1]["kv_revision"] > 0

            await watcher.dashboard.request(ref, "POST", "/api/jobs/j-run/stop")

            async def stopped() -> bool:
                return bool((await observations())[-1]["data"].get("status") == "STOPPED")

            await until(stopped, message="the STOPPED observation")

            # Back to an answer seen before (not found): a change all the same, published and projected.
            await watcher.dashboard.request(ref, "DELETE", "/api/jobs/j-run")

            async def gone_again() -> bool:
                return bool((await observations())[-1]["data"].get("http_status") == 404)

            await until(gone_again, message="the second not-found observation")
            entry = await bus.entry(key, OBS_RAY_JOB, "j-run")
            assert entry is not None and entry.get("http_status") == 404 and "status" not in entry


async def test_serve_proxy_health_through_the_pod_proxy(kube: KubeSimHandle, kube_api: KubeApi) -> None:
    async with namespace_with_head(kube, "c3") as ns:
        pod = await in_thread(client.CoreV1Api(kube.api_client).read_namespaced_pod, "c3-head-abcde", ns)
        endpoint = PodEndpoint(
            namespace=ns, name="c3-head-abcde", uid=pod.metadata.uid, ip=pod.status.pod_ip, port=8000
        )
        dashboard = DashboardClient(kube_api, use_proxy=True)
        ref = DashboardRef(namespace=ns, service="c3-head-svc", port=8265, cluster="c3", auth_secret="c3")
        try:
            # As on Ray, the Serve proxy listens only once a Serve config PUT has started Serve.
            before = await dashboard.request_pod(endpoint, "GET", "/-/healthz")
            put = await dashboard.request(ref, "PUT", "/api/serve/applications/", {"applications": []})
            answer = await dashboard.request_pod(endpoint, "GET", "/-/healthz")
            gone = await dashboard.request_pod(
                PodEndpoint(namespace=ns, name="nope", uid="", ip="10.0.0.9", port=8000), "GET", "/-/healthz"
            )
        finally:
            await dashboard.close()
    assert (before.status, put.status) == (503, 200)
    assert (answer.status, answer.data) == (200, b"success")
    assert gone.status == 404
