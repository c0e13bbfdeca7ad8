"""``raybus up --kubeconfig`` on a cluster with real credentials: its nats-server takes only the
stack's own processes (a password generated at start, never on a command line)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import nats
import pytest

from schema.crd import write_crds
from services.runtime import endpoints
from tests.e2e.test_shutdown import REPO, processes_mentioning
from tests.fixtures.kubesim import running_kubesim
from tests.security.test_private_files import others_may_read

pytestmark = pytest.mark.e2e


def start_up(state: Path, kubeconfig: Path) -> tuple[subprocess.Popen[str], str]:
    """``raybus up`` on the given cluster, once it says it is up; and what it printed."""
    argv = ["up", "--state-dir", str(state), "--kubeconfig", str(kubeconfig), "--timeout", "120"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(REPO),
    )
    assert proc.stdout is not None
    shown = []
    for line in proc.stdout:
        shown.append(line)
        if line.startswith("raybus is up"):
            return proc, "".join(shown)
    stop_up(proc, state)
    pytest.fail(f"raybus up exited with {proc.returncode}: {''.join(shown)}")


def stop_up(proc: subprocess.Popen[str], state: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    for pid in processes_mentioning(str(state)):
        os.kill(pid, signal.SIGKILL)


async def anonymous_connect(port: int) -> str:
    """What the server answers a client that connects without credentials (NATS protocol by hand)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = await reader.readline()
        assert json.loads(info.split(b" ", 1)[1])["auth_required"] is True
        writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        await writer.drain()
        return (await reader.readline()).decode().strip()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_up_on_a_given_cluster_runs_a_bus_only_its_own_processes_can_use(tmp_path: Path) -> None:
    write_crds(tmp_path / "crds")
    async with running_kubesim(crd_paths=[tmp_path / "crds"], workdir=tmp_path / "kube") as kube:
        state = tmp_path / "state"
        proc, shown = await asyncio.to_thread(start_up, state, kube.kubeconfig)
        try:
            url = json.loads((state / endpoints.ENDPOINTS_FILE).read_text())[endpoints.NATS_URL]
            password = urlsplit(url).password
            assert password
            assert await anonymous_connect(int(urlsplit(url).port or 0)) == "-ERR 'Authorization Violation'"
            nc = await nats.connect(url)
            await nc.close()
            assert not [cmd for cmd in processes_mentioning(str(state)).values() if password in cmd]
            assert password not in shown
            assert not others_may_read(state / endpoints.ENDPOINTS_FILE)
            assert not others_may_read(state / "nats-auth.conf")
        finally:
            await asyncio.to_thread(stop_up, proc, state)
