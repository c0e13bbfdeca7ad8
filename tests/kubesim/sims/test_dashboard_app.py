"""The Ray dashboard simulator over HTTP (aiohttp test server), with a manual clock: no sleeping."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import TypeAlias

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kubesim.dashboard import REALISTIC_RAY, DashboardServer, ManualClock, build_app, new_state
from kubesim.dashboard.app import DashboardState, Role
from kubesim.dashboard.jobs import DELETED_ID_WINDOW
from schema.ray import conventions

HttpClient: TypeAlias = TestClient[web.Request, web.Application]  # a client of one of the head's ports


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(clock: ManualClock) -> DashboardState:
    return new_state(clock=clock, default_run_seconds=1.0, serve_deploy_seconds=2.0)


async def _serving(state: DashboardState, role: Role) -> AsyncIterator[HttpClient]:
    test_client: HttpClient = TestClient(TestServer(build_app(state, role)))
    await test_client.start_server()
    try:
        yield test_client
    finally:
        await test_client.close()


@pytest.fixture
async def client(state: DashboardState) -> AsyncIterator[HttpClient]:
    """The head's dashboard port."""
    async for test_client in _serving(state, "dashboard"):
        yield test_client


@pytest.fixture
async def agent(state: DashboardState) -> AsyncIterator[HttpClient]:
    """The head's dashboard agent port."""
    async for test_client in _serving(state, "agent"):
        yield test_client


@pytest.fixture
async def proxy(state: DashboardState) -> AsyncIterator[HttpClient]:
    """The head's Serve proxy port (the server opens it only while Serve runs)."""
    async for test_client in _serving(state, "serve"):
        yield test_client


async def _job(client: HttpClient, job_id: str) -> dict[str, object]:
    response = await client.get(f"/api/jobs/{job_id}")
    assert response.status == 200
    body: dict[str, object] = await response.json()
    return body


async def test_health_and_version(client: HttpClient, agent: HttpClient, proxy: HttpClient) -> None:
    for test_client, path in (
        (client, "/api/gcs_healthz"),
        (agent, "/api/local_raylet_healthz"),
        (agent, "/api/healthz"),
        (proxy, "/-/healthz"),
    ):
        response = await test_client.get(path)
        assert response.status == 200, path
        assert await response.text() == "success"
    # Each path on its own port, and no path without its trailing slash, as on a real head.
    for path in ("/api/local_raylet_healthz", "/-/healthz", "/api/jobs", "/api/serve/applications"):
        assert (await client.get(path)).status == 404, path
    version = await (await client.get("/api/version")).json()
    assert version["ray_version"] == "2.52.0"


async def test_job_lifecycle_follows_the_clock(client: HttpClient, clock: ManualClock) -> None:
    body = {
        "entrypoint": "python /home/ray/samples/sample_code.py",
        "submission_id": "job-a",
        "metadata": {"owner": "test"},
        "runtime_env": {"pip": ["requests"]},
        "entrypoint_num_cpus": 1,
        "entrypoint_resources": {"CPU": 1},
    }
    response = await client.post("/api/jobs/", json=body)
    assert response.status == 200
    assert await response.json() == {"job_id": "job-a", "submission_id": "job-a"}

    job = await _job(client, "job-a")
    assert job["status"] == "RUNNING"
    assert job["metadata"] == {"owner": "test"}
    assert job["entrypoint_num_cpus"] == 1.0
    assert job["end_time"] is None
    assert isinstance(job["start_time"], int)

    clock.advance(1.5)
    job = await _job(client, "job-a")
    assert job["status"] == "SUCCEEDED"
    assert job["message"] == "Job finished successfully."
    assert job["end_time"] == int(job["start_time"]) + 1000  # type: ignore[call-overload]

    listed = await (await client.get("/api/jobs/")).json()
    assert [j["submission_id"] for j in listed] == ["job-a"]
    logs = await (await client.get("/api/jobs/job-a/logs")).json()
    assert "exited with code 0" in logs["logs"]


async def test_scripted_failure_and_pending(client: HttpClient, clock: ManualClock) -> None:
    entrypoint = "KUBESIM_PENDING_SECONDS=1 KUBESIM_RUN_SECONDS=2 KUBESIM_EXIT_CODE=3 python fail.py"
    await client.post("/api/jobs/", json={"entrypoint": entrypoint, "submission_id": "job-f"})
    job = await _job(client, "job-f")
    assert job["status"] == "PENDING"
    assert job["job_id"] is None
    clock.advance(1.0)
    assert (await _job(client, "job-f"))["status"] == "RUNNING"
    clock.advance(2.0)
    job = await _job(client, "job-f")
    assert job["status"] == "FAILED"
    assert "exit code 3" in str(job["message"])
    assert job["driver_exit_code"] == 3


