"""Forged command batches against the running stack: the applier executes none of them.

An attacker holding a NATS user that may publish commands (what the reconciler's user may do) forges
batches, here under a real RayCluster's key, a real RayJob's key and made-up keys. Each attack is
checked on the cluster (nothing happened), in the audit trail (outcome ``denied`` with the reason),
and for one of them in the log, the ``raybus_commands_denied_total`` metric and the ``CommandDenied``
Warning Event on the key's custom resource. nats-server, kubesim, the watcher, the reconciler and the
status service are the real ones.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import urllib.request
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
from kubernetes import client

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandBatch,
    CommandResult,
    CreateObject,
    DashboardRef,
    DeleteCollection,
    DeleteObject,
    ObjectRef,
    PatchObject,
    PatchStatus,
    SubmitRayJob,
    Transition,
)
from services.runtime.metrics import render_prometheus, setup_metrics
from services.runtime.settings import RaybusSettings
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import (
    Pipeline,
    running_pipeline,
    shared_pipeline,
    shared_pipeline_leak_guard,  # noqa: F401  (an autouse fixture)
)
from tests.e2e.test_invariants import all_ready, create
from tests.helpers import eventually, stored_messages
from tests.kubeobjects import name_of
from tests.security.denials import assert_denied

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

NS = "default"
VICTIM = ReconcileKey(kind="RayCluster", namespace=NS, name="rc")
OTHER = ReconcileKey(kind="RayCluster", namespace=NS, name="other")
JOB = ReconcileKey(kind="RayJob", namespace=NS, name="rj")
MADE_UP = ReconcileKey(kind="RayCluster", namespace="kube-system", name="evil")


def suspended_rayjob(name: str) -> dict[str, Any]:
    """A RayJob that exists and waits (suspended): a key whose reconcile may talk to dashboards."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "entrypoint": "python main.py",
            "submissionMode": "HTTPMode",
            "rayClusterSpec": small_cluster(name)["spec"],
        },
    }


def _setup(p: Pipeline) -> None:
    core = p.core()
    core.create_namespaced_secret(
        "kube-system", cast(Any, {"metadata": {"name": "admin-token"}, "data": {"t": "YQ=="}})
    )
    core.create_namespaced_secret(
        NS, cast(Any, {"metadata": {"name": "db-password"}, "data": {"password": "czNjcjN0"}})
    )
    for name in ("web-1", "web-2"):
        pod = {
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        }
        core.create_namespaced_pod(NS, cast(Any, pod))
    create(p, small_cluster(VICTIM.name, workers=0))
    create(p, small_cluster(OTHER.name, workers=0))
    p.custom().create_namespaced_custom_object("ray.io", "v1", NS, "rayjobs", suspended_rayjob(JOB.name))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pipeline]:
    setup_metrics("raybus-e2e")  # what every raybus service does at start; once per process
    async with shared_pipeline(tmp_path_factory.mktemp("attacks")) as p:
        await asyncio.to_thread(_setup, p)
        await all_ready(p, {VICTIM.name, OTHER.name})
        yield p


async def forge(p: Pipeline, key: ReconcileKey, *commands: Command) -> list[CommandResult]:
    """Publish a batch as a reconciler would; return its results once the applier has handled it."""
    batch = CommandBatch(id=f"forged-{uuid.uuid4().hex}", key=key, issued_at=datetime.now(UTC), commands=commands)
    nc = await p.nc()
    try:
        js = nc.jetstream()
        await js.publish(subjects.command_subject(key), codec.encode(batch))

        async def handled() -> list[CommandResult] | None:
            p.check()
            stored = await stored_messages(js, subjects.RESULTS_STREAM, subjects.result_subject(key))
            mine = [r for m in stored for r in codec.decode_results(m.data) if r.batch_id == batch.id]
            return mine if len(mine) == len(commands) else None

        results = await eventually(handled, timeout=60, message="the forged batch was never handled")
    finally:
        await nc.close()
    assert results is not None
    return results


