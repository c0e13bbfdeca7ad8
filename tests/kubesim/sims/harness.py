"""Running simulators on kubesim's own store (in process, without its HTTP server), and small object
builders for the tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from kubesim.dashboard import SystemClock
from kubesim.hooks import Controller, Store
from kubesim.server import KubeSim
from kubesim.sims import INSTANT, SimOptions, Simulation, build_simulation
from kubesim.store import ObjectStore

FAST = replace(INSTANT, job_run_seconds=0.05, serve_deploy_seconds=0.05, submitter_poll_interval=0.02)


def object_store() -> ObjectStore:
    """kubesim's store as its server builds it (the namespaces it boots with, no CRDs, so no Gateway API);
    the server itself never listens."""
    return KubeSim().store


@contextlib.asynccontextmanager
async def running(store: Store, controllers: list[Controller]) -> AsyncIterator[None]:
    """Run controllers as tasks for the duration of the block; cancel and await them afterwards."""
    tasks = [asyncio.ensure_future(c.run(store)) for c in controllers]
    await asyncio.sleep(0)  # let every controller subscribe before the test writes
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result


@contextlib.asynccontextmanager
async def simulation(store: Store, options: SimOptions = FAST) -> AsyncIterator[Simulation]:
    """All simulators of the instant mode (with fast Ray defaults) running on ``store``."""
    sim = build_simulation("instant", options=options, clock=SystemClock())
    async with running(store, sim.controllers):
        yield sim


def pod(
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A Pod manifest."""
    spec: dict[str, Any] = {"containers": containers or [{"name": "main", "image": "busybox:1.36"}]}
    if init_containers:
        spec["initContainers"] = init_containers
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def head_pod(name: str, cluster: str, *, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
    """A Ray head pod of ``cluster`` (labels as KubeRay sets them)."""
    labels = {"ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    containers = kwargs.pop("containers", None) or [
        {
            "name": "ray-head",
            "image": "rayproject/ray:2.52.0",
            "ports": [
                {"name": "gcs-server", "containerPort": 6379},
                {"name": "dashboard", "containerPort": 8265},
                {"name": "client", "containerPort": 10001},
                {"name": "serve", "containerPort": 8000},
            ],
        }
    ]
    return pod(name, namespace=namespace, labels=labels, containers=containers, **kwargs)


def head_service(cluster: str, *, namespace: str = "default") -> dict[str, Any]:
    """KubeRay's headless head Service of ``cluster``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{cluster}-head-svc", "namespace": namespace, "labels": {"ray.io/cluster": cluster}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"ray.io/cluster": cluster, "ray.io/node-type": "head"},
            "ports": [
                {"name": "dashboard", "port": 8265, "targetPort": 8265},
                {"name": "gcs-server", "port": 6379, "targetPort": 6379},
                {"name": "serve", "port": 8000, "targetPort": "serve"},
            ],
        },
    }


def condition(obj: Mapping[str, Any] | None, kind: str) -> str | None:
    """The status of condition ``kind`` of an object, or None."""
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None


def phase(obj: Mapping[str, Any] | None) -> str | None:
    """status.phase."""
    return ((obj or {}).get("status") or {}).get("phase")
