"""What raybus cannot do for a custom resource shows on it: a Warning Event, ReplicaFailure on a RayCluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from schema import subjects
from services.runtime.topology import stream_configs
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_pipeline import GROUP, PLURAL, VERSION, apply_cluster, get_cluster, pods_of
from tests.helpers import eventually
from tests.kubeobjects import meta


async def warnings_on(p: Pipeline, name: str, reason: str) -> list[Any]:
    """Warning Events listed for the RayCluster as ``kubectl describe`` lists them (name and uid)."""
    p.check()
    uid = (await asyncio.to_thread(get_cluster, p, name))["metadata"]["uid"]
    selector = f"involvedObject.name={name},involvedObject.kind=RayCluster,involvedObject.uid={uid}"
    events = await asyncio.to_thread(p.core().list_namespaced_event, "default", field_selector=selector)
    return [e for e in events.items if e.type == "Warning" and e.reason == reason]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_failures_after_retries_show_on_the_custom_resource(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url) as p:
        # A command the API server refuses: a worker template label value Kubernetes rejects.
        body = small_cluster("refused", workers=1)
        template = body["spec"]["workerGroupSpecs"][0]["template"]
        template["metadata"] = {"labels": {"team": "not a valid label value!"}}
        await asyncio.to_thread(apply_cluster, p, body)
        found = await eventually(
            lambda: warnings_on(p, "refused", "FailedToCreateWorkerPod"), timeout=120, message="no Warning Event"
        )
        assert "not a valid label value!" in found[0].message

        async def replica_failure() -> dict[str, Any] | None:
            conditions = (await asyncio.to_thread(get_cluster, p, "refused")).get("status", {}).get("conditions", [])
            return next((c for c in conditions if c["type"] == "ReplicaFailure" and c["status"] == "True"), None)

        condition = await eventually(replica_failure, timeout=60, message="no ReplicaFailure condition")
        assert condition["reason"] == "FailedCreateWorkerPod"

        # The template corrected, the worker Pod is created with it.
        template["metadata"]["labels"]["team"] = "valid"
        patch = {"spec": {"workerGroupSpecs": body["spec"]["workerGroupSpecs"]}}
        await asyncio.to_thread(
            p.custom().patch_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "refused", patch
        )

        async def corrected_worker() -> list[Any]:
            p.check()
            pods = await asyncio.to_thread(pods_of, p, "refused", "default", "worker")
            return [pod for pod in pods if (meta(pod).labels or {}).get("team") == "valid"]

        await eventually(corrected_worker, timeout=60, message="no worker Pod after the template was corrected")

        # A decision the bus refuses: the commands stream takes no message larger than 2 KB from now on.
        nc = await p.nc()
        try:
            (commands,) = [c for c in stream_configs(p.settings.bus) if c.name == subjects.COMMANDS_STREAM]
            commands.max_msg_size = 2048
            await nc.jetstream().update_stream(commands)
            await asyncio.to_thread(apply_cluster, p, small_cluster("undeliverable", workers=1))
            found = await eventually(
                lambda: warnings_on(p, "undeliverable", "FailedToReconcile"), timeout=180, message="no Warning Event"
            )
            assert "dead-letter stream" in found[0].message
            letters = await nc.jetstream().stream_info(subjects.DEADLETTER_STREAM)
            assert letters.state.messages >= 1
        finally:
            await nc.close()
