"""Invariants 1, 2, 4, 5 and 6 of docs/architecture.md#invariants, end to end on real servers, with every
scalable stage (applier, prober, reconciler) in several replicas and the watch side apart, as deployed."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import signal
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import pytest

from schema import subjects
from schema.codec import decode_batch, decode_deadletter
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_pipeline import GROUP, PLURAL, VERSION, pods_of, status_api
from tests.fixtures.nats import free_port
from tests.fixtures.processes import spawn_raybus
from tests.helpers import eventually, stored_messages, work_consumers
from tests.kubeobjects import meta, name_of

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

REPLICAS = 2
"""Replicas of each scalable stage in these tests."""


def create(p: Pipeline, body: dict[str, Any], namespace: str = "default") -> None:
    p.custom().create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def list_clusters(p: Pipeline) -> list[dict[str, Any]]:
    listed = p.custom().list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    return list(cast(dict[str, Any], listed)["items"])


async def all_ready(p: Pipeline, names: set[str], *, timeout: float = 120) -> None:
    """Wait until every named cluster is ready; on timeout, say which are not and what they show."""
    states: dict[str, str] = {}

    async def check() -> bool:
        p.check()
        clusters = await asyncio.to_thread(list_clusters, p)
        states.clear()
        states.update({c["metadata"]["name"]: (c.get("status") or {}).get("state", "") for c in clusters})
        return all(states.get(name) == "ready" for name in names)

    try:
        await eventually(check, timeout=timeout, interval=0.3)
    except AssertionError as timed_out:
        p.check()  # a component that died is the story, not the states its last good listing showed
        laggards = {n: states.get(n, "<missing>") for n in sorted(names) if states.get(n) != "ready"}
        counts = await pod_counts(p)
        detail = {n: (state, counts.get(n, 0)) for n, state in laggards.items()}
        message = f"{len(laggards)} of {len(names)} clusters not ready (state, pods): {detail}"
        raise AssertionError(message) from timed_out.__cause__


async def pod_counts(p: Pipeline) -> dict[str, int]:
    pods = await asyncio.to_thread(p.core().list_namespaced_pod, "default")
    counts: dict[str, int] = defaultdict(int)
    for pod in pods.items:
        cluster = (meta(pod).labels or {}).get("ray.io/cluster")
        if cluster is not None:  # a RayJob's submitter Pod belongs to no cluster
            counts[cluster] += 1
    return counts


async def stream_messages(p: Pipeline, stream: str, subject: str = ">") -> list[tuple[int, str, bytes, dict[str, str]]]:
    nc = await p.nc()
    try:
        return [
            (msg.metadata.sequence.stream, msg.subject, msg.data, dict(msg.headers or {}))
            for msg in await stored_messages(nc.jetstream(), stream, subject)
        ]
    finally:
        await nc.close()


async def test_invariant_1_duplicate_commands_and_replayed_events_change_nothing(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=REPLICAS) as p:
        await asyncio.to_thread(create, p, small_cluster("dup", workers=2))
        await all_ready(p, {"dup"})
        before = sorted(name_of(x) for x in await asyncio.to_thread(pods_of, p, "dup"))
        assert len(before) == 3
        batches = [m for m in await stream_messages(p, subjects.COMMANDS_STREAM) if decode_batch(m[2]).commands]
        nc = await p.nc()
        try:
            js = nc.jetstream()
            last = 0
            # the same commands again (new msg ids, so JetStream does not de-duplicate them)
            for seq, subject, data, _ in batches:
                again = subjects.command_subject(subjects.key_from_stored_subject(subject))
                last = (await js.publish(again, data, headers={"Nats-Msg-Id": f"again-{seq}"})).seq
            # and every recorded input of the key again
            for seq, subject, data, _ in await stream_messages(p, subjects.EVENTS_STREAM):
                key = subjects.key_from_stored_subject(subject)
                await js.publish(subjects.events_subject(key), data, headers={"Nats-Msg-Id": f"replayed-{seq}"})

            async def drained() -> bool:
                consumers = [await js.consumer_info(s, c) for s, c in work_consumers(p.settings.bus.partitions)]
                idle = all(c.num_pending == 0 and c.num_ack_pending == 0 for c in consumers)
                floors = [c.ack_floor.stream_seq for c in consumers if c.stream_name == subjects.COMMANDS_STREAM]
                return idle and max(floors, default=0) >= last

            await eventually(drained, timeout=60, message="the repeated commands and events were not all processed")
        finally:
            await nc.close()
        after = sorted(name_of(x) for x in await asyncio.to_thread(pods_of, p, "dup"))
        assert after == before


async def test_invariant_4_garbage_is_dead_lettered_and_its_partition_keeps_flowing(
    tmp_path: Path, db_url: str
) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=REPLICAS) as p:
        from schema.keys import ReconcileKey

        key = ReconcileKey(kind="RayCluster", namespace="default", name="after-garbage")
        nc = await p.nc()
        try:
            await nc.jetstream().publish(subjects.events_subject(key), b"\x00 definitely not json")
        finally:
            await nc.close()
        await asyncio.to_thread(create, p, small_cluster("after-garbage"))
        await all_ready(p, {"after-garbage"})
        letters = [decode_deadletter(m[2]) for m in await stream_messages(p, subjects.DEADLETTER_STREAM)]
        assert len(letters) == 1
        assert letters[0].payload == b"\x00 definitely not json"
        assert letters[0].error.startswith("undecodable input")
        assert letters[0].subject.endswith(key.token())


async def test_invariant_5_restarts_during_a_burst_lose_and_duplicate_nothing(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=REPLICAS) as p:
        names = {f"burst-{i}" for i in range(30)}
        restarts = {4: "watch", 8: "applier-1", 12: "prober-1", 16: "reconciler-1", 20: "status"}
        for i, name in enumerate(sorted(names)):
            await asyncio.to_thread(create, p, small_cluster(name))
            if i in restarts:
                await p.restart(restarts[i])
            elif i == 24:
                await asyncio.to_thread(p.nats.restart)
        await all_ready(p, names, timeout=180)
        counts = await pod_counts(p)
        assert {n: counts[n] for n in names} == dict.fromkeys(names, 2)

        async def recorded() -> bool:
            rows = await asyncio.to_thread(status_api, p, "/v1/rayclusters?namespace=default&limit=500")
            return {r["name"] for r in rows["items"] if r.get("status") == "ready"} >= names

        await eventually(recorded, timeout=60, message="the status service missed clusters")
        for name in names:
            history = await asyncio.to_thread(status_api, p, f"/v1/rayclusters/default/{name}/transitions")
            steps = [
                (t["field"], t["from_value"], t["to_value"], t["resource_version"]) for t in history["transitions"]
            ]
            assert len(steps) == len(set(steps)), f"duplicated transitions for {name}: {steps}"
            assert ("state", "", "ready") in [s[:3] for s in steps]


def reconciler_process(p: Pipeline, worker_id: str, log_dir: Path) -> subprocess.Popen[bytes]:
    """``raybus reconciler`` with no kubeconfig anywhere in reach (invariant 6)."""
    args = ["reconciler", "--nats-url", p.nats.url, "--worker-id", worker_id]
    args += ["--partitions", str(p.settings.bus.partitions), "--health-port", "0"]
    return spawn_raybus(
        args,
        log_path=log_dir / f"{worker_id}.log",
        home=log_dir / f"home-{worker_id}",
        extra_env={"RAYBUS_LOG_LEVEL": "DEBUG"},
    )


def reconcile_intervals(log_dir: Path, worker_ids: list[str]) -> dict[str, list[tuple[float, float, str]]]:
    by_key: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for worker in worker_ids:
        for line in (log_dir / f"{worker}.log").read_text().splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if record.get("msg", "").startswith("reconciled "):
                by_key[record["raybus.key"]].append((record["started"], record["finished"], worker))
    return by_key


async def test_invariants_2_and_6_kill_9_a_worker_among_two_while_200_clusters_converge(
    tmp_path: Path, db_url: str
) -> None:
    def hook(settings: Any) -> Any:  # the default 30 s ack wait would only slow the test down
        return dataclasses.replace(settings, bus=dataclasses.replace(settings.bus, ack_wait=5.0))

    async with running_pipeline(
        tmp_path, db_url=db_url, with_reconciler=False, replicas=REPLICAS, settings_hook=hook
    ) as p:
        logs = tmp_path / "workers"
        logs.mkdir()
        workers = {w: reconciler_process(p, w, logs) for w in ("w1", "w2")}
        try:
            names = {f"many-{i:03d}" for i in range(200)}
            for i, name in enumerate(sorted(names)):
                await asyncio.to_thread(create, p, small_cluster(name))
                if i == 80:
                    workers["w1"].send_signal(signal.SIGKILL)
            await all_ready(p, names, timeout=240)
            assert workers["w2"].poll() is None, "the surviving worker died"
            counts = await pod_counts(p)
            assert {n: counts[n] for n in names} == dict.fromkeys(names, 2)
        finally:
            for proc in workers.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in workers.values():
                proc.wait(30)
        # one worker per key at a time: no two reconciles of a key by different workers overlap
        for key, spans in reconcile_intervals(logs, ["w1", "w2"]).items():
            spans.sort()
            for (_s1, e1, w1), (s2, _e2, w2) in itertools.pairwise(spans):
                assert not (w1 != w2 and s2 < e1), f"{key} reconciled by {w1} and {w2} at once"


async def test_invariant_6_status_runs_without_any_kubeconfig(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, replicas=REPLICAS) as p:
        await p.components["status"].stop()
        port = free_port()
        args = ["status", "--nats-url", p.nats.url, "--db-url", p.settings.status.db_url]
        args += ["--http-port", str(port), "--health-port", "0"]
        proc = spawn_raybus(args, log_path=tmp_path / "status.log", home=tmp_path / "home")
        try:
            await asyncio.to_thread(create, p, small_cluster("no-kubeconfig"))
            await all_ready(p, {"no-kubeconfig"})
            p.settings = dataclasses.replace(p.settings, status=dataclasses.replace(p.settings.status, http_port=port))

            async def recorded() -> bool:
                history = await asyncio.to_thread(status_api, p, "/v1/rayclusters/default/no-kubeconfig/transitions")
                return any(t["to_value"] == "ready" for t in history["transitions"])

            await eventually(recorded, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, (tmp_path / "status.log").read_text()[-3000:]
