"""A RayCluster far larger than one bus message: its decisions go out in parts and still replay exactly."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from schema import subjects
from schema.codec import decode_batch
from schema.keys import ReconcileKey
from schema.parts import part_budget
from services.replay.replayer import Replayer
from services.runtime.directget import direct_batches
from services.runtime.settings import RaybusSettings
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_pipeline import GROUP, PLURAL, VERSION, apply_cluster, get_cluster, pods_of
from tests.helpers import eventually
from tests.kubeobjects import meta
from tests.replays.scenarios import settled_history

WORKERS = 2000


async def running_workers(p: Pipeline, name: str, n: int) -> bool:
    """Exactly ``n`` worker Pods, all Running, and the status counts them."""
    p.check()
    pods = await asyncio.to_thread(pods_of, p, name, "default", "worker")
    status = (await asyncio.to_thread(get_cluster, p, name)).get("status", {})
    return (
        len(pods) == n
        and all(
            x.status is not None and x.status.phase == "Running" and meta(x).deletion_timestamp is None for x in pods
        )
        and status.get("readyWorkerReplicas", 0) == n
    )


async def scale(p: Pipeline, name: str, group: dict[str, Any], replicas: int) -> None:
    patch = {"spec": {"workerGroupSpecs": [{**group, "replicas": replicas}]}}
    await asyncio.to_thread(p.custom().patch_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, name, patch)


@pytest.mark.timeout(1800)  # some 8,000 API calls for one key, applied in order, on a shared machine
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_cluster_goes_from_1_to_2000_workers_and_back_to_0(tmp_path: Path, db_url: str) -> None:
    # The production ack wait and lease TTL: on a loaded machine one key's thousands of calls can stall a
    # stage longer than the tests' short ones, and a redelivered part is then applied twice. Here every stage
    # shares one event loop, which a 2,000-worker reconcile holds for seconds: with the tests' 3 s leases
    # every stage lost its partitions again and again, and batches handed back each time were dead-lettered.
    def production_timings(s: RaybusSettings) -> RaybusSettings:
        bus = dataclasses.replace(s.bus, ack_wait=30.0)
        return dataclasses.replace(s, bus=bus, partitions=dataclasses.replace(s.partitions, lease_ttl=10.0))

    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=production_timings) as p:
        body = small_cluster("huge", workers=1)
        group = {**body["spec"]["workerGroupSpecs"][0], "maxReplicas": WORKERS}
        body["spec"]["workerGroupSpecs"] = [group]
        await asyncio.to_thread(apply_cluster, p, body)
        await eventually(lambda: running_workers(p, "huge", 1), timeout=120, message="the first worker never ran")

        await scale(p, "huge", group, WORKERS)
        await eventually(
            lambda: running_workers(p, "huge", WORKERS), timeout=900, interval=1.0, message="never reached 2000"
        )
        await scale(p, "huge", group, 0)

        async def no_workers() -> bool:
            p.check()
            return not await asyncio.to_thread(pods_of, p, "huge", "default", "worker")

        await eventually(no_workers, timeout=900, interval=1.0, message="the workers were never all deleted")
        await asyncio.to_thread(p.custom().delete_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "huge")

        key = ReconcileKey(kind="RayCluster", namespace="default", name="huge")
        nc = await p.nc()
        try:
            budget = part_budget(nc.max_payload)
            stored = [
                m
                async for m in direct_batches(
                    nc, subjects.COMMANDS_STREAM, subject_filter=subjects.stored_commands_filter(key)
                )
            ]
            dead = await nc.jetstream().stream_info(subjects.DEADLETTER_STREAM)
        finally:
            await nc.close()
        assert all(len(m.data) <= budget for m in stored), max(len(m.data) for m in stored)
        split = [b for b in map(decode_batch, (m.data for m in stored)) if b.parts > 1]
        assert {b.part for b in split} >= {0, 1, 2}, "the 2000-worker decisions were not split"
        assert dead.state.messages == 0

        history = await settled_history(p, key)
        assert any(len(d.batch.commands) >= WORKERS for d in history.decisions), "a split decision was not joined"
        assert Replayer().replay_history(history).divergences == ()
