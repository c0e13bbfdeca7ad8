"""The kubelet simulator on kubesim's store: scheduling, readiness, failure annotations, termination."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import aiohttp

from kubesim.sims.objects import PODS, SECRETS, SERVICES
from kubesim.store import ObjectStore
from tests.helpers import eventually
from tests.kubesim.sims.harness import FAST, condition, head_pod, head_service, object_store, phase, pod, simulation

A = "kubesim.raybus.io/"


def _get(store: ObjectStore, name: str) -> dict[str, Any] | None:
    return store.get(PODS, "default", name)


async def test_pod_goes_running_and_ready() -> None:
    store = object_store()
    async with simulation(store):
        store.create(PODS, pod("p1", init_containers=[{"name": "init", "image": "busybox"}]))
        store.create(PODS, pod("p2"))
        p1 = await eventually(lambda: (p := _get(store, "p1")) and condition(p, "Ready") == "True" and p)
        assert p1  # a truthy answer: the pod
        status = p1["status"]
        assert p1["spec"]["nodeName"] == "kubesim-node"
        assert status["phase"] == "Running"
        assert status["podIP"].startswith("10.244.")
        assert status["hostIP"]
        assert status["startTime"]
        assert {c["type"] for c in status["conditions"]} >= {"PodScheduled", "Initialized", "ContainersReady", "Ready"}
        assert all(c["lastTransitionTime"] for c in status["conditions"])
        (container,) = status["containerStatuses"]
        assert container["ready"]
        assert container["started"]
        assert container["restartCount"] == 0
        assert "startedAt" in container["state"]["running"]
        assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        p2 = await eventually(lambda: (p := _get(store, "p2")) and condition(p, "Ready") == "True" and p)
        assert p2
        assert p2["status"]["podIP"] != status["podIP"]


async def test_stay_pending_and_never_ready() -> None:
    store = object_store()
    async with simulation(store):
        store.create(PODS, pod("pending", annotations={A + "stay-pending": "true"}))
        store.create(PODS, pod("unready", annotations={A + "never-ready": "true"}))
        unready = await eventually(lambda: (p := _get(store, "unready")) and phase(p) == "Running" and p)
        assert unready
        assert condition(unready, "Ready") == "False"
        assert unready["status"]["containerStatuses"][0]["ready"] is False
        pending = await eventually(
            lambda: (p := _get(store, "pending")) and condition(p, "PodScheduled") == "False" and p
        )
        assert pending
        assert phase(pending) == "Pending"
        assert not pending["spec"].get("nodeName")
        # Removing the annotation lets it schedule.
        pending["metadata"]["annotations"] = {}
        store.update(PODS, pending)
        await eventually(lambda: condition(_get(store, "pending"), "Ready") == "True")


async def test_fail_after_with_restart_policies() -> None:
    store = object_store()
    fail = {A + "fail-after-seconds": "0.05", A + "exit-code": "3"}
    async with simulation(store):
        store.create(PODS, pod("never", annotations=fail, restart_policy="Never"))
        store.create(PODS, pod("ok", annotations={**fail, A + "exit-code": "0"}, restart_policy="Never"))
        store.create(PODS, pod("always", annotations=fail))
        never = await eventually(lambda: (p := _get(store, "never")) and phase(p) == "Failed" and p)
        assert never
        terminated = never["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 3
        assert terminated["reason"] == "Error"
        assert terminated["finishedAt"]
        assert condition(never, "Ready") == "False"
        await eventually(lambda: phase(_get(store, "ok")) == "Succeeded")
        always = await eventually(
            lambda: (p := _get(store, "always")) and p["status"]["containerStatuses"][0]["restartCount"] >= 1 and p
        )
        assert always
        assert phase(always) == "Running"
        assert always["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 3


async def test_crash_loop() -> None:
    store = object_store()
    async with simulation(store, replace(FAST, crash_loop_interval=0.05)):
        store.create(PODS, pod("crash", annotations={A + "crash-loop": "true"}))
        crashed = await eventually(
            lambda: (p := _get(store, "crash")) and p["status"]["containerStatuses"][0]["restartCount"] >= 2 and p
        )
        assert crashed
        status = crashed["status"]["containerStatuses"][0]
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert status["lastState"]["terminated"]["exitCode"] == 1
        assert phase(crashed) == "Running"
        assert condition(crashed, "Ready") == "False"


async def test_missing_secret_blocks_start() -> None:
    store = object_store()
    container = {
        "name": "c",
        "image": "busybox",
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}],
    }
    async with simulation(store):
        store.create(PODS, pod("needs-secret", containers=[container]))
        waiting = await eventually(
            lambda: (p := _get(store, "needs-secret"))
            and (p.get("status") or {}).get("containerStatuses")
            and p["status"]["containerStatuses"][0]["state"].get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
            and p
        )
        assert phase(waiting) == "Pending"
        store.create(SECRETS, {"metadata": {"name": "later", "namespace": "default"}, "data": {"token": "eA=="}})
        await eventually(lambda: condition(_get(store, "needs-secret"), "Ready") == "True")


async def test_graceful_deletion_is_finished_by_the_kubelet() -> None:
    store = object_store()
    async with simulation(store, replace(FAST, termination_delay=0.05)):
        assert store.handles_pod_termination
        store.create(PODS, pod("doomed"))
        await eventually(lambda: condition(_get(store, "doomed"), "Ready") == "True")
        store.delete(PODS, "default", "doomed")
        assert _get(store, "doomed") is not None  # terminating, not gone
        await eventually(lambda: _get(store, "doomed") is None)
    assert not store.handles_pod_termination


async def test_head_pod_gets_a_dashboard_reachable_by_proxy_resolution() -> None:
    store = object_store()
    async with simulation(store) as sim:
        dashboards = sim.dashboards
        assert dashboards is not None
        store.create(SERVICES, head_service("rc"))
        store.create(PODS, head_pod("rc-head-abcde", "rc", annotations={A + "serve-unhealthy": "true"}))
        await eventually(lambda: condition(_get(store, "rc-head-abcde"), "Ready") == "True")
        url = dashboards.dashboard_url("default", "rc")
        assert url is not None
        assert dashboards.resolve_service("default", "rc-head-svc", "dashboard") == url
        assert dashboards.resolve_service("default", "rc-head-svc", "8265") == url
        # No Serve proxy before Serve runs.
        assert dashboards.resolve_service("default", "rc-head-svc", "serve") is None
        assert dashboards.resolve_service("default", "rc-head-svc", "gcs-server") is None
        assert dashboards.resolve_service("default", "missing", "dashboard") is None
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/api/gcs_healthz") as response:
                assert await response.text() == "success"
            async with session.put(f"{url}/api/serve/applications/", json={"applications": []}) as response:
                assert response.status == 200
            serve = dashboards.resolve_service("default", "rc-head-svc", "serve")
            assert serve is not None and serve != url
            assert dashboards.resolve_pod("default", "rc-head-abcde", "8000") == serve
            async with session.get(f"{serve}/-/healthz") as response:
                assert response.status == 503  # serve-unhealthy annotation
        store.delete(PODS, "default", "rc-head-abcde")
        await eventually(lambda: dashboards.dashboard_url("default", "rc") is None)


async def test_token_auth_from_secret() -> None:
    store = object_store()
    secret = {"metadata": {"name": "rc", "namespace": "default"}, "data": {"auth_token": "dG9rZW4tMTIz"}}
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.53.0",
        "env": [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "rc", "key": "auth_token"}}},
        ],
    }
    async with simulation(store) as sim:
        assert sim.dashboards is not None
        store.create(SECRETS, secret)
        store.create(PODS, head_pod("rc-head", "rc", containers=[container]))
        await eventually(lambda: sim.dashboards is not None and sim.dashboards.dashboard_url("default", "rc"))
        state = sim.dashboards.dashboard_state("default", "rc")
        assert state is not None
        assert state.token == "token-123"
        assert state.ray_version == "2.53.0"


async def test_worker_init_waits_for_the_head() -> None:
    store = object_store()
    labels = {"ray.io/cluster": "rc", "ray.io/node-type": "worker"}
    init = [{"name": "wait-gcs-ready", "image": "rayproject/ray:2.52.0"}]
    async with simulation(store):
        store.create(PODS, pod("rc-worker", labels=labels, init_containers=init))
        waiting = await eventually(
            lambda: (p := _get(store, "rc-worker")) and condition(p, "Initialized") == "False" and p
        )
        assert waiting
        assert phase(waiting) == "Pending"
        assert waiting["status"]["initContainerStatuses"][0]["state"].get("running")
        store.create(PODS, head_pod("rc-head", "rc"))
        await eventually(lambda: condition(_get(store, "rc-worker"), "Ready") == "True")
