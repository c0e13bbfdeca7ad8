"""The simulators inside a real kubesim server, driven through the official kubernetes client."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from kubernetes import client

from kubesim import spdy
from kubesim.portforward import PROTOCOL
from kubesim.sims import Simulation, build_simulation
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, start_kubesim
from tests.helpers import conformance_dir, eventually
from tests.kubesim.sims.harness import head_pod, head_service, pod
from tests.kubesim.test_kubectl import kubectl_binary

A = "kubesim.raybus.io/"


@pytest.fixture(scope="module")
def simulation() -> Simulation:
    """The instant-mode simulators, built here so tests can reach the dashboards registry directly."""
    return build_simulation("instant")


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, simulation: Simulation) -> Iterator[KubeSimHandle]:
    """A kubesim with the instant simulators and the Gateway API CRDs."""
    handle = start_kubesim(
        crd_paths=[*default_crd_paths(), conformance_dir() / "gateway-api"],
        workdir=tmp_path_factory.mktemp("kubesim-sims"),
        controllers=simulation.controllers,
        proxy_resolvers=simulation.resolvers,
    )
    try:
        yield handle
        assert not handle.sim.controller_errors, handle.sim.controller_errors
    finally:
        handle.close()


@pytest.fixture
def ns(kube: KubeSimHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace."""
    import secrets

    name = f"sims-{request.node.name[5:30].replace('_', '-').strip('-')}-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube.api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def _core(kube: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kube.api_client)


def _pod_status(core: client.CoreV1Api, ns: str, name: str) -> client.V1PodStatus:
    """The pod's status; an AssertionError while it has none (``eventually`` takes it for "not yet")."""
    status = core.read_namespaced_pod(name, ns).status
    assert status is not None
    return status


def _exit_code(status: client.V1PodStatus) -> int | None:
    """The exit code of the pod's first container, None before it terminated."""
    state = (status.container_statuses or [])[0].state
    return state.terminated.exit_code if state is not None and state.terminated is not None else None


def _create_pod(core: client.CoreV1Api, ns: str, manifest: dict[str, Any]) -> None:
    """Create a pod from its manifest (the client declares a V1Pod, and sends a plain dict as it is)."""
    core.create_namespaced_pod(ns, manifest)  # type: ignore[arg-type]


def _create_service(core: client.CoreV1Api, ns: str, manifest: dict[str, Any]) -> None:
    """Create a Service from its manifest, as :func:`_create_pod`."""
    core.create_namespaced_service(ns, manifest)  # type: ignore[arg-type]


def _complete(batch: client.BatchV1Api, ns: str, name: str) -> client.V1JobStatus | None:
    """The status of the Job once it is Complete, else None."""
    status = batch.read_namespaced_job(name, ns).status
    conditions = status.conditions if status is not None else None
    return status if conditions and any(c.type == "Complete" and c.status == "True" for c in conditions) else None


def _ready(kube: KubeSimHandle, ns: str, name: str) -> bool:
    status = _pod_status(_core(kube), ns, name)
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


async def _proxy(kube: KubeSimHandle, path: str, *, method: str = "GET", body: Any = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.request(method, f"{kube.url}{path}", json=body) as response:
        return response.status, await response.text()


def _get(kube: KubeSimHandle, path: str) -> str:
    """GET through the API server (the client's connect_* helpers encode "/" in the proxied path)."""
    response = kube.api_client.rest_client.pool_manager.request("GET", f"{kube.url}{path}")
    assert response.status == 200, (path, response.status, response.data)
    return str(response.data.decode())


def _job_script(address: str, job_id: str, entrypoint: str) -> str:
    """KubeRay's K8sJobMode submitter script (docs/behaviour.md#5.3), as the operator renders it."""
    health = (
        'python -c "import sys, urllib.request; r=urllib.request.urlopen(sys.argv[1], timeout=10); '
        f'exit(0 if b\'success\' in r.read() else 1)" "{address}/api/gcs_healthz"'
    )
    return (
        f'until {health} >/dev/null 2>&1 ; do echo "Waiting for Ray Dashboard GCS to become healthy at {address} ..." '
        f"; sleep 2 ; done ; if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then ray job submit "
        f'--address {address} --no-wait --runtime-env-json "{{\\"pip\\":[\\"requests\\"]}}" --submission-id {job_id} '
        f"-- {entrypoint} ; fi ; ray job logs --address {address} --follow {job_id}"
    )


def _submitter_job(ns: str, name: str, *, script: str, backoff_limit: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/created-by": "kuberay-operator"}},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"ray.io/originated-from-cr-name": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": "rayproject/ray:2.52.0",
                            "command": ["/bin/bash", "-ce", "--"],
                            "args": [script],
                        }
                    ],
                },
            },
        },
    }