def ref(kind: str, name: str, namespace: str = NS) -> ObjectRef:
    return ObjectRef(api_version="v1", kind=kind, namespace=namespace, name=name)


async def test_a_secret_in_kube_system_is_not_deleted(pipe: Pipeline) -> None:
    target = ref("Secret", "admin-token", "kube-system")
    assert_denied(
        await forge(pipe, VICTIM, DeleteObject(target=target)), "never makes raybus delete object on a Secret"
    )
    assert_denied(
        await forge(pipe, MADE_UP, DeleteObject(target=target)), "never makes raybus delete object on a Secret"
    )
    secret = await asyncio.to_thread(pipe.core().read_namespaced_secret, "admin-token", "kube-system")
    assert secret.data == {"t": "YQ=="}


async def test_no_privileged_hostpath_pod_is_created_in_kube_system(pipe: Pipeline) -> None:
    def pod(key: ReconcileKey) -> dict[str, Any]:
        owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": key.name, "uid": "u", "controller": True}
        container = {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
        return {
            "metadata": {"name": "evil", "labels": {"ray.io/cluster": key.name}, "ownerReferences": [owner]},
            "spec": {"containers": [container], "volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
        }

    target = ref("Pod", "evil", "kube-system")
    made_up = await forge(pipe, MADE_UP, CreateObject(target=target, body=pod(MADE_UP)))
    assert_denied(made_up, "RayCluster/kube-system/evil is not a custom resource the watcher knows")
    assert_denied(await forge(pipe, VICTIM, CreateObject(target=target, body=pod(VICTIM))), "outside the namespace")
    pods = await asyncio.to_thread(pipe.core().list_namespaced_pod, "kube-system")
    assert "evil" not in [name_of(p) for p in pods.items]


async def test_an_unowned_secret_is_not_overwritten_and_the_denial_shows(
    pipe: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="services.edge.apply.applier")
    patch = PatchObject(target=ref("Secret", "db-password"), patch={"data": {"password": "b3duZWQ="}})
    results = await forge(pipe, VICTIM, patch)
    assert_denied(results, "never makes raybus patch object on a Secret")
    secret = await asyncio.to_thread(pipe.core().read_namespaced_secret, "db-password", NS)
    assert secret.data == {"password": "czNjcjN0"}

    assert any("denied patch_object Secret default/db-password" in r.getMessage() for r in caplog.records)
    counted = [
        line
        for line in render_prometheus()[0].decode().splitlines()
        if line.startswith("raybus_commands_denied_total{")
        and 'kind="Secret"' in line
        and 'verb="patch_object"' in line
    ]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 1

    async def warned() -> list[client.CoreV1Event]:
        events = await asyncio.to_thread(pipe.core().list_namespaced_event, NS)
        return [
            e
            for e in events.items
            if e.reason == "CommandDenied"
            and e.involved_object.name == VICTIM.name
            and "db-password" in (e.message or "")
        ]

    found = await eventually(warned, message="no CommandDenied Event on the RayCluster")
    assert (found[0].type, found[0].involved_object.kind) == ("Warning", "RayCluster")
    assert "patch_object Secret default/db-password was not executed" in (found[0].message or "")


async def test_a_deletecollection_of_unrelated_pods_deletes_nothing(pipe: Pipeline) -> None:
    command = DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="app=web")
    assert_denied(await forge(pipe, VICTIM, command), "does not require ray.io/cluster")
    pods = await asyncio.to_thread(pipe.core().list_namespaced_pod, NS, label_selector="app=web")
    assert sorted(name_of(p) for p in pods.items) == ["web-1", "web-2"]


def _status_get(pipe: Pipeline, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{pipe.settings.status.http_port}{path}", timeout=10) as response:
        return json.load(response)


async def test_a_forged_transition_does_not_enter_another_keys_history(pipe: Pipeline) -> None:
    found = await asyncio.to_thread(
        pipe.custom().get_namespaced_custom_object, "ray.io", "v1", NS, "rayclusters", OTHER.name
    )
    other = cast(dict[str, Any], found)
    forged = Transition(
        kind="RayCluster",
        uid=other["metadata"]["uid"],
        namespace=NS,
        name=OTHER.name,
        field="state",
        from_value="ready",
        to_value="forged",
        at=datetime.now(UTC),
    )
    own = ObjectRef(api_version="ray.io/v1", kind="RayCluster", namespace=NS, name=VICTIM.name)
    results = await forge(pipe, VICTIM, PatchStatus(target=own, status={}, transitions=(forged,)))
    assert_denied(results, "a transition names RayCluster default/other")

    async def audited() -> bool:
        page = await asyncio.to_thread(_status_get, pipe, f"/v1/commands?name={VICTIM.name}&outcome=denied&limit=1000")
        return any(item["batch_id"] == results[0].batch_id for item in page["items"])

    await eventually(audited, message="the status service never stored the denial")
    history = await asyncio.to_thread(_status_get, pipe, f"/v1/resources/RayCluster/{NS}/{OTHER.name}/transitions")
    assert "forged" not in json.dumps(history)


async def test_a_dashboard_namespace_cannot_reach_another_api_through_the_proxy(pipe: Pipeline) -> None:
    planted = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "planted"},
        "spec": {"containers": [{"name": "c"}]},
    }
    for namespace, why in (("kube-system/pods?x=", "outside the namespace"), (NS, "not a DNS-1123 label")):
        service = "rc-head-svc" if namespace != NS else "x:1/../../../../kube-system/pods?x="
        hostile = DashboardRef(namespace=namespace, service=service, port=8265, cluster=VICTIM.name)
        assert_denied(await forge(pipe, JOB, SubmitRayJob(dashboard=hostile, request=planted)), why)
    pods = await asyncio.to_thread(pipe.core().list_namespaced_pod, "kube-system")
    assert "planted" not in [name_of(p) for p in pods.items]