async def test_unknown_job_is_404_and_reuse_is_500(client: HttpClient) -> None:
    assert (await client.get("/api/jobs/nope")).status == 404
    assert (await client.post("/api/jobs/nope/stop")).status == 404
    await client.post("/api/jobs/", json={"entrypoint": "echo hi", "submission_id": "dup"})
    response = await client.post("/api/jobs/", json={"entrypoint": "echo hi", "submission_id": "dup"})
    assert response.status == 500
    assert "Please use a different submission_id" in await response.text()
    assert (await client.post("/api/jobs/", json={"submission_id": "x"})).status == 400


async def test_stop_and_delete(client: HttpClient, clock: ManualClock) -> None:
    await client.post("/api/jobs/", json={"entrypoint": "KUBESIM_RUN_SECONDS=inf serve", "submission_id": "s"})
    assert (await client.delete("/api/jobs/s")).status == 400  # still running
    clock.advance(100)
    assert (await _job(client, "s"))["status"] == "RUNNING"
    assert await (await client.post("/api/jobs/s/stop")).json() == {"stopped": True}
    assert (await _job(client, "s"))["status"] == "STOPPED"
    assert await (await client.post("/api/jobs/s/stop")).json() == {"stopped": False}
    assert await (await client.delete("/api/jobs/s")).json() == {"deleted": True}
    assert (await client.get("/api/jobs/s")).status == 404
    # Ray's supervisor of the deleted job still holds the id: a new job with it fails at once.
    await client.post("/api/jobs/", json={"entrypoint": "echo", "submission_id": "s"})
    reused = await _job(client, "s")
    assert (reused["status"], reused["error_type"]) == ("FAILED", "JOB_SUPERVISOR_ACTOR_DIED")
    clock.advance(DELETED_ID_WINDOW)
    await client.delete("/api/jobs/s")
    clock.advance(DELETED_ID_WINDOW)
    await client.post("/api/jobs/", json={"entrypoint": "echo", "submission_id": "s"})
    assert (await _job(client, "s"))["status"] in ("PENDING", "RUNNING")


async def test_submit_answers_like_ray(client: HttpClient) -> None:
    post = client.post
    assert (await post("/api/jobs/", data=b"not json")).status == 500
    unknown = await post("/api/jobs/", json={"entrypoint": "x", "colour": 1})
    assert unknown.status == 400 and "unexpected keyword argument 'colour'" in await unknown.text()
    metadata = await post("/api/jobs/", json={"entrypoint": "x", "metadata": {"n": 1}})
    assert metadata.status == 400 and "metadata values must be strings" in await metadata.text()
    assert (await post("/api/jobs/", json={"entrypoint": "", "submission_id": "empty"})).status == 200
    job = await _job(client, "empty")
    assert (job["metadata"], job["runtime_env"]) == (None, None)
    assert "entrypoint_num_cpus" not in job  # left out unless asked for


async def test_jobs_without_resources_stay_pending(client: HttpClient, clock: ManualClock) -> None:
    for job_id, extra in (("gpu", {"entrypoint_num_gpus": 1}), ("custom", {"entrypoint_resources": {"TPU": 1}})):
        await client.post("/api/jobs/", json={"entrypoint": "echo", "submission_id": job_id, **extra})
        assert await (await client.post(f"/api/jobs/{job_id}/stop")).json() == {"stopped": True}
        clock.advance(1000)
        job = await _job(client, job_id)
        assert job["status"] == "PENDING" and "waiting for resources" in str(job["message"])


async def test_realistic_head_timings(clock: ManualClock) -> None:
    state = new_state(clock=clock, default_run_seconds=1.0, timings=REALISTIC_RAY)
    async for test_client in _serving(state, "dashboard"):
        body = {"entrypoint": "KUBESIM_RUN_SECONDS=inf serve", "submission_id": "r"}
        assert (await test_client.post("/api/jobs/", json=body)).status == 200
        assert (await _job(test_client, "r"))["status"] == "PENDING"
        clock.advance(REALISTIC_RAY.pending_seconds)
        assert (await _job(test_client, "r"))["status"] == "RUNNING"
        await test_client.post("/api/jobs/r/stop")
        assert (await _job(test_client, "r"))["status"] == "RUNNING"  # a stop takes a moment
        clock.advance(REALISTIC_RAY.stop_seconds)
        assert (await _job(test_client, "r"))["status"] == "STOPPED"

        assert (await test_client.put("/api/serve/applications/", json=SERVE_CONFIG)).status == 200
        fruit = (await _apps(test_client))["fruit_app"]
        assert (fruit["status"], fruit["deployments"]) == ("DEPLOYING", {})  # not built yet
        clock.advance(REALISTIC_RAY.deployments_after_seconds)
        deployments = (await _apps(test_client))["fruit_app"]["deployments"]
        assert isinstance(deployments, dict) and set(deployments) == {"MangoStand", "FruitMarket"}
        await test_client.put("/api/serve/applications/", json={"applications": SERVE_CONFIG["applications"][1:]})
        assert (await _apps(test_client))["fruit_app"]["status"] == "DELETING"
        clock.advance(REALISTIC_RAY.serve_delete_seconds)
        assert "fruit_app" not in await _apps(test_client)