async def _start_cluster(kube: KubeSimHandle, ns: str, cluster: str) -> None:
    _create_service(_core(kube), ns, head_service(cluster, namespace=ns))
    _create_pod(_core(kube), ns, head_pod(f"{cluster}-head-x1y2z", cluster, namespace=ns))
    await eventually(lambda: _ready(kube, ns, f"{cluster}-head-x1y2z"), timeout=10)


async def test_head_dashboard_through_service_proxy(kube: KubeSimHandle, simulation: Simulation, ns: str) -> None:
    await _start_cluster(kube, ns, "rc")
    core = _core(kube)
    assert (
        core.connect_get_namespaced_service_proxy_with_path("rc-head-svc:dashboard", ns, "api/gcs_healthz") == "success"
    )
    base = f"/api/v1/namespaces/{ns}/services/rc-head-svc:dashboard/proxy"
    status, _ = await _proxy(
        kube, f"{base}/api/jobs/", method="POST", body={"entrypoint": "echo", "submission_id": "j1"}
    )
    assert status == 200
    await eventually(
        lambda: "SUCCEEDED"
        in core.connect_get_namespaced_service_proxy_with_path("rc-head-svc:8265", ns, "api/jobs/j1"),
        timeout=10,
    )
    status, _ = await _proxy(kube, f"{base}/api/jobs/nope")
    assert status == 404
    # The pod proxy reaches the serve proxy health of the head once Serve runs.
    status, _ = await _proxy(kube, f"{base}/api/serve/applications/", method="PUT", body={"applications": []})
    assert status == 200
    assert core.connect_get_namespaced_pod_proxy_with_path("rc-head-x1y2z:8000", ns, "-/healthz") == "success"
    # And the same dashboard listens on a loopback port of its own.
    assert simulation.dashboards is not None
    url = simulation.dashboards.dashboard_url(ns, "rc")
    assert url is not None
    async with aiohttp.ClientSession() as session, session.get(f"{url}/api/jobs/j1") as response:
        assert (await response.json())["status"] == "SUCCEEDED"


async def test_failure_annotations(kube: KubeSimHandle, ns: str) -> None:
    core = _core(kube)
    _create_pod(
        core,
        ns,
        pod(
            "dies",
            namespace=ns,
            annotations={A + "fail-after-seconds": "0.05", A + "exit-code": "7"},
            restart_policy="Never",
        ),
    )
    _create_pod(core, ns, pod("stuck", namespace=ns, annotations={A + "stay-pending": "true"}))
    await eventually(lambda: _pod_status(core, ns, "dies").phase == "Failed", timeout=10)
    assert _exit_code(_pod_status(core, ns, "dies")) == 7
    stuck = await eventually(lambda: s if (s := _pod_status(core, ns, "stuck")).conditions else None, timeout=10)
    assert stuck is not None and stuck.conditions
    assert stuck.phase == "Pending"
    assert stuck.conditions[0].reason == "Unschedulable"
    # Deleting a running pod goes through graceful termination and then the pod is gone.
    core.delete_namespaced_pod("stuck", ns)


async def test_batch_job_with_kuberay_submitter_succeeds(kube: KubeSimHandle, ns: str) -> None:
    await _start_cluster(kube, ns, "rc")
    address = f"http://rc-head-svc.{ns}.svc.cluster.local:8265"
    script = _job_script(address, "rayjob-abcde", "python /home/ray/samples/sample_code.py")
    batch = client.BatchV1Api(kube.api_client)
    batch.create_namespaced_job(ns, _submitter_job(ns, "rayjob", script=script))  # type: ignore[arg-type]
    job = await eventually(lambda: _complete(batch, ns, "rayjob"), timeout=15)
    assert job is not None
    assert job.succeeded == 1
    assert job.completion_time is not None
    pods = _core(kube).list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=rayjob").items
    assert len(pods) == 1
    metadata, status = pods[0].metadata, pods[0].status
    assert metadata is not None and status is not None
    assert metadata.name is not None and metadata.name.startswith("rayjob-")
    assert metadata.owner_references and metadata.owner_references[0].kind == "Job"
    assert status.phase == "Succeeded"
    assert _exit_code(status) == 0
    info = _get(kube, f"/api/v1/namespaces/{ns}/services/rc-head-svc:dashboard/proxy/api/jobs/rayjob-abcde")
    assert '"SUCCEEDED"' in info
    assert '"requests"' in info  # the runtime env made it through the script


