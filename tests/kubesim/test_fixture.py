"""The fixture helpers themselves: a private server from async code, with the kubelet simulator attached."""

from __future__ import annotations

import asyncio

from kubernetes import client

from kubesim.hooks import GVR
from tests.fixtures.kubesim import KubeSimHandle, running_kubesim
from tests.helpers import eventually

PODS = GVR("", "v1", "pods")


async def test_running_kubesim_with_the_kubelet_runs_and_terminates_pods() -> None:
    async with running_kubesim(kubelet="instant") as kube:
        core = client.CoreV1Api(kube.api_client)
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        await asyncio.to_thread(core.create_namespaced_pod, "default", pod)  # type: ignore[arg-type]

        async def running() -> bool:
            read = await asyncio.to_thread(core.read_namespaced_pod, "p", "default")
            return read.status is not None and read.status.phase == "Running"

        await eventually(running, message="pod never ran")
        await asyncio.to_thread(core.delete_namespaced_pod, "p", "default")
        await eventually(lambda: kube.call(lambda: kube.sim.store.get(PODS, "default", "p")) is None)
        assert kube.sim.controller_errors == []


def test_call_runs_on_the_server_loop(kubesim_server: KubeSimHandle) -> None:
    namespaces = kubesim_server.call(lambda: kubesim_server.sim.store.list(GVR("", "v1", "namespaces")))
    assert {"default", "kube-system"} <= {ns["metadata"]["name"] for ns in namespaces}
