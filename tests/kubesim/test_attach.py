"""kubesim's simulators attached over HTTP (``kubesim.attach``, ``kubesim.remote``) to a kubesim that serves
only the API (no in-process simulator), driven through the official kubernetes client."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client, watch

from kubesim.apiclient import ApiConnection
from kubesim.attach import Attachment
from kubesim.errors import ApiError
from kubesim.hooks import GVR, StoreEvent
from kubesim.kubeconfig import write_kubeconfig
from kubesim.remote import RemoteStore
from kubesim.settings import KubeSimSettings
from kubesim.sims.annotations import HEAD_URLS
from kubesim.sims.objects import CONFIGMAPS
from kubesim.sims.podnetwork import POD_NETWORK, claim, pod_ip, pod_network_problem
from kubesim.sims.podworker import IpAllocator
from schema.ray import conventions
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, running_kubesim, start_kubesim
from tests.fixtures.nats import free_port
from tests.helpers import REPO, eventually, eventually_sync
from tests.kubesim.sims.harness import head_pod, head_service, pod

NODE = "kubesim-node"


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeSimHandle]:
    """kubesim serving the API only, with the simulators attached over HTTP on this test's loop."""
    async with running_kubesim(crd_paths=default_crd_paths(), workdir=tmp_path) as handle:
        attachment = Attachment(ApiConnection.from_kubeconfig(str(handle.kubeconfig)))
        async with attachment:
            yield handle
        assert not attachment.errors, attachment.errors


async def _namespace(kube: KubeSimHandle) -> str:
    name = f"attach-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube.api_client)
    await asyncio.to_thread(core.create_namespace, client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def _condition(obj: Any, kind: str) -> str | None:
    for condition in obj.status.conditions or []:
        if condition.type == kind:
            return str(condition.status)
    return None


def _node_and_phase(found: client.V1Pod) -> tuple[str | None, str | None]:
    assert found.spec is not None and found.status is not None
    return found.spec.node_name, found.status.phase


async def _ready_pod(core: client.CoreV1Api, namespace: str, name: str) -> Any:
    def probe() -> Any:
        found = core.read_namespaced_pod(name, namespace)
        running = found.status is not None and found.status.phase == "Running"
        return found if running and _condition(found, "Ready") == "True" else None

    return await eventually(lambda: asyncio.to_thread(probe), message=f"pod {name} never Running and Ready")


async def test_a_pod_is_bound_to_the_registered_node_started_and_ready(kube: KubeSimHandle) -> None:
    core = client.CoreV1Api(kube.api_client)
    namespace = await _namespace(kube)
    await asyncio.to_thread(core.create_namespaced_pod, namespace, pod("web", namespace=namespace))  # type: ignore[arg-type]

    ready = await _ready_pod(core, namespace, "web")

    assert ready.spec.node_name == NODE
    assert _condition(ready, "PodScheduled") == "True"
    assert ready.status.pod_ip and ready.status.host_ip
    assert [c.ready for c in ready.status.container_statuses] == [True]
    node = await asyncio.to_thread(core.read_node, NODE)
    assert _condition(node, "Ready") == "True"


async def test_a_batch_job_completes(kube: KubeSimHandle) -> None:
    batch = client.BatchV1Api(kube.api_client)
    namespace = await _namespace(kube)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }
    await asyncio.to_thread(batch.create_namespaced_job, namespace, job)  # type: ignore[arg-type]

    def complete() -> Any:
        found = batch.read_namespaced_job("once", namespace)
        return found if _condition(found, "Complete") == "True" else None

    done = await eventually(lambda: asyncio.to_thread(complete), message="the Job never completed")

    assert done.status.succeeded == 1
    pods = await asyncio.to_thread(client.CoreV1Api(kube.api_client).list_namespaced_pod, namespace)
    assert [_node_and_phase(p) for p in pods.items] == [(NODE, "Succeeded")]


async def test_a_deleted_pod_terminates_gracefully_then_goes(kube: KubeSimHandle) -> None:
    core = client.CoreV1Api(kube.api_client)
    namespace = await _namespace(kube)
    await asyncio.to_thread(core.create_namespaced_pod, namespace, pod("doomed", namespace=namespace))  # type: ignore[arg-type]
    ready = await _ready_pod(core, namespace, "doomed")

    def events_until_deleted() -> list[tuple[str, bool]]:
        seen: list[tuple[str, bool]] = []
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(  # type: ignore[no-untyped-call]
            core.list_namespaced_pod, namespace, resource_version=ready.metadata.resource_version, timeout_seconds=60
        ):
            seen.append((event["type"], event["object"].metadata.deletion_timestamp is not None))
            if event["type"] == "DELETED":
                stream.stop()  # type: ignore[no-untyped-call]
        return seen

    watching = asyncio.ensure_future(asyncio.to_thread(events_until_deleted))
    await asyncio.to_thread(core.delete_namespaced_pod, "doomed", namespace)
    seen = await watching

    # The API server only marks the bound Pod terminating; the attached kubelet finishes the deletion.
    assert seen[-1] == ("DELETED", True)
    assert ("MODIFIED", True) in seen
    with pytest.raises(client.ApiException) as gone:
        await asyncio.to_thread(core.read_namespaced_pod, "doomed", namespace)
    assert gone.value.status == 404