async def test_batch_job_following_a_failed_ray_job_completes(kube: KubeSimHandle, ns: str) -> None:
    """KubeRay's script ends with ``ray job logs --follow``, which exits 0 whatever the job's end: a failed
    Ray job leaves the submitter Job Complete (the RayJob fails through the dashboard, as on Ray)."""
    await _start_cluster(kube, ns, "rc")
    address = f"http://rc-head-svc.{ns}.svc.cluster.local:8265"
    script = _job_script(address, "failing-1", "KUBESIM_EXIT_CODE=1 python main.py")
    batch = client.BatchV1Api(kube.api_client)
    submitter = _submitter_job(ns, "failing", script=script, backoff_limit=1)
    batch.create_namespaced_job(ns, submitter)  # type: ignore[arg-type]
    job = await eventually(lambda: _complete(batch, ns, "failing"), timeout=15)
    assert job is not None
    assert (job.succeeded, job.failed) == (1, None)
    jobs = _get(kube, f"/api/v1/namespaces/{ns}/services/rc-head-svc:dashboard/proxy/api/jobs/")
    assert jobs.count('"failing-1"') == 1
    assert '"FAILED"' in jobs


async def test_sidecar_submitter_in_head_pod(kube: KubeSimHandle, ns: str) -> None:
    address = "http://127.0.0.1:8265"
    sidecar = {
        "name": "ray-job-submitter",
        "image": "rayproject/ray:2.52.0",
        "command": ["/bin/bash", "-ce", "--"],
        "args": [
            f"until true ; do sleep 2 ; done ; ray job submit --address {address} --submission-id side-1 -- echo hi ;"
        ],
    }
    head = head_pod("side-head", "side", namespace=ns)
    head["spec"]["containers"].append(sidecar)
    head["spec"]["restartPolicy"] = "Never"
    core = _core(kube)
    _create_pod(core, ns, head)

    def submitter_exit() -> int | None:
        statuses = _pod_status(core, ns, "side-head").container_statuses or []
        state = next((s.state for s in statuses if s.name == "ray-job-submitter"), None)
        return state.terminated.exit_code if state and state.terminated else None

    assert await eventually(lambda: submitter_exit() == 0, timeout=10)
    assert _pod_status(core, ns, "side-head").phase == "Running"


def _slice(kube: KubeSimHandle, ns: str, service: str) -> Any:
    slices = (
        client.DiscoveryV1Api(kube.api_client)
        .list_namespaced_endpoint_slice(ns, label_selector=f"kubernetes.io/service-name={service}")
        .items
    )
    return slices[0] if slices else None


