"""A RayService on real Ray heads: a real Serve application serving HTTP through the serve Service, an
in-place Serve config update, and a zero-downtime upgrade to a new cluster (two real heads at once).

Requests go through kubesim's service proxy to ``<rayservice>-serve-svc``, i.e. to the Serve proxy of the
cluster the Service selects, as a user with kubectl access would send them.
"""

from __future__ import annotations

import asyncio
import copy
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from schema.keys import ReconcileKey
from services.status import history_cli
from tests.e2e.pipeline import Pipeline, shared_pipeline
from tests.e2e.rayservices import ServiceDriver, active, is_ready, pending, watching_endpoints
from tests.helpers import eventually
from tests.realray.jobs import RAY_IMAGE
from tests.replays.scenarios import assert_every_decision_matched, settled_history
from tests.unit.replay.clirun import replay_cli_async

pytestmark = pytest.mark.asyncio(loop_scope="module")

APPS = Path(__file__).resolve().parent / "apps"
TIMEOUT = 300.0


@pytest.fixture(autouse=True)
def _no_leaked_tasks() -> None:
    """Replaces the per-test leak guard: ``shared_pipeline`` checks once the module's pipeline stopped."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pipeline]:
    async with shared_pipeline(tmp_path_factory.mktemp("realservice"), ray="real") as p:
        yield p


def serve_config(greeting: str) -> str:
    return yaml.safe_dump(
        {
            "applications": [
                {
                    "name": "greeter",
                    "import_path": "greeter:app",
                    "route_prefix": "/",
                    "args": {"cluster": "real"},
                    "deployments": [{"name": "Greeter", "num_replicas": 1, "user_config": {"greeting": greeting}}],
                }
            ]
        },
        sort_keys=False,
    )


def greeter_service(*, marker: str = "") -> dict[str, Any]:
    """A RayService of one head (its Python path holds the application's code)."""
    env = [{"name": "PYTHONPATH", "value": str(APPS)}]
    if marker:
        env.append({"name": "UPGRADE", "value": marker})
    head = {
        "name": "ray-head",
        "image": RAY_IMAGE,
        "env": env,
        "resources": {"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "2", "memory": "2Gi"}},
        "ports": [
            {"containerPort": 6379, "name": "gcs-server"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
            {"containerPort": 8000, "name": "serve"},
        ],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "greeter"},
        "spec": {
            "rayClusterDeletionDelaySeconds": 2,
            "serveConfigV2": serve_config("hello"),
            "rayClusterConfig": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
                "workerGroupSpecs": [],
            },
        },
    }


def fetch(p: Pipeline, namespace: str) -> tuple[int, str]:
    """GET / of the serve Service through kubesim's service proxy: (status, body); status 0 if unreachable."""
    url = f"{p.kube.url}/api/v1/namespaces/{namespace}/services/greeter-serve-svc:serve/proxy/"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except OSError as error:
        return 0, str(error)


async def answers(p: Pipeline, namespace: str, text: str) -> str:
    async def probe() -> str | None:
        p.check()
        status, body = await asyncio.to_thread(fetch, p, namespace)
        return body if status == 200 and text in body else None

    found: str | None = await eventually(probe, timeout=TIMEOUT, message=f"the serve Service never answered {text!r}")
    assert found is not None
    return found


async def test_serve_application_update_and_zero_downtime_upgrade(
    pipe: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    body = greeter_service()
    rs = ServiceDriver(pipe, copy.deepcopy(body), "real-serve")
    await rs.create()
    first = active(await rs.wait_ready(timeout=TIMEOUT))
    assert await answers(pipe, rs.namespace, "hello from real") == "hello from real"
    apps = await rs.applications(first)
    # Real Ray names a deployment after the class in the code.
    assert set(apps["applications"]["greeter"]["deployments"]) == {"Greeter"}

    # In place: only the Serve config changes; the same cluster serves the new greeting.
    await rs.patch({"spec": {"serveConfigV2": serve_config("bonjour")}})
    await answers(pipe, rs.namespace, "bonjour from real")
    assert active(await rs.status()) == first and not pending(await rs.status())

    # A cluster spec change: a second real head comes up beside the first, then takes the traffic.
    failures: list[tuple[int, str]] = []
    stop = asyncio.Event()

    async def keep_asking() -> int:
        asked = 0
        while not stop.is_set():
            status, text = await asyncio.to_thread(fetch, pipe, rs.namespace)
            asked += 1
            if status != 200:
                failures.append((status, text))
        return asked

    asking = asyncio.create_task(keep_asking())
    async with watching_endpoints(rs, "greeter-serve-svc") as watch:
        upgraded = greeter_service(marker="1")["spec"]["rayClusterConfig"]
        await rs.patch({"spec": {"rayClusterConfig": upgraded}})
        during = await rs.wait(lambda s: bool(pending(s)), "prepared a pending cluster", timeout=TIMEOUT)
        second = pending(during)
        await rs.wait(
            lambda s: active(s) == second and not pending(s) and is_ready(s), "switched clusters", timeout=TIMEOUT
        )
        await eventually(
            lambda: asyncio.to_thread(lambda: first not in {c["metadata"]["name"] for c in _clusters(rs)}),
            timeout=TIMEOUT,
            message="the old cluster was never deleted",
        )
    stop.set()
    asked = await asking
    assert asked > 0
    assert failures == [], f"{len(failures)} of {asked} requests failed during the upgrade: {failures[:3]}"
    assert watch.selected_clusters() == [first, second]
    assert watch.empty_samples() == []
    assert (await asyncio.to_thread(fetch, pipe, rs.namespace)) == (200, "bonjour from real")

    url = f"http://127.0.0.1:{pipe.settings.status.http_port}"
    capsys.readouterr()
    code = await asyncio.to_thread(history_cli.main, ["rayservice", f"{rs.namespace}/{rs.name}", "--status-url", url])
    table = capsys.readouterr().out
    assert code == 0 and f"active   {second}" in table and "upgrades 1 completed" in table, table

    await rs.delete()
    await rs.wait_gone(timeout=TIMEOUT)
    history = await settled_history(pipe, ReconcileKey(kind="RayService", namespace=rs.namespace, name=rs.name))
    run = await replay_cli_async(["RayService", f"{rs.namespace}/{rs.name}", "--nats-url", pipe.nats.url])
    assert run.code == 0, run.out + run.err
    assert_every_decision_matched(run.out, history)


def _clusters(rs: ServiceDriver) -> list[dict[str, Any]]:
    found: Any = rs.p.custom().list_namespaced_custom_object("ray.io", "v1", rs.namespace, "rayclusters")
    return list(found.get("items", []))