async def test_a_rayjob_cannot_submit_to_a_cluster_it_does_not_own(pipe: Pipeline) -> None:
    foreign = DashboardRef(namespace=NS, service="rc-head-svc", port=8265, cluster=VICTIM.name)
    results = await forge(pipe, JOB, SubmitRayJob(dashboard=foreign, request={"entrypoint": "python steal.py"}))
    assert_denied(results, "RayCluster default/rc does not belong to RayJob/default/rj")


# --- direct mode: a pipeline of its own ----------------------------------------------------------


def _direct(settings: RaybusSettings) -> RaybusSettings:
    import dataclasses

    return dataclasses.replace(settings, kube=dataclasses.replace(settings.kube, use_kubernetes_proxy=False))


async def test_direct_mode_sends_no_token_to_another_host(tmp_path: Path) -> None:
    received: list[bytes] = []

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(listener, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with running_pipeline(tmp_path, settings_hook=_direct) as p:
            secured = small_cluster("secured", workers=0)
            secured["spec"]["authOptions"] = {"mode": "token"}
            secured["spec"]["rayVersion"] = "2.53.0"  # token auth needs Ray 2.52 or later
            await asyncio.to_thread(create, p, secured)
            await asyncio.to_thread(
                p.custom().create_namespaced_custom_object, "ray.io", "v1", NS, "rayjobs", suspended_rayjob(JOB.name)
            )

            async def token_secret() -> str:
                secret = await asyncio.to_thread(p.core().read_namespaced_secret, "secured", NS)
                assert secret.data is not None
                return base64.b64decode(secret.data["auth_token"]).decode()

            token = await eventually(token_secret, timeout=60, message="the auth Secret was never created")
            hostile = DashboardRef(
                namespace=NS, service=f"127.0.0.1:{port}/#", port=8265, cluster="secured", auth_secret="secured"
            )
            results = await forge(p, JOB, SubmitRayJob(dashboard=hostile, request={"entrypoint": "x"}))
            assert_denied(results, "not a DNS-1123 label")
            assert await p.denials() == results
    finally:
        server.close()
        await server.wait_closed()
    assert not any(token.encode() in data for data in received)
    assert received == []
