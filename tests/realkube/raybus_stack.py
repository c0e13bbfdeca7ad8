"""raybus on the real API server, started as ``raybus up --kube real`` starts it: the control plane, kubesim's
attached simulators, nats-server and one process per raybus stage, each process that talks to Kubernetes
holding a kubeconfig of its own deploy/ ServiceAccount."""

from __future__ import annotations

import argparse
import contextlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from services.cli import realcluster, up
from tests.helpers import eventually_sync

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
RESTART_TIMEOUT = 120.0
"""Seconds a restarted raybus process may take to be ready (the watch side first waits out the Lease)."""


def up_args(state: Path, kube: str) -> argparse.Namespace:
    """The arguments ``raybus up --kube KUBE --state-dir STATE`` parses to."""
    parser = argparse.ArgumentParser()
    up.add_arguments(parser)
    return parser.parse_args(["--state-dir", str(state), "--kube", kube, "--timeout", "180"])


@contextlib.contextmanager
def running_stack(state: Path, kube: str) -> Iterator[RaybusStack]:
    """A started stack (``kube``: "real" or "sim"), stopped on exit."""
    stack = up.start_stack(up_args(state, kube))
    try:
        yield RaybusStack(stack)
    finally:
        stack.stop()


@dataclass
class RaybusStack:
    """The running stack and ways to look at it."""

    stack: up.Stack

    @property
    def kubeconfig(self) -> str:
        """The cluster admin's kubeconfig (the test's own view; no raybus process holds it)."""
        return self.stack.endpoints["kubeconfig"]

    @property
    def cluster(self) -> realcluster.RealCluster:
        """The real cluster's files (state, audit log)."""
        return realcluster.RealCluster(self.stack.state / "kube")

    def api(self) -> client.ApiClient:
        """A client as cluster admin (close it)."""
        return config.new_client_from_config(config_file=self.kubeconfig)  # type: ignore[no-untyped-call,no-any-return]

    def child(self, name: str) -> up.Child:
        """The supervised process called ``name``."""
        return next(c for c in self.stack.children if c.name == name)

    def ready_url(self, name: str) -> str:
        """The readiness URL of a raybus process."""
        argv = self.child(name).argv
        return f"http://127.0.0.1:{argv[argv.index('--health-port') + 1]}/readyz"

    def metrics(self, name: str) -> str:
        """The Prometheus text of a raybus process's ``/metrics``."""
        url = self.ready_url(name).removesuffix("/readyz") + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:  # loopback only
            return str(response.read().decode())

    def kill_and_restart(self, name: str) -> None:
        """SIGKILL a raybus process, start it again with the same command line, wait until it is ready."""
        child = self.child(name)
        child.kill()
        child.wait(0)
        child.start()
        child.wait_ready(lambda: up.http_ok(self.ready_url(name)), RESTART_TIMEOUT, lambda: False)

    def check_alive(self) -> bool:
        """Raise StackError when a component died; True otherwise (for polling)."""
        self.stack.check_alive()
        return True

    def logs(self) -> dict[str, str]:
        """Each raybus service's log."""
        return {
            c.name: c.log_path.read_text(errors="replace")
            for c in self.stack.children
            if not c.infra and c.log_path.exists()
        }


def wait(stack: RaybusStack, probe: Any, what: str, timeout: float = 240.0) -> Any:
    """Poll ``probe`` until truthy (failing early when a component of ``stack`` died)."""
    return eventually_sync(lambda: stack.check_alive() and probe(), timeout=timeout, interval=0.5, message=what)