async def test_a_head_pod_records_where_its_dashboard_answers(kube: KubeSimHandle) -> None:
    core = client.CoreV1Api(kube.api_client)
    namespace = await _namespace(kube)
    await asyncio.to_thread(core.create_namespaced_service, namespace, head_service("raycluster", namespace=namespace))  # type: ignore[arg-type]
    await asyncio.to_thread(core.create_namespaced_pod, namespace, head_pod("head", "raycluster", namespace=namespace))  # type: ignore[arg-type]
    ready = await _ready_pod(core, namespace, "head")

    def urls() -> dict[str, str] | None:
        metadata = core.read_namespaced_pod("head", namespace).metadata
        assert metadata is not None
        annotations = metadata.annotations or {}
        return json.loads(annotations[HEAD_URLS]) if HEAD_URLS in annotations else None

    recorded = await eventually(lambda: asyncio.to_thread(urls), message="no head URLs on the head pod")
    assert recorded  # a truthy answer: the URLs

    async with aiohttp.ClientSession() as session, session.get(recorded["8265"] + "/api/gcs_healthz") as answer:
        assert answer.status == 200
    assert "52365" in recorded
    # kubesim serving without simulators of its own proxies to the head its Pod recorded, as raybus calls it.
    through_proxy = await asyncio.to_thread(
        core.connect_get_namespaced_service_proxy_with_path, "raycluster-head-svc:8265", namespace, "api/gcs_healthz"
    )
    assert through_proxy == "success"

    discovery = client.DiscoveryV1Api(kube.api_client)

    def endpoints() -> list[str]:
        slices = discovery.list_namespaced_endpoint_slice(namespace).items
        return [address for s in slices for e in s.endpoints or [] for address in e.addresses]

    assert await eventually(lambda: asyncio.to_thread(endpoints)) == [ready.status.pod_ip]


async def test_heads_on_pod_ips_listen_on_the_pod_ip_and_the_real_ports(tmp_path: Path) -> None:
    """With the Pod network local to the machine (scripts/provision adds its route), a head answers on its
    Pod's IP and the ports its container names, where a real API server's proxies dial."""
    problem = pod_network_problem()
    assert problem is None, problem
    async with running_kubesim(crd_paths=default_crd_paths(), workdir=tmp_path) as kube:
        attachment = Attachment(ApiConnection.from_kubeconfig(str(kube.kubeconfig)), heads_on_pod_ips=True)
        async with attachment:
            core = client.CoreV1Api(kube.api_client)
            namespace = await _namespace(kube)
            containers = [
                {
                    "name": "ray-head",
                    "image": "rayproject/ray:2.52.0",
                    "ports": [{"name": "dashboard", "containerPort": 8266}, {"name": "serve", "containerPort": 9000}],
                }
            ]
            body = head_pod("head", "raycluster", namespace=namespace, containers=containers)
            await asyncio.to_thread(core.create_namespaced_pod, namespace, body)  # type: ignore[arg-type]
            ip = (await _ready_pod(core, namespace, "head")).status.pod_ip
            assert ipaddress.ip_address(ip) in POD_NETWORK
            async with aiohttp.ClientSession() as session:
                for port, path in (
                    (8266, "/api/gcs_healthz"),
                    (conventions.DEFAULT_DASHBOARD_AGENT_PORT, "/api/healthz"),
                ):
                    async with session.get(f"http://{ip}:{port}{path}") as answer:
                        assert answer.status == 200, port
        assert not attachment.errors, attachment.errors


def test_two_simulators_of_one_machine_never_give_out_the_same_pod_ip() -> None:
    first, second = IpAllocator(claim=True), IpAllocator(claim=True)
    try:
        given = [first.allocate() for _ in range(3)]
        assert not set(given) & {second.allocate() for _ in range(3)}
        first.release(given[0])
        taken = claim(given[0])  # released: another simulator may take it
        assert taken is not None
        taken.close()
    finally:
        first.release_all()
        second.release_all()


def test_provision_routes_the_pod_network_kubesim_allocates_from() -> None:
    assert f"pod_network={POD_NETWORK}" in (REPO / "scripts" / "provision").read_text()
    assert {ipaddress.ip_address(pod_ip(n)) in POD_NETWORK for n in (1, 250, 60_000)} == {True}
    with pytest.raises(ValueError, match="no address left"):
        pod_ip(70_000)


