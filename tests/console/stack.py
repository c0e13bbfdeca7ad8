"""``raybus up`` as a user runs it, in a folder of its own, and the history the console tests look at.

:class:`RaybusUp` starts the stack (``raybus up --state-dir DIR/.raybus`` with DIR as working directory,
so the tools find it as they do after the README's command) and stops it with Ctrl-C (SIGINT).
:func:`record_history` drives KubeRay's samples through it: a RayJob to completion, a RayService through
a blue/green upgrade (its old cluster deleted after the deletion delay), a RayCluster created and deleted,
and a hostile message on the bus that ends as a dead letter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
from kubernetes import client, config, dynamic

from schema import subjects
from schema.keys import ReconcileKey
from services.cli.apply import apply_documents
from services.runtime import endpoints
from tests.e2e.pipeline import load_yaml_docs
from tests.e2e.rayservices import active, is_ready, pending, sample_service
from tests.e2e.test_rayservice import with_env
from tests.helpers import eventually_sync, samples_dir

TRACE_URL_TEMPLATE = "http://traces.invalid/trace/{trace_id}"
"""What the stack's status service links trace ids to (``RAYBUS_TRACE_URL_TEMPLATE``)."""
RAYBUS = Path(sys.executable).with_name("raybus")
"""The command the README runs (``.venv/bin/raybus``)."""
JUNK_KEY = ReconcileKey(kind="RayJob", namespace="default", name="hostile")


class RaybusUp:
    """A ``raybus up`` child process and what it wrote to its state dir."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.state = workdir / endpoints.DEFAULT_STATE_DIR
        self.log = workdir / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoints: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        """The environment of a user's shell: none of raybus's variables, no KUBECONFIG."""
        return {k: v for k, v in os.environ.items() if not k.startswith("RAYBUS_") and k != "KUBECONFIG"}

    def start(self, timeout: float = 120.0) -> None:
        env = {**self.env(), "RAYBUS_TRACE_URL_TEMPLATE": TRACE_URL_TEMPLATE}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(RAYBUS), "up"], cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT
            )

        def started() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            return "raybus is up" in self.log.read_text()

        eventually_sync(started, timeout=timeout, interval=0.2, message="raybus up did not start")
        self.endpoints = endpoints.read_endpoints(self.state)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def status_url(self) -> str:
        return self.endpoints[endpoints.STATUS_URL]

    def api(self, path: str) -> Any:
        """GET a path of the status service (JSON)."""
        with urllib.request.urlopen(self.status_url + path, timeout=10) as response:
            return json.loads(response.read())

    def metrics_urls(self) -> list[str]:
        """Each service's ``/metrics``, from the health URLs ``raybus up`` printed."""
        return [
            url.replace("/readyz", "/metrics") for url in re.findall(r"http://[\d.:]+/readyz", self.log.read_text())
        ]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``.venv/bin/raybus ARGV`` in the stack's folder, as the README has the user type it."""
        return subprocess.run(
            [str(RAYBUS), *argv], cwd=self.workdir, env=self.env(), capture_output=True, text=True, timeout=120
        )


@contextlib.contextmanager
def _custom(kubeconfig: str) -> Iterator[tuple[client.CustomObjectsApi, dynamic.DynamicClient]]:
    api_client = config.new_client_from_config(kubeconfig)  # type: ignore[no-untyped-call]
    try:
        yield client.CustomObjectsApi(api_client), dynamic.DynamicClient(api_client)  # type: ignore[no-untyped-call]
    finally:
        api_client.close()


def _status(custom: client.CustomObjectsApi, plural: str, name: str) -> dict[str, Any]:
    found: Any = custom.get_namespaced_custom_object("ray.io", "v1", "default", plural, name)
    return dict(found.get("status") or {})


def publish_raw(url: str, subject: str, payload: bytes) -> None:
    """Publish ``payload`` to the stream of ``subject`` (from a thread of its own: the tests' loop is not touched)."""

    async def publish() -> None:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().publish(subject, payload)
        finally:
            await nc.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, publish()).result(timeout=60)


def record_history(stack: RaybusUp) -> dict[str, str]:
    """Run the samples through the stack; returns the names the tests look for."""
    with _custom(stack.endpoints[endpoints.KUBECONFIG]) as (custom, dyn):
        return _drive(stack, custom, dyn)


def _drive(stack: RaybusUp, custom: client.CustomObjectsApi, dyn: dynamic.DynamicClient) -> dict[str, str]:
    service = sample_service("ray-service.sample.yaml")
    service["spec"]["rayClusterDeletionDelaySeconds"] = 2
    docs = [
        *load_yaml_docs(samples_dir() / "ray-job.sample.yaml"),
        service,
        *load_yaml_docs(samples_dir() / "ray-cluster.sample.yaml"),
    ]
    apply_documents(dyn, docs)
    job = eventually_sync(
        lambda: (s := _status(custom, "rayjobs", "rayjob-sample")).get("jobDeploymentStatus") == "Complete" and s,
        timeout=180,
        message="the RayJob did not complete",
    )
    assert job  # a truthy answer: the status
    first = eventually_sync(
        lambda: is_ready(s := _status(custom, "rayservices", "rayservice-sample")) and s,
        timeout=180,
        message="the RayService did not become ready",
    )
    assert first  # a truthy answer: the status
    old = active(first)
    patch = {"spec": {"rayClusterConfig": with_env(service["spec"]["rayClusterConfig"], "UPGRADE", "1")}}
    custom.patch_namespaced_custom_object("ray.io", "v1", "default", "rayservices", "rayservice-sample", patch)

    def upgraded() -> str:
        status = _status(custom, "rayservices", "rayservice-sample")
        return active(status) if active(status) != old and not pending(status) else ""

    new = eventually_sync(upgraded, timeout=180, message="the RayService did not switch to a new cluster")
    eventually_sync(
        lambda: stack.api(f"/v1/rayclusters/default/{old}")["deleted_at"],
        timeout=180,
        message="the old cluster was not deleted after the upgrade",
    )
    eventually_sync(
        lambda: _status(custom, "rayclusters", "raycluster-kuberay").get("state") == "ready",
        timeout=180,
        message="the RayCluster did not become ready",
    )
    custom.delete_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", "raycluster-kuberay")
    eventually_sync(
        lambda: stack.api("/v1/rayclusters/default/raycluster-kuberay")["deleted_at"],
        timeout=180,
        message="the history does not show the RayCluster deleted",
    )
    publish_raw(stack.endpoints[endpoints.NATS_URL], subjects.events_subject(JUNK_KEY), b"{not json")
    eventually_sync(
        lambda: stack.api("/v1/bus")["dead_letters_total"] >= 1,
        timeout=120,
        message="the hostile message did not become a dead letter",
    )
    return {"job_cluster": str(job["rayClusterName"]), "old_cluster": old, "new_cluster": new}
