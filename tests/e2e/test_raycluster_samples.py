"""KubeRay's own RayCluster samples through the whole pipeline (the samples docs/behaviour.md#10 marks [C]).

Each sample's documents are applied unchanged (only a per-test namespace is set) and the cluster must
reach ``state: ready`` with HeadPodReady and RayClusterProvisioned True and the sum of replicas times numOfHosts
workers, like KubeRay's own sample e2e tests. One pipeline serves every sample.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client, dynamic

from tests.e2e.pipeline import Pipeline, load_yaml_docs, running_pipeline
from tests.e2e.test_pipeline import GROUP, PLURAL, VERSION
from tests.helpers import eventually, samples_dir
from tests.kubeobjects import meta

CONFORMANCE = [
    "ray-cluster.sample.yaml",
    "ray-cluster.complete.yaml",
    "ray-cluster.autoscaler.yaml",
    "ray-cluster.autoscaler-v2.yaml",
    "ray-cluster.autoscaler-v2-overwrite-cmd.yaml",
    "ray-cluster-label-selector.yaml",
    "ray-cluster.custom-head-service.yaml",
    "ray-cluster.head-command.yaml",
    "ray-cluster.overwrite-command.yaml",
    "ray-cluster.separate-ingress.yaml",
    "ray-cluster.embed-grafana.yaml",
    "ray-cluster.py-spy.yaml",
    "ray-cluster.fluentbit.yaml",
    "ray-cluster.auth.yaml",
    "ray-cluster.auth.secret-ref.yaml",
]


@pytest.fixture
async def pipeline(tmp_path: Path) -> AsyncIterator[Pipeline]:
    async with running_pipeline(tmp_path) as p:
        yield p


def apply_sample(p: Pipeline, sample: str, namespace: str) -> dict[str, Any]:
    """Apply every document of a sample into ``namespace``; return the RayCluster document."""
    client.CoreV1Api(p.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    dyn = dynamic.DynamicClient(p.api)  # type: ignore[no-untyped-call]
    cluster: dict[str, Any] = {}
    for doc in load_yaml_docs(samples_dir() / sample):
        doc.setdefault("metadata", {})["namespace"] = namespace
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(body=doc, namespace=namespace)
        if doc["kind"] == "RayCluster":
            cluster = doc
    return cluster


def expected_workers(cluster: dict[str, Any]) -> int:
    total = 0
    for group in cluster["spec"].get("workerGroupSpecs", []):
        replicas = group.get("replicas", 0)
        replicas = max(group.get("minReplicas", 0), min(replicas, group.get("maxReplicas", 2**31 - 1)))
        total += replicas * group.get("numOfHosts", 1)
    return total


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions", [])}


async def test_every_conformance_sample_becomes_ready(pipeline: Pipeline) -> None:
    p = pipeline
    clusters: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, sample in enumerate(CONFORMANCE):
        namespace = f"sample-{i}"
        clusters[sample] = (namespace, await asyncio.to_thread(apply_sample, p, sample, namespace))

    async def status_of(sample: str) -> dict[str, Any]:
        namespace, body = clusters[sample]
        obj = await asyncio.to_thread(
            p.custom().get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"]
        )
        return cast(dict[str, Any], obj).get("status") or {}

    async def all_ready() -> bool:
        p.check()
        states = {s: (await status_of(s)).get("state") for s in CONFORMANCE}
        return all(state == "ready" for state in states.values())

    try:
        await eventually(all_ready, timeout=120, interval=0.5)
    except AssertionError:
        laggards = {s: (await status_of(s)).get("state") for s in CONFORMANCE}
        raise AssertionError(f"not ready: { {s: v for s, v in laggards.items() if v != 'ready'} }") from None
    for sample in CONFORMANCE:
        namespace, body = clusters[sample]
        status = await status_of(sample)
        want = expected_workers(body)
        assert conditions(status).get("HeadPodReady") == "True", sample
        assert conditions(status).get("RayClusterProvisioned") == "True", sample
        assert status.get("desiredWorkerReplicas", 0) == want, sample
        assert status.get("readyWorkerReplicas", 0) == want, sample
        pods = await asyncio.to_thread(
            p.core().list_namespaced_pod, namespace, label_selector=f"ray.io/cluster={body['metadata']['name']}"
        )
        assert len(pods.items) == want + 1, sample
    assert await p.denials() == []


async def test_multi_host_group_gets_its_pods_labels_and_headless_service(pipeline: Pipeline) -> None:
    p = pipeline
    body = await asyncio.to_thread(apply_sample, p, "ray-cluster.tpu-v4-multihost.yaml", "multihost")
    name = body["metadata"]["name"]
    group = body["spec"]["workerGroupSpecs"][0]
    hosts = group["numOfHosts"]

    async def workers() -> list[client.V1Pod] | None:
        pods = await asyncio.to_thread(
            p.core().list_namespaced_pod, "multihost", label_selector=f"ray.io/cluster={name},ray.io/node-type=worker"
        )
        return list(pods.items) if len(pods.items) == group["replicas"] * hosts else None

    pods = await eventually(workers, timeout=60, message="multi-host workers were not created")
    assert pods is not None
    labels = [meta(pod).labels or {} for pod in pods]
    assert sorted(int(lbl["ray.io/replica-host-index"]) for lbl in labels) == list(range(hosts))
    assert len({lbl["ray.io/worker-group-replica-name"] for lbl in labels}) == group["replicas"]
    assert {lbl["ray.io/worker-group-replica-index"] for lbl in labels} == {"0"}
    svc = await eventually(
        lambda: asyncio.to_thread(p.core().read_namespaced_service, f"{name}-headless", "multihost"), timeout=30
    )
    assert svc.spec is not None
    assert svc.spec.cluster_ip == "None"
    assert await p.denials() == []
