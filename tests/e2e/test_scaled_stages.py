"""The applier and the prober scale out: their replicas share the partitions, and a partition moves whole.

A replica joining or leaving hands its partitions over after their running batches finished and with their
queued ones given back, so no create reaches the API server twice; a replica killed with SIGKILL loses
nothing: its leases expire, its unacknowledged batches are delivered again to the partitions' new holder, and
its RayJobs are probed by the survivor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
from pathlib import Path

import pytest

from schema import subjects
from schema.codec import decode_results
from schema.messages import CommandResult
from services.edge.service import run_watcher
from services.runtime.kvread import read_latest
from services.runtime.settings import RaybusSettings
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Component, Pipeline, as_replica, running_pipeline
from tests.e2e.rayjobs import rayjob_statuses, small_rayjob
from tests.e2e.test_invariants import all_ready, create, pod_counts, stream_messages
from tests.fixtures.processes import spawn_raybus
from tests.helpers import eventually

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

CLUSTERS = 120
JOBS = 8


def hold_creates(settings: RaybusSettings) -> RaybusSettings:
    """A create hold longer than any watch lag of a loaded machine: what is measured is the hand-over."""
    return dataclasses.replace(settings, partitions=dataclasses.replace(settings.partitions, inflight_create_hold=60.0))


async def holders(p: Pipeline, group: subjects.LeaseGroup) -> dict[int, str]:
    """Partition → the replica holding its lease in ``group``."""
    nc = await p.nc()
    try:
        read = await read_latest(nc, subjects.LEASES_BUCKET, subjects.leases_filter(group))
    finally:
        await nc.close()
    return {int(key.rsplit(".", 1)[1]): value.decode() for key, value in read.values.items()}


async def results(p: Pipeline) -> list[CommandResult]:
    return [r for _, _, data, _ in await stream_messages(p, subjects.RESULTS_STREAM) for r in decode_results(data)]


async def test_appliers_joining_and_leaving_mid_burst_send_no_create_twice(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=1, settings_hook=hold_creates) as p:
        joiner = Component("applier-2", run_watcher, as_replica(p.settings, "applier-2", ("apply",)))
        p.components["applier-2"] = joiner
        names = [f"stages-{i}" for i in range(CLUSTERS)]
        for i, name in enumerate(names):
            await asyncio.to_thread(create, p, small_cluster(name))
            if i == CLUSTERS // 3:
                joiner.start()  # takes about half of the partitions while their batches are queued
            elif i == 2 * CLUSTERS // 3:
                await p.components["applier-1"].stop()  # hands every partition to the joiner
        await all_ready(p, set(names), timeout=600)
        creates = [r for r in await results(p) if r.verb == "create_object" and r.target.startswith("Pod ")]
        assert len({r.target for r in creates}) == 2 * CLUSTERS
        assert [r.target for r in creates if r.outcome == "already_done"] == []
        counts = await pod_counts(p)
        assert {n: counts[n] for n in names} == dict.fromkeys(names, 2)


def stage_process(p: Pipeline, role: str, worker_id: str, workdir: Path) -> subprocess.Popen[bytes]:
    """``raybus watcher --roles <role>`` as a real process (it can be killed with SIGKILL)."""
    args = ["watcher", "--roles", role, "--worker-id", worker_id, "--nats-url", p.nats.url]
    args += ["--kubeconfig", str(p.kube.kubeconfig), "--use-kubernetes-proxy", "--health-port", "0"]
    args += ["--partitions", str(p.settings.bus.partitions)]
    return spawn_raybus(args, log_path=workdir / f"{worker_id}.log", home=workdir / f"home-{worker_id}")


async def test_an_applier_and_a_prober_killed_mid_burst_lose_nothing(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=1) as p:
        workdir = tmp_path / "stages"
        workdir.mkdir()
        victims = {
            "applier-9": stage_process(p, "apply", "applier-9", workdir),
            "prober-9": stage_process(p, "probe", "prober-9", workdir),
        }
        try:

            async def shared() -> bool:  # both victims hold a share of the partitions before the burst
                return "applier-9" in (await holders(p, "apply")).values() and (
                    "prober-9" in (await holders(p, "probe")).values()
                )

            await eventually(shared, timeout=60, message="the second applier and prober never took partitions")
            names = {f"killed-{i}" for i in range(CLUSTERS // 2)}
            jobs = {f"job-{i}" for i in range(JOBS)}
            for name in sorted(jobs):
                await asyncio.to_thread(create_job, p, name)
            for i, name in enumerate(sorted(names)):
                await asyncio.to_thread(create, p, small_cluster(name))
                if i == len(names) // 2:
                    for victim in victims.values():
                        victim.send_signal(signal.SIGKILL)
            await all_ready(p, names, timeout=600)
            counts = await pod_counts(p)
            assert {n: counts[n] for n in names} == dict.fromkeys(names, 2)

            def complete() -> bool:
                statuses = rayjob_statuses(p, "default")
                return all(statuses.get(j, {}).get("jobDeploymentStatus") == "Complete" for j in jobs)

            await eventually(complete, timeout=300, message="RayJobs did not complete after their prober died")
            every = dict.fromkeys(range(p.settings.bus.partitions))
            assert await holders(p, "apply") == dict.fromkeys(every, "applier-1")
            assert await holders(p, "probe") == dict.fromkeys(every, "prober-1")
        finally:
            for victim in victims.values():
                if victim.poll() is None:
                    victim.kill()
                victim.wait(30)


def create_job(p: Pipeline, name: str) -> None:
    p.custom().create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", small_rayjob(name))