async def test_endpoint_slices_follow_readiness(kube: KubeSimHandle, ns: str) -> None:
    core = _core(kube)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    _create_service(core, ns, service)
    container = {"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}
    _create_pod(
        core,
        ns,
        pod(
            "web-1",
            namespace=ns,
            labels={"app": "web"},
            annotations={A + "never-ready": "true"},
            containers=[container],
        ),
    )
    first = await eventually(lambda: (s := _slice(kube, ns, "web")) and s.endpoints and s, timeout=10)
    (endpoint,) = first.endpoints
    assert endpoint.conditions.ready is False
    assert endpoint.target_ref.name == "web-1"
    assert first.ports[0].port == 8080
    core.patch_namespaced_pod("web-1", ns, {"metadata": {"annotations": {A + "never-ready": "false"}}})
    await eventually(lambda: _slice(kube, ns, "web").endpoints[0].conditions.ready is True, timeout=10)
    core.delete_namespaced_pod("web-1", ns)
    await eventually(lambda: not _slice(kube, ns, "web").endpoints, timeout=10)


async def test_gateway_and_httproute_status(kube: KubeSimHandle, ns: str) -> None:
    custom = client.CustomObjectsApi(kube.api_client)
    group, version = "gateway.networking.k8s.io", "v1"
    gateway = {
        "apiVersion": f"{group}/{version}",
        "kind": "Gateway",
        "metadata": {"name": "rs-gateway", "namespace": ns},
        "spec": {"gatewayClassName": "istio", "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]},
    }
    route = {
        "apiVersion": f"{group}/{version}",
        "kind": "HTTPRoute",
        "metadata": {"name": "rs-httproute", "namespace": ns},
        "spec": {
            "parentRefs": [{"name": "rs-gateway", "namespace": ns}],
            "rules": [{"backendRefs": [{"name": "rc-serve-svc", "port": 8000, "weight": 100}]}],
        },
    }
    custom.create_namespaced_custom_object(group, version, ns, "gateways", gateway)
    custom.create_namespaced_custom_object(group, version, ns, "httproutes", route)

    def read(plural: str, name: str) -> dict[str, Any]:
        # The client declares an object; a custom object comes back as its JSON.
        return cast(dict[str, Any], custom.get_namespaced_custom_object(group, version, ns, plural, name))

    def conditions(plural: str, name: str) -> dict[str, str]:
        status = read(plural, name).get("status") or {}
        found = status.get("conditions") or [c for p in status.get("parents") or [] for c in p.get("conditions") or []]
        return {c["type"]: c["status"] for c in found}

    await eventually(
        lambda: conditions("gateways", "rs-gateway") == {"Accepted": "True", "Programmed": "True"}, timeout=10
    )
    gw = read("gateways", "rs-gateway")
    assert gw["status"]["addresses"][0]["value"]
    assert gw["status"]["conditions"][0]["observedGeneration"] == gw["metadata"]["generation"]
    await eventually(
        lambda: conditions("httproutes", "rs-httproute") == {"Accepted": "True", "ResolvedRefs": "False"}, timeout=10
    )
    _create_service(
        _core(kube),
        ns,
        {"metadata": {"name": "rc-serve-svc"}, "spec": {"selector": {"x": "y"}, "ports": [{"port": 8000}]}},
    )
    await eventually(
        lambda: conditions("httproutes", "rs-httproute") == {"Accepted": "True", "ResolvedRefs": "True"}, timeout=10
    )
    await eventually(
        lambda: read("gateways", "rs-gateway")["status"]["listeners"][0]["attachedRoutes"] == 1,
        timeout=10,
    )
    await asyncio.sleep(0)


async def test_token_auth_and_serve_through_the_proxy(kube: KubeSimHandle, ns: str) -> None:
    core = _core(kube)
    secret = {"metadata": {"name": "auth-rc"}, "stringData": {"auth_token": "tok-1"}}
    core.create_namespaced_secret(ns, secret)  # type: ignore[arg-type]
    head = head_pod("auth-rc-head", "auth-rc", namespace=ns)
    head["spec"]["containers"][0]["env"] = [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "auth-rc", "key": "auth_token"}}},
    ]
    _create_service(core, ns, head_service("auth-rc", namespace=ns))
    _create_pod(core, ns, head)
    await eventually(lambda: _ready(kube, ns, "auth-rc-head"), timeout=10)
    base = f"/api/v1/namespaces/{ns}/services/auth-rc-head-svc:dashboard/proxy/api/serve/applications/"
    status, _ = await _proxy(kube, base)
    assert status == 401

    config = {"applications": [{"name": "app", "import_path": "m.app", "route_prefix": "/app"}]}
    headers = {"x-ray-authorization": "Bearer tok-1"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.put(f"{kube.url}{base}", json=config) as response:
            assert response.status == 200

        async def app_status() -> str:
            async with session.get(f"{kube.url}{base}?api_type=declarative") as response:
                assert response.status == 200
                body = await response.json()
                return str(body["applications"]["app"]["status"])

        async def app_running() -> bool:
            return await app_status() == "RUNNING"

        assert await app_status() in ("DEPLOYING", "RUNNING")
        await eventually(app_running, timeout=10)
    # The serve proxy (not covered by token auth) answers through the pod proxy on the serve port.
    assert _get(kube, f"/api/v1/namespaces/{ns}/pods/auth-rc-head:serve/proxy/-/healthz") == "success"
    assert _get(kube, f"/api/v1/namespaces/{ns}/services/auth-rc-head-svc:serve/proxy/app/hello").startswith(
        "kubesim serve application app"
    )


@pytest.mark.parametrize("target", ["pod/pf-head-x1y2z", "svc/pf-head-svc"])
async def test_kubectl_port_forward_reaches_the_head_dashboard(
    kube: KubeSimHandle, ns: str, target: str, tmp_path: Path
) -> None:
    await _start_cluster(kube, ns, "pf")
    cmd = [kubectl_binary(), "--kubeconfig", str(kube.kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    forward = await asyncio.create_subprocess_exec(
        *cmd, "-n", ns, "port-forward", target, ":8265", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert forward.stdout is not None and forward.stderr is not None
        line = (await forward.stdout.readline()).decode()
        if not line.startswith("Forwarding from 127.0.0.1:"):
            forward.kill()
            pytest.fail(f"kubectl port-forward did not start: {line!r} {(await forward.stderr.read()).decode()}")
        local = int(line.split("127.0.0.1:")[1].split()[0])
        for _ in range(2):  # each request is a fresh forwarded connection on the same tunnel
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{local}/api/version") as response,
            ):
                assert response.status == 200
                assert (await response.json())["ray_commit"] == "kubesim"
    finally:
        if forward.returncode is None:
            forward.terminate()
        await forward.wait()


async def test_kubectl_port_forward_to_a_closed_port_reports_why(kube: KubeSimHandle, ns: str, tmp_path: Path) -> None:
    await _start_cluster(kube, ns, "pf")
    cmd = [kubectl_binary(), "--kubeconfig", str(kube.kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    forward = await asyncio.create_subprocess_exec(
        *cmd,
        "-n",
        ns,
        "port-forward",
        "pod/pf-head-x1y2z",
        ":6379",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert forward.stdout is not None and forward.stderr is not None
        line = (await forward.stdout.readline()).decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        reader, writer = await asyncio.open_connection("127.0.0.1", int(line.split("127.0.0.1:")[1].split()[0]))
        writer.write(b"PING\r\n")
        try:
            answer = await reader.read()
        except ConnectionResetError:
            answer = b""  # kubectl closed the tunnel with our bytes unread, so the kernel reset it
        assert answer == b""
        writer.close()
        # Like a kubelet refusing the connection, the error ends kubectl's tunnel.
        assert await forward.wait() == 1
        assert "error forwarding port 6379 to pod pf-head-x1y2z" in (await forward.stderr.read()).decode()
    finally:
        if forward.returncode is None:
            forward.terminate()
            await forward.wait()


async def test_port_forward_rejects_bad_requests_and_frames(kube: KubeSimHandle, ns: str) -> None:
    await _start_cluster(kube, ns, "pf")
    base = f"{kube.url}/api/v1/namespaces/{ns}/pods"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/pf-head-x1y2z/portforward") as response:
            assert response.status == 400
            assert (await response.json())["message"] == "Upgrade request required"
        async with session.get(f"{base}/nope/portforward") as response:
            assert response.status == 404
        hostile = [
            struct.pack(">HHI", 0x8002, spdy.PING, 4) + b"\0\0\0\1",  # SPDY/2
            spdy.control(spdy.SYN_STREAM, 0, struct.pack(">IIH", 1, 0, 0) + b"not zlib"),
        ]
        for frame in hostile:
            async with session.ws_connect(f"{base}/pf-head-x1y2z/portforward", protocols=[PROTOCOL]) as ws:
                assert ws.protocol == PROTOCOL
                await ws.send_bytes(frame)
                assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        # A stream without the port-forward headers is refused on its own; the connection stays usable.
        async with session.ws_connect(f"{base}/pf-head-x1y2z/portforward", protocols=[PROTOCOL]) as ws:
            block = zlib.compressobj(zdict=spdy.DICTIONARY)
            headers = block.compress(struct.pack(">I", 0)) + block.flush(zlib.Z_SYNC_FLUSH)
            await ws.send_bytes(spdy.control(spdy.SYN_STREAM, 0, struct.pack(">IIH", 1, 0, 0) + headers))
            await ws.send_bytes(spdy.control(spdy.PING, 0, b"\0\0\0\1"))
            received = bytearray((await ws.receive_bytes()) + (await ws.receive_bytes()))
            first, second = spdy.take_frame(received), spdy.take_frame(received)
            assert first == spdy.ControlFrame(spdy.RST_STREAM, 0, struct.pack(">II", 1, spdy.PROTOCOL_ERROR))
            assert second == spdy.ControlFrame(spdy.PING, 0, b"\0\0\0\1")
