"""The pipeline end to end with the first controller (RayCluster), on kubesim."""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.request
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.runtime.tracing import DECIDED, DECISION_STORED, ENTRY_WRITTEN, SNAPSHOT_READ
from tests.e2e.pipeline import Pipeline, load_yaml_docs, running_pipeline
from tests.helpers import eventually, samples_dir
from tests.kubeobjects import meta

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"


def apply_cluster(p: Pipeline, body: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return cast(dict[str, Any], p.custom().create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body))


def get_cluster(p: Pipeline, name: str, namespace: str = "default") -> dict[str, Any]:
    return cast(dict[str, Any], p.custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def pods_of(p: Pipeline, name: str, namespace: str = "default", node_type: str | None = None) -> list[client.V1Pod]:
    selector = f"ray.io/cluster={name}" + (f",ray.io/node-type={node_type}" if node_type else "")
    return list(p.core().list_namespaced_pod(namespace, label_selector=selector).items)


def status_api(p: Pipeline, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{p.settings.status.http_port}{path}", timeout=5) as response:
        return json.loads(response.read())


def sample(name: str) -> dict[str, Any]:
    return next(d for d in load_yaml_docs(samples_dir() / name) if d.get("kind") == "RayCluster")


async def test_sample_cluster_is_ready_recorded_and_traced(
    tmp_path: Path, db_url: str, spans: InMemorySpanExporter
) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        body = sample("ray-cluster.sample.yaml")
        name = body["metadata"]["name"]
        await asyncio.to_thread(apply_cluster, p, body)

        async def ready() -> bool:
            p.check()
            return bool((await asyncio.to_thread(get_cluster, p, name)).get("status", {}).get("state") == "ready")

        await eventually(ready, timeout=60, message="RayCluster never became ready")
        status = (await asyncio.to_thread(get_cluster, p, name))["status"]
        assert status["readyWorkerReplicas"] == 1
        assert status["availableWorkerReplicas"] == 1
        assert status["desiredWorkerReplicas"] == 1
        assert status["observedGeneration"] == 1
        assert len(await asyncio.to_thread(pods_of, p, name, "default", "head")) == 1
        assert len(await asyncio.to_thread(pods_of, p, name, "default", "worker")) == 1
        svc = await asyncio.to_thread(p.core().read_namespaced_service, f"{name}-head-svc", "default")
        assert svc.spec is not None and svc.spec.selector is not None
        assert svc.spec.selector["ray.io/cluster"] == name

        async def transition() -> dict[str, Any] | None:
            rows = await asyncio.to_thread(status_api, p, f"/v1/rayclusters/default/{name}/transitions")
            found = [r for r in rows["transitions"] if r["field"] == "state" and r["to_value"] == "ready"]
            return found[0] if found else None

        row = await eventually(transition, timeout=30, message="the status service never recorded state→ready")
        trace_id = row["trace_id"]
        assert trace_id
        traced = [s for s in spans.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]
        names = {s.name for s in traced}
        assert {"watcher.project", "reconcile", "applier.check_batch", "status.persist"} <= names, names
        # the steps of each hop, as the latency bench reads them
        assert any(ENTRY_WRITTEN in [e.name for e in s.events] for s in traced if s.name == "watcher.project")
        stored = [s for s in traced if s.name == "reconcile" and DECISION_STORED in [e.name for e in s.events]]
        assert stored and [e.name for e in stored[0].events] == [SNAPSHOT_READ, DECIDED, DECISION_STORED]
        reconciles = {s.context.span_id for s in traced if s.name == "reconcile"}
        checked = [s for s in traced if s.name == "applier.check_batch"]
        assert all(s.parent is not None and s.parent.span_id in reconciles for s in checked), names
        # each recorded result continues the span of the command it reports, though a run's results
        # travel together in one message
        applied = {s.context.span_id for s in traced if s.name.startswith("applier.")}
        persisted = [s for s in traced if s.name == "status.persist"]
        assert persisted and all(s.parent is not None and s.parent.span_id in applied for s in persisted), names


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_scale_up_down_and_delete_cascades(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        body = sample("ray-cluster.sample.yaml")
        name = body["metadata"]["name"]
        await asyncio.to_thread(apply_cluster, p, body)

        async def workers(n: int) -> bool:
            p.check()
            pods = await asyncio.to_thread(pods_of, p, name, "default", "worker")
            live = [x for x in pods if meta(x).deletion_timestamp is None]
            state = (await asyncio.to_thread(get_cluster, p, name)).get("status", {})
            # KubeRay's status fields are omitempty: a zero count is absent
            return len(live) == n and len(pods) == n and state.get("desiredWorkerReplicas", 0) == n

        await eventually(lambda: workers(1), timeout=60)
        for replicas in (3, 0):
            patch = {
                "spec": {
                    "workerGroupSpecs": [
                        {**body["spec"]["workerGroupSpecs"][0], "replicas": replicas, "minReplicas": 0}
                    ]
                }
            }
            await asyncio.to_thread(
                p.custom().patch_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, name, patch
            )
            await eventually(
                functools.partial(workers, replicas), timeout=60, message=f"never reached {replicas} workers"
            )
        await asyncio.to_thread(p.custom().delete_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, name)

        async def all_gone() -> bool:
            pods = await asyncio.to_thread(pods_of, p, name)
            services = await asyncio.to_thread(
                p.core().list_namespaced_service, "default", label_selector=f"ray.io/cluster={name}"
            )
            return not pods and not services.items

        await eventually(all_gone, timeout=60, message="children were not garbage-collected")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_repeated_scaling_and_suspend_resume_converge(tmp_path: Path, db_url: str) -> None:
    """Deterministic pod names make the re-created pods' commands identical to earlier ones; withholding
    identical in-flight commands must never leave a cluster short of pods."""
    from tests.e2e.clusters import small_cluster

    async with running_pipeline(tmp_path, db_url=db_url) as p:
        body = small_cluster("again", workers=0)
        await asyncio.to_thread(apply_cluster, p, body)
        group = body["spec"]["workerGroupSpecs"][0]

        async def live_workers(n: int) -> bool:
            p.check()
            pods = await asyncio.to_thread(pods_of, p, "again", "default", "worker")
            return len(pods) == n and all(x.status is not None and x.status.phase == "Running" for x in pods)

        async def patch(spec: dict[str, Any]) -> None:
            await asyncio.to_thread(
                p.custom().patch_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "again", {"spec": spec}
            )

        for replicas in (3, 0, 3, 0, 3):
            await patch({"workerGroupSpecs": [{**group, "replicas": replicas}]})
            await eventually(
                functools.partial(live_workers, replicas), timeout=60, message=f"never reached {replicas} workers"
            )
        await patch({"suspend": True})
        await eventually(lambda: asyncio.to_thread(lambda: not pods_of(p, "again")), timeout=60)
        await patch({"suspend": False})
        await eventually(lambda: live_workers(3), timeout=60, message="workers not re-created after resume")