async def test_generated_submission_id(client: HttpClient) -> None:
    body = await (await client.post("/api/jobs/", json={"entrypoint": "echo"})).json()
    assert body["submission_id"].startswith("raysubmit_")
    assert (await client.get(f"/api/jobs/{body['submission_id']}")).status == 200


SERVE_CONFIG = {
    "applications": [
        {
            "name": "fruit_app",
            "import_path": "fruit.deployment_graph",
            "route_prefix": "/fruit",
            "deployments": [{"name": "MangoStand", "num_replicas": 2}, {"name": "FruitMarket"}],
        },
        {"name": "math_app", "import_path": "conditional_dag.serve_dag", "route_prefix": "/calc"},
    ]
}


async def _apps(client: HttpClient) -> dict[str, dict[str, object]]:
    response = await client.get("/api/serve/applications/?api_type=declarative")
    assert response.status == 200
    body = await response.json()
    assert "target_capacity" in body
    apps: dict[str, dict[str, object]] = body["applications"]
    return apps


async def test_serve_deploying_then_running(client: HttpClient, proxy: HttpClient, clock: ManualClock) -> None:
    assert await _apps(client) == {}
    assert (await client.put("/api/serve/applications/", json=SERVE_CONFIG)).status == 200
    apps = await _apps(client)
    assert {name: app["status"] for name, app in apps.items()} == {"fruit_app": "DEPLOYING", "math_app": "DEPLOYING"}
    fruit_deployments = apps["fruit_app"]["deployments"]
    assert isinstance(fruit_deployments, dict)
    assert fruit_deployments["MangoStand"]["status"] == "UPDATING"
    clock.advance(2.0)
    apps = await _apps(client)
    assert {name: app["status"] for name, app in apps.items()} == {"fruit_app": "RUNNING", "math_app": "RUNNING"}
    fruit_deployments = apps["fruit_app"]["deployments"]
    assert isinstance(fruit_deployments, dict)
    assert set(fruit_deployments) == {"MangoStand", "FruitMarket"}
    assert fruit_deployments["MangoStand"]["status"] == "HEALTHY"
    assert await (await proxy.get("/fruit/buy")).text() == "kubesim serve application fruit_app\n"

    # Re-PUT: math_app unchanged keeps RUNNING, fruit_app removed, a new app deploys.
    config = {
        "target_capacity": 50,
        "applications": [SERVE_CONFIG["applications"][1], {"name": "new", "import_path": "n.app"}],
    }
    await client.put("/api/serve/applications/", json=config)
    body = await (await client.get("/api/serve/applications/?api_type=declarative")).json()
    assert body["target_capacity"] == 50
    assert {n: a["status"] for n, a in body["applications"].items()} == {"math_app": "RUNNING", "new": "DEPLOYING"}


async def test_serve_deploy_failed_marker(client: HttpClient, clock: ManualClock) -> None:
    config = {"applications": [{"name": "bad", "import_path": "kubesim-deploy-fail.app", "route_prefix": "/b"}]}
    body = await (await client.get("/api/serve/applications/")).json()
    assert body == {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}
    await client.put("/api/serve/applications/", json=config)
    clock.advance(5)
    app = (await _apps(client))["bad"]
    assert app["status"] == "DEPLOY_FAILED"
    # An import failure: no deployments, no route, the exception in the message.
    assert (app["deployments"], app["route_prefix"]) == ({}, None)
    assert "ModuleNotFoundError" in str(app["message"])
    constructor = {"name": "ctor", "import_path": "m:app", "runtime_env": {"env_vars": {"KUBESIM_DEPLOY_FAIL": "1"}}}
    await client.put("/api/serve/applications/", json={"applications": [constructor]})
    clock.advance(5)
    app = (await _apps(client))["ctor"]
    deployments = app["deployments"]
    assert app["status"] == "DEPLOY_FAILED" and isinstance(deployments, dict)
    assert deployments["app"]["status"] == "DEPLOY_FAILED"
    body = await (await client.get("/api/serve/applications/")).json()
    assert all(isinstance(proxy, dict) for proxy in body["proxies"].values())
    assert (await client.put("/api/serve/applications/", json={"nope": 1})).status == 400


