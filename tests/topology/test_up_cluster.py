"""``raybus up --nats-nodes 3``: the local stack on a 3-node JetStream cluster, streams at 3 replicas."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
from kubernetes import client, config

from schema import subjects
from tests.e2e.clusters import small_cluster
from tests.e2e.test_shutdown import EXIT_BOUND, processes_mentioning
from tests.helpers import REPO, eventually_sync


async def replicas(url: str) -> int:
    nc = await nats.connect(servers=url.split(","))
    try:
        info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
        return info.config.num_replicas or 0
    finally:
        await nc.close()


def state_of(kubeconfig: Path, name: str) -> str:
    with config.new_client_from_config(str(kubeconfig)) as api_client:  # type: ignore[no-untyped-call]
        found: Any = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "ray.io", "v1", "default", "rayclusters", name
        )
    return str((found.get("status") or {}).get("state", ""))


def log_tails(logs: Path, lines: int = 15) -> str:
    """The last lines of every log of the stack, for a failure's message."""
    return "\n".join(
        f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        for path in sorted(logs.glob("*.log"))
    )


def test_up_runs_the_stack_on_a_three_node_cluster(tmp_path: Path) -> None:
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "services.cli.main", "up", "--state-dir", str(state), "--nats-nodes", "3"]
    proc = subprocess.Popen(
        [*argv, "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("raybus is up"):
                break
        else:
            raise AssertionError(f"raybus up exited with {proc.wait()}:\n{''.join(seen)}")
        url = json.loads((state / "endpoints.json").read_text())["nats_url"]
        assert len(url.split(",")) == 3
        assert asyncio.run(replicas(url)) == 3
        with config.new_client_from_config(str(state / "kubeconfig")) as api_client:  # type: ignore[no-untyped-call]
            client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                "ray.io", "v1", "default", "rayclusters", small_cluster("on-three-nodes")
            )
        try:
            eventually_sync(lambda: state_of(state / "kubeconfig", "on-three-nodes") == "ready", timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"not ready; the stack's logs end:\n{log_tails(state / 'logs')}") from exc
        proc.send_signal(signal.SIGINT)
        assert proc.wait(EXIT_BOUND + 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        for pid in processes_mentioning(str(state)):
            os.kill(pid, signal.SIGKILL)
