"""Shutdown with real processes: ``raybus up`` and its services exit on SIGINT/SIGTERM during a burst
(each within its grace), and a second signal exits at once, leaving no child behind. Also what the stack's
children run with (nats-server's memory limit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import AnyStr

import pytest
from kubernetes import client, config

from services.runtime.lifecycle import CANCEL_GRACE, EXIT_GRACE, SHUTDOWN_GRACE
from services.runtime.natsbin import GO_MEMORY_LIMIT_ENV, LOCAL_GO_MEMORY_LIMIT
from services.runtime.settings import RESULT_BATCHES_ENV, ROLE_COMMANDS
from tests.e2e.clusters import small_cluster
from tests.helpers import eventually_sync

REPO = Path(__file__).resolve().parents[2]
EXIT_BOUND = SHUTDOWN_GRACE + CANCEL_GRACE + EXIT_GRACE
"""What a service may take after the first signal (it exits on its own within it)."""


def processes_mentioning(*needles: str) -> dict[int, str]:
    """Live processes whose command line contains one of ``needles`` (the stack's children)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(needle in cmdline for needle in needles):
            found[int(entry.name)] = cmdline
    return found


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``raybus up`` as a process, ready; killed with its children whatever the test did."""
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "up", "--state-dir", str(state), "--timeout", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(REPO),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("raybus is up"):
                break
        else:
            pytest.fail(f"raybus up exited with {proc.wait()} before it was up")
        yield proc, state
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        for pid in processes_mentioning(*_needles(state)):
            os.kill(pid, signal.SIGKILL)


def _needles(state: Path) -> list[str]:
    endpoints = json.loads((state / "endpoints.json").read_text())
    return [str(state), endpoints["nats_url"]]


def burst(state: Path, count: int) -> None:
    """Create ``count`` clusters at once through the stack's own kubeconfig."""
    with config.new_client_from_config(str(state / "kubeconfig")) as api_client:  # type: ignore[no-untyped-call]
        api = client.CustomObjectsApi(api_client)
        for i in range(count):
            api.create_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", small_cluster(f"burst-{i}"))


def wait_for_exit(proc: subprocess.Popen[AnyStr], bound: float) -> int:
    try:
        return proc.wait(bound)
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit after the signal")


def test_up_stops_every_child_on_sigint_during_a_burst(stack: tuple[subprocess.Popen[str], Path]) -> None:
    proc, state = stack
    needles = _needles(state)
    assert len(processes_mentioning(*needles)) >= 5  # nats-server, kubesim, watcher, reconciler, status
    burst(state, 150)
    proc.send_signal(signal.SIGINT)
    assert wait_for_exit(proc, EXIT_BOUND + 3 * 10.0 + 5.0) == 0
    eventually_sync(lambda: not processes_mentioning(*needles), message="children of raybus up outlived it")


def test_the_stacks_nats_server_runs_under_the_local_go_memory_limit(stack: tuple[subprocess.Popen[str], Path]) -> None:
    """Go's soft memory limit holds a local nats-server's heap near its live data (docs/memory.md); a
    ``GOMEMLIMIT`` of the environment wins."""
    _, state = stack
    servers = [pid for pid, cmd in processes_mentioning(str(state / "nats")).items() if "nats-server" in cmd]
    assert len(servers) == 1
    environment = Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\0")
    expected = os.environ.get(GO_MEMORY_LIMIT_ENV) or LOCAL_GO_MEMORY_LIMIT
    assert f"{GO_MEMORY_LIMIT_ENV}={expected}".encode() in environment


def test_the_stacks_applier_publishes_a_runs_results_together(stack: tuple[subprocess.Popen[str], Path]) -> None:
    """``raybus up`` runs one build, so no status service of an earlier release reads its results: its
    applier sends a batch's results in one message (``BusSettings.result_batches``)."""
    _, state = stack
    command = f" {ROLE_COMMANDS['apply']} "
    appliers = [pid for pid, cmd in processes_mentioning(*_needles(state)).items() if command in cmd]
    assert len(appliers) == 1
    environment = Path(f"/proc/{appliers[0]}/environ").read_bytes().split(b"\0")
    assert f"{RESULT_BATCHES_ENV}=true".encode() in environment


def test_a_second_signal_exits_at_once_and_kills_the_children(stack: tuple[subprocess.Popen[str], Path]) -> None:
    proc, state = stack
    needles = _needles(state)
    burst(state, 150)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(proc, EXIT_BOUND) == 128 + signal.SIGTERM
    eventually_sync(lambda: not processes_mentioning(*needles), message="children of raybus up outlived it")


def test_a_service_exits_at_once_on_a_second_signal(stack: tuple[subprocess.Popen[str], Path]) -> None:
    _, state = stack
    endpoints = json.loads((state / "endpoints.json").read_text())
    log = state / "second-watcher.log"
    with log.open("wb") as out:
        watcher = subprocess.Popen(
            [
                *(sys.executable, "-m", "services.cli.main", "watcher", "--nats-url", endpoints["nats_url"]),
                # an applier beside the stack's takes partitions with batches in flight when the signals come
                *("--roles", "apply"),
                *("--kubeconfig", str(state / "kubeconfig"), "--health-port", "0"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
        )
    try:
        eventually_sync(lambda: "watcher started" in log.read_text(), timeout=60, message="the watcher never started")
        burst(state, 100)
        # Both signals are delivered together (two of one kind would merge into one): whichever is handled
        # second comes while the shutdown the first began is still running, however little the applier had
        # left to drain (sent one after the other, a shutdown with nothing in flight could end in between).
        watcher.send_signal(signal.SIGSTOP)
        watcher.send_signal(signal.SIGINT)
        watcher.send_signal(signal.SIGTERM)
        watcher.send_signal(signal.SIGCONT)
        code = wait_for_exit(watcher, EXIT_BOUND)
        text = log.read_text()
        second = signal.SIGTERM if "second signal (SIGTERM)" in text else signal.SIGINT
        assert code == 128 + second, text[-2000:]
        assert f"second signal ({second.name})" in text and "watcher stopping on SIG" in text
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
