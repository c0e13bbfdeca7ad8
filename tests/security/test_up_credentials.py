"""``raybus up --kubeconfig`` on a cluster with real credentials: its nats-server takes only the
stack's own processes (passwords generated at start, never on a command line), each stage as its own
user with deploy/'s permissions."""

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
from services.runtime.settings import NATS_PASSWORD_ENV, NATS_URL_ENV, NATS_USER_ENV
from tests.e2e.test_shutdown import REPO, processes_mentioning
from tests.fixtures.kubesim import running_kubesim
from tests.helpers import eventually
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


def stage_credentials(stage: str, port: int) -> tuple[str, str]:
    """The NATS user and password a stage of the stack on ``port`` runs with (from its environment)."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = dict(
                item.split("=", 1) for item in (entry / "environ").read_bytes().decode().split("\0") if "=" in item
            )
        except OSError:
            continue
        if (
            b"services.cli.main" in cmdline
            and stage.encode() in cmdline
            and f":{port}" in environ.get(NATS_URL_ENV, "")
        ):
            return environ[NATS_USER_ENV], environ[NATS_PASSWORD_ENV]
    raise AssertionError(f"no {stage} process of the stack on port {port}")


async def violation(url: str, user: str, password: str, subject: str) -> str:
    """What the server says when ``user`` publishes on ``subject`` ("" when it lets it)."""
    errors: list[Exception] = []

    async def record(error: Exception) -> None:
        errors.append(error)

    nc = await nats.connect(url, user=user, password=password, error_cb=record)
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        await eventually(lambda: errors, timeout=5, message=f"{user} may publish on {subject}")
    except AssertionError:
        return ""
    finally:
        await nc.close()
    return str(errors[0])


async def test_up_on_a_given_cluster_runs_a_bus_only_its_own_processes_can_use(tmp_path: Path) -> None:
    write_crds(tmp_path / "crds")
    async with running_kubesim(crd_paths=[tmp_path / "crds"], workdir=tmp_path / "kube") as kube:
        state = tmp_path / "state"
        proc, shown = await asyncio.to_thread(start_up, state, kube.kubeconfig)
        try:
            url = json.loads((state / endpoints.ENDPOINTS_FILE).read_text())[endpoints.NATS_URL]
            password = urlsplit(url).password
            assert password and urlsplit(url).username == "admin"
            port = int(urlsplit(url).port or 0)
            assert await anonymous_connect(port) == "-ERR 'Authorization Violation'"
            nc = await nats.connect(url)
            await nc.close()
            assert not [cmd for cmd in processes_mentioning(str(state)).values() if password in cmd]
            assert password not in shown
            assert not others_may_read(state / endpoints.ENDPOINTS_FILE)
            assert not others_may_read(state / "nats-auth.conf")

            # Each stage runs as its own user of deploy/, with deploy/'s permissions.
            plain = f"nats://127.0.0.1:{port}"
            users = {stage: stage_credentials(stage, port) for stage in ("reconciler", "status")}
            users["applier"] = stage_credentials("applier", port)
            assert {stage: user for stage, (user, _) in users.items()} == {
                "reconciler": "reconciler",
                "status": "status",
                "applier": "watcher",
            }
            assert len({secret for _, secret in users.values()}) == 3
            reconciler, status, watcher = users["reconciler"], users["status"], users["applier"]
            objects = "$KV.raybus-objects.RayCluster.default.rc.RayCluster.rc"
            assert "permissions violation" in await violation(plain, *reconciler, objects)
            assert "permissions violation" in await violation(
                plain, *reconciler, "raybus.results.RayCluster.default.rc"
            )
            assert "permissions violation" in await violation(plain, *watcher, "raybus.cmd.RayCluster.default.rc")
            assert "permissions violation" in await violation(plain, *status, "raybus.cmd.RayCluster.default.rc")
        finally:
            await asyncio.to_thread(stop_up, proc, state)