async def test_serve_proxy_failure_injection(client: HttpClient, proxy: HttpClient, state: DashboardState) -> None:
    state.serve_proxy_healthy = False
    assert (await proxy.get("/-/healthz")).status == 503
    state.gcs_healthy = False
    assert (await client.get("/api/gcs_healthz")).status == 503


async def test_token_auth() -> None:
    state = new_state(token="s3cret")
    async for test_client in _serving(state, "dashboard"):
        assert (await test_client.get("/api/jobs/")).status == 401
        wrong = {"x-ray-authorization": "Bearer nope"}
        assert (await test_client.get("/api/jobs/", headers=wrong)).status == 403
        good = {"x-ray-authorization": "Bearer s3cret"}
        assert (await test_client.get("/api/jobs/", headers=good)).status == 200
        assert (await test_client.get("/api/gcs_healthz")).status == 200
    # The agent's health and the Serve proxy are separate servers in Ray; token auth does not cover them.
    async for test_client in _serving(state, "agent"):
        assert (await test_client.get("/api/local_raylet_healthz")).status == 200
    async for test_client in _serving(state, "serve"):
        assert (await test_client.get("/-/healthz")).status == 200


async def test_standalone_server_on_loopback() -> None:
    import aiohttp

    server = DashboardServer(new_state())
    url = await server.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/api/gcs_healthz") as response:
                assert await response.text() == "success"
            # The Serve proxy listens from the first config PUT until Serve is deleted.
            assert server.url_for(8000) is None
            async with session.put(f"{url}/api/serve/applications/", json=SERVE_CONFIG) as response:
                assert response.status == 200
            serve = server.url_for(8000)
            assert serve is not None and serve != url
            async with session.get(f"{serve}/-/healthz") as response:
                assert await response.text() == "success"
            async with session.delete(f"{url}/api/serve/applications/") as response:
                assert response.status == 200
            assert server.url_for(8000) is None
            with pytest.raises(aiohttp.ClientConnectionError):
                async with session.get(f"{serve}/-/healthz"):
                    pass
    finally:
        await server.stop()
    assert not server.running


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("steps", range(12))
async def test_a_start_cut_short_leaves_no_listener(steps: int) -> None:
    """A head stopped or cancelled at any point of its start closes every port it opened (kubesim's
    shutdown cancels pod workers mid-start; a listener left behind would outlive the simulator)."""
    before = _open_descriptors()
    for cut in ("cancel", "stop"):
        server = DashboardServer(new_state())
        starting = asyncio.ensure_future(server.start())
        for _ in range(steps):
            await asyncio.sleep(0)
        if cut == "cancel":
            starting.cancel()
        else:
            await server.stop()
        await asyncio.gather(starting, return_exceptions=True)
        await server.stop()  # a start that finished before the cut is stopped here
        assert not server.running
    assert _open_descriptors() <= before


async def test_agent_port_opens_when_its_url_is_first_asked_for() -> None:
    import aiohttp

    server = DashboardServer(new_state())
    url = await server.start()
    try:
        agent = server.url_for(conventions.DEFAULT_DASHBOARD_AGENT_PORT)
        assert agent is not None and agent != url
        assert server.url_for(conventions.DEFAULT_DASHBOARD_AGENT_PORT) == agent
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{agent}/api/local_raylet_healthz") as response,
        ):
            assert await response.text() == "success"
    finally:
        await server.stop()
    assert server.url_for(conventions.DEFAULT_DASHBOARD_AGENT_PORT) is None


async def test_a_head_stopped_before_its_agent_port_opened_leaves_nothing_listening() -> None:
    import aiohttp

    server = DashboardServer(new_state())
    await server.start()
    agent = server.url_for(conventions.DEFAULT_DASHBOARD_AGENT_PORT)
    assert agent is not None
    await server.stop()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(f"{agent}/api/local_raylet_healthz"):
                pass


async def test_an_agent_port_whose_opening_is_cancelled_is_closed() -> None:
    """The opening task is cancelled when its event loop shuts down: the reserved socket goes with it,
    with no stop() to close it."""
    server = DashboardServer(new_state())
    await server.start()
    try:
        assert server.url_for(conventions.DEFAULT_DASHBOARD_AGENT_PORT) is not None
        reserved, opening = server._agent._reserved, server._agent._opening
        assert reserved is not None and opening is not None
        await asyncio.sleep(0)  # the task has started opening the port
        opening.cancel()
        await asyncio.gather(opening, return_exceptions=True)
        if opening.cancelled():
            assert reserved.fileno() == -1 and server._agent._reserved is None
    finally:
        await server.stop()
