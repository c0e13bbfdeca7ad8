"""Job controller, EndpointSlices and the realistic kubelet on kubesim's store."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubesim.sims.objects import ENDPOINTSLICES, GATEWAYS, JOBS, PODS, SERVICES
from kubesim.sims.options import REALISTIC
from kubesim.store import ObjectStore
from tests.helpers import eventually
from tests.kubesim.sims.harness import FAST, condition, object_store, phase, pod, simulation

A = "kubesim.raybus.io/"


def _job(name: str, **spec: Any) -> dict[str, Any]:
    template = spec.pop("template", None) or {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]},
    }
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"template": template, **spec}}


def _job_pods(store: ObjectStore, name: str) -> list[dict[str, Any]]:
    return store.list(PODS, "default", label_selector=f"job-name={name}")


async def test_job_parallelism_and_completions() -> None:
    store = object_store()
    async with simulation(store, replace(FAST, batch_container_run_seconds=0.02)):
        store.create(JOBS, _job("many", completions=3, parallelism=2))
        job = await eventually(lambda: (j := store.get(JOBS, "default", "many")) and condition(j, "Complete") and j)
        assert job  # a truthy answer: the Job
        assert job["status"]["succeeded"] == 3
        assert condition(job, "SuccessCriteriaMet") == "True"
        assert job["status"]["completionTime"]
        assert job["status"]["startTime"]
        pods = _job_pods(store, "many")
        assert len(pods) == 3
        assert all(p["metadata"]["labels"]["team"] == "a" for p in pods)
        assert all(
            p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"] for p in pods
        )
        assert all(p["metadata"]["ownerReferences"][0]["controller"] is True for p in pods)


async def test_job_backoff_limit() -> None:
    store = object_store()
    template = {
        "metadata": {"annotations": {A + "fail-after-seconds": "0.01"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]},
    }
    async with simulation(store):
        store.create(JOBS, _job("flaky", backoffLimit=2, template=template))
        job = await eventually(lambda: (j := store.get(JOBS, "default", "flaky")) and condition(j, "Failed") and j)
        assert job
        failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert job["status"]["failed"] == 3
        assert "completionTime" not in job["status"]
        assert len(_job_pods(store, "flaky")) == 3


async def test_job_deadline_and_suspend() -> None:
    store = object_store()
    forever = {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "b", "command": ["sleep"]}]}}
    async with simulation(store, replace(FAST, batch_container_run_seconds=60)):
        store.create(JOBS, _job("slow", activeDeadlineSeconds=0, template=forever))
        job = await eventually(lambda: (j := store.get(JOBS, "default", "slow")) and condition(j, "Failed") and j)
        assert job
        assert next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"

        store.create(JOBS, _job("paused", suspend=True))
        paused = await eventually(
            lambda: (j := store.get(JOBS, "default", "paused")) and condition(j, "Suspended") and j
        )
        assert paused
        assert _job_pods(store, "paused") == []
        paused["spec"]["suspend"] = False
        store.update(JOBS, paused)
        await eventually(lambda: len(_job_pods(store, "paused")) == 1)


def _slice_endpoints(store: ObjectStore, service: str) -> list[dict[str, Any]] | None:
    slices = store.list(ENDPOINTSLICES, "default", label_selector=f"kubernetes.io/service-name={service}")
    return slices[0]["endpoints"] if slices else None


async def test_endpoint_slices_publish_not_ready_and_terminating() -> None:
    store = object_store()
    svc = {
        "metadata": {"name": "head", "namespace": "default"},
        "spec": {"selector": {"app": "x"}, "publishNotReadyAddresses": True, "ports": [{"port": 80}]},
    }
    plain = {
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]},
    }
    manual = {"metadata": {"name": "manual", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}}
    async with simulation(store, replace(FAST, termination_delay=0.3)):
        for service in (svc, plain, manual):
            store.create(SERVICES, service)
        store.create(PODS, pod("x1", labels={"app": "x"}, annotations={A + "never-ready": "true"}))
        await eventually(lambda: _slice_endpoints(store, "head"))
        head_endpoints = await eventually(lambda: _slice_endpoints(store, "head"))
        assert head_endpoints
        assert head_endpoints[0]["conditions"]["ready"] is True  # publishNotReadyAddresses
        plain_endpoints = await eventually(lambda: _slice_endpoints(store, "plain"))
        assert plain_endpoints
        assert plain_endpoints[0]["conditions"] == {"ready": False, "serving": False, "terminating": False}
        assert _slice_endpoints(store, "manual") is None  # no selector: not ours

        store.create(PODS, pod("x2", labels={"app": "x"}))
        await eventually(
            lambda: [e["conditions"]["ready"] for e in _slice_endpoints(store, "plain") or []] == [False, True]
        )
        store.delete(PODS, "default", "x2")
        terminating = await eventually(
            lambda: [e for e in _slice_endpoints(store, "plain") or [] if e["conditions"]["terminating"]]
        )
        assert terminating[0]["conditions"]["ready"] is False
        await eventually(lambda: [e["targetRef"]["name"] for e in _slice_endpoints(store, "plain") or []] == ["x1"])
        store.delete(SERVICES, "default", "plain")
        assert _slice_endpoints(store, "plain") is None  # garbage-collected with its owner


async def test_realistic_mode_shows_every_step() -> None:
    store = object_store()
    options = replace(
        REALISTIC, schedule_delay=0.02, image_pull_delay=0.02, readiness_delay=0.05, termination_delay=0.02
    )
    seen: list[tuple[str | None, str | None, str | None]] = []
    events = store.subscribe({PODS})
    async with simulation(store, options):
        store.create(PODS, pod("slow", init_containers=[{"name": "init", "image": "busybox"}]))
        await eventually(lambda: condition(store.get(PODS, "default", "slow"), "Ready") == "True")
    async for event in events:  # every change up to Ready is queued already
        obj = event.object
        seen.append((phase(obj), condition(obj, "Initialized"), condition(obj, "Ready")))
        if condition(obj, "Ready") == "True":
            break
    assert ("Pending", "False", "False") in seen  # scheduled, init container still running
    assert ("Running", "True", "False") in seen  # started, readiness not yet passed
    assert seen[-1] == ("Running", "True", "True")


async def test_gateway_controller_idles_without_crds() -> None:
    store = object_store()
    assert store.registry.lookup(*GATEWAYS) is None  # the Gateway API CRDs are not installed
    async with simulation(store):  # a simulator that raises fails the block
        store.create(PODS, pod("p"))
        await eventually(lambda: condition(store.get(PODS, "default", "p"), "Ready") == "True")
