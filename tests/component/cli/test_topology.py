"""``raybus topology`` against a 3-node JetStream cluster that is still forming, as a real process.

The admin Job of deploy/ starts with the NATS StatefulSet: the first node answers before the others,
so JetStream has no meta leader yet and a stream is not found and then not created in time. The command
keeps trying (bounded), says so in one line per try, and succeeds once the cluster answers; again, it
changes nothing. With no cluster at all it ends within its timeout with one line, never a traceback.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import nats

from services.runtime.settings import BusSettings
from services.runtime.topology import stream_configs
from tests.fixtures.nats import free_port
from tests.fixtures.natscluster import LEASES_STREAM, NatsCluster
from tests.helpers import REPO, eventually_sync


def topology(url: str, *extra: str, log: Path) -> subprocess.Popen[bytes]:
    args = ["topology", "--nats-url", url, "--stream-replicas", "3", *extra]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )


async def replicas(cluster: NatsCluster) -> dict[str, int]:
    nc = await nats.connect(servers=cluster.servers)
    try:
        js = nc.jetstream()
        names = [config.name or "" for config in stream_configs(BusSettings())] + [LEASES_STREAM]
        return {name: (await js.stream_info(name)).config.num_replicas or 0 for name in names}
    finally:
        await nc.close()


def test_topology_waits_for_a_forming_cluster_then_is_idempotent(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "cluster")
    first, *rest = cluster.nodes
    log = tmp_path / "topology.log"
    try:
        first.server.start()  # alone: no quorum, so no JetStream meta leader
        proc = topology(cluster.url, log=log)
        eventually_sync(lambda: "trying again" in log.read_text(), timeout=60, message="a try that failed")
        assert proc.poll() is None, log.read_text()
        for node in rest:
            node.server.start()
        assert proc.wait(180) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
        again = topology(cluster.url, log=tmp_path / "again.log")
        assert again.wait(180) == 0, (tmp_path / "again.log").read_text()
        assert set(asyncio.run(replicas(cluster)).values()) == {3}
    finally:
        cluster.stop()


def test_topology_without_a_cluster_ends_within_its_timeout_with_one_line(tmp_path: Path) -> None:
    log = tmp_path / "topology.log"
    proc = topology(f"nats://127.0.0.1:{free_port()}", "--timeout", "3", log=log)
    assert proc.wait(120) == 1
    lines = log.read_text().splitlines()
    assert "Traceback" not in log.read_text()
    assert lines[-1].startswith("raybus topology: NATS JetStream did not accept the topology within 3s"), lines
