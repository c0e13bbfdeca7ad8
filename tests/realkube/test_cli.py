"""``python -m realkube``: prints the admin kubeconfig of a running plane, and on SIGTERM stops every
program it started and frees their ports. A start that cannot find its binaries says so."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from realkube import ControlPlane, RealKubeError
from tests.helpers import eventually_sync
from tests.kubeobjects import meta


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _alive(pid: int, program: str) -> bool:
    try:
        return program in Path(f"/proc/{pid}/cmdline").read_text()
    except FileNotFoundError:
        return False


def _running_in(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (the plane's programs all take paths inside it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder) in (entry / "cmdline").read_text():
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return found


def test_runs_until_sigterm_then_leaves_nothing_behind(tmp_path: Path) -> None:
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        cli = subprocess.Popen(
            [sys.executable, "-m", "realkube", "--state-dir", str(tmp_path / "plane")],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert cli.stdout is not None
        kubeconfig = cli.stdout.readline().strip()
        assert kubeconfig == str(tmp_path / "plane" / "kubeconfig"), errors.read_text()
        api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        try:
            names = {meta(ns).name for ns in client.CoreV1Api(api).list_namespace().items}
        finally:
            api.close()
        assert {"default", "kube-system"} <= names
        programs = {pid: Path(f"/proc/{pid}/cmdline").read_text() for pid in _children(cli.pid)}
        assert len(programs) == 3
        server = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]

        cli.send_signal(signal.SIGTERM)

        assert cli.wait() == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        if cli.stdout is not None:
            cli.stdout.close()
    assert not [pid for pid, cmdline in programs.items() if _alive(pid, cmdline.split("\0")[0])]
    assert _running_in(tmp_path / "plane") == []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", urllib.parse.urlsplit(server).port or 0))


def test_a_sigterm_while_starting_stops_what_had_started(tmp_path: Path) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "realkube", "--state-dir", str(tmp_path / "plane")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # etcd is the first program: once it runs, the start is under way.
        [etcd] = eventually_sync(
            lambda: [pid for pid in _children(cli.pid) if _alive(pid, "/etcd")],
            timeout=120.0,
            message="the CLI starts etcd",
        )

        cli.send_signal(signal.SIGTERM)

        # 1 when the signal came before the plane was ready, 0 when it came after.
        assert cli.wait() in (0, 1)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert not _alive(etcd, "/etcd")
    assert _running_in(tmp_path / "plane") == []


def test_missing_binaries_are_named(tmp_path: Path) -> None:
    with pytest.raises(RealKubeError, match="missing Kubernetes binaries: .*etcd"):
        ControlPlane(tmp_path / "plane", bin_dir=tmp_path / "empty").start()