async def test_simulators_attached_before_the_api_server_answers_catch_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    kubeconfig = write_kubeconfig(tmp_path / "early.kubeconfig", f"http://127.0.0.1:{port}")
    attachment = Attachment(ApiConnection.from_kubeconfig(str(kubeconfig)))
    await attachment.start()
    try:
        await eventually(
            lambda: any("cannot register node" in r.getMessage() for r in caplog.records),
            message="the kubelet never tried to register",
        )
        settings = KubeSimSettings(port=port)
        async with running_kubesim(settings=settings, workdir=tmp_path / "late") as kube:
            try:
                core = client.CoreV1Api(kube.api_client)
                await asyncio.to_thread(core.create_namespaced_pod, "default", pod("late"))  # type: ignore[arg-type]
                assert (await _ready_pod(core, "default", "late")).spec.node_name == NODE
            finally:
                await attachment.stop()
    finally:
        await attachment.stop()
    assert not attachment.errors, attachment.errors


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


async def _next(events: AsyncIterator[StoreEvent]) -> tuple[str, str]:
    event = await asyncio.wait_for(anext(events), timeout=60)
    return event.type, str(event.object["metadata"]["name"])


async def test_the_remote_store_relists_after_410_and_delivers_what_it_missed(tmp_path: Path) -> None:
    async with running_kubesim(settings=KubeSimSettings(event_window=3), workdir=tmp_path) as kube:
        store = RemoteStore(ApiConnection.from_kubeconfig(str(kube.kubeconfig)))
        try:
            events = store.subscribe([CONFIGMAPS])
            assert store.list(CONFIGMAPS, "default") == []
            store.create(CONFIGMAPS, _configmap("first"))
            assert await _next(events) == ("ADDED", "first")

            # End the store's watch while this loop (the store's) is held: every write below then lands
            # before the store can resume, more of them than the server keeps, so resuming gets 410 Gone.
            kube.call(kube.sim.end_watches)
            while kube.call(lambda: kube.sim.open_watches):
                pass
            for index in range(5):
                store.create(CONFIGMAPS, _configmap(f"gap-{index}"))
            store.delete(CONFIGMAPS, "default", "first")
            assert store.get(CONFIGMAPS, "default", "gap-4") is not None  # a write's answer is read back at once

            missed = [await _next(events) for _ in range(6)]
            assert missed == [*[("ADDED", f"gap-{i}") for i in range(5)], ("DELETED", "first")]
            await eventually(lambda: store.get(CONFIGMAPS, "default", "first") is None)
            assert [m["metadata"]["name"] for m in store.list(CONFIGMAPS)] == [f"gap-{i}" for i in range(5)]

            store.create(CONFIGMAPS, _configmap("after"))
            assert await _next(events) == ("ADDED", "after")
        finally:
            await store.close()


async def test_the_remote_store_reports_api_errors_with_their_http_code(tmp_path: Path) -> None:
    async with running_kubesim(workdir=tmp_path) as kube:
        store = RemoteStore(ApiConnection.from_kubeconfig(str(kube.kubeconfig)))
        try:
            store.create(CONFIGMAPS, _configmap("taken"))
            with pytest.raises(ApiError) as exists:
                store.create(CONFIGMAPS, _configmap("taken"))
            assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
            with pytest.raises(ApiError) as unknown:
                store.get(GVR("example.test", "v1", "widgets"), "default", "w")
            assert unknown.value.code == 404
            with pytest.raises(ApiError) as missing:
                store.delete(CONFIGMAPS, "default", "absent")
            assert missing.value.code == 404
            stale = {**_configmap("taken"), "data": {"k": "v"}}
            stale["metadata"]["resourceVersion"] = "1"
            with pytest.raises(ApiError) as conflict:
                store.update(CONFIGMAPS, stale)
            assert conflict.value.code == 409
        finally:
            await store.close()


def test_attach_command_runs_the_simulators_until_sigterm(tmp_path: Path) -> None:
    kube = start_kubesim(workdir=tmp_path)
    cmd = [sys.executable, "-m", "kubesim", "attach", "--kubeconfig", str(kube.kubeconfig), "--without", "gateways"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        core = client.CoreV1Api(kube.api_client)
        core.create_namespaced_pod("default", pod("cli-pod"))  # type: ignore[arg-type]

        def running() -> bool:
            status = core.read_namespaced_pod("cli-pod", "default").status
            return status is not None and status.phase == "Running"

        eventually_sync(running, timeout=60, message="the attached kubelet never ran the pod")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out.decode()
        assert b"kubesim attached to" in out and b"kubesim detached" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        kube.close()
