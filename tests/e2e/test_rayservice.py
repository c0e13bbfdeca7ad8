"""RayService through the real pipeline (kubesim, watcher with its Serve prober, reconciler,
status on nats-server), with the Gateway API CRDs registered for incremental upgrades.

One pipeline serves the module; each test runs its RayService in a namespace of its own. Serve
applications come from kubesim's dashboard simulator (DEPLOYING → RUNNING; ``kubesim-deploy-fail`` in an
application name → DEPLOY_FAILED), health from its pod proxy, endpoints from its EndpointSlices. Timers
are JetStream message schedules with a 1 s resolution, so delays and intervals here are a few seconds.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kubesim.sims.annotations import READY_AFTER_SECONDS
from schema.keys import ReconcileKey
from schema.messages import Observation
from schema.probes import serve_health_significant, serve_significant
from services.replay.history import KeyHistory
from services.replay.replayer import Replayer
from services.status import history_cli
from tests.e2e.pipeline import Pipeline, gateway_api_crds, shared_pipeline
from tests.e2e.rayservices import (
    ServiceDriver,
    active,
    condition,
    is_ready,
    pending,
    sample_service,
    watching_endpoints,
)
from tests.helpers import eventually
from tests.replays.scenarios import settled_history

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(autouse=True)
def _no_leaked_tasks() -> None:
    """The shared pipeline's services start tasks of their own at any time, so the project's per-test
    leak guard cannot tell them from a test's; ``shared_pipeline`` checks once the pipeline has stopped."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pipeline]:
    # The watcher's roles each in a process of their own, as deploy/ runs them: the prober then follows
    # only the probed keys of the objects bucket, and every Serve probe must find what it reads there.
    workdir = tmp_path_factory.mktemp("rayservice")
    async with shared_pipeline(workdir, extra_crds=[gateway_api_crds()], replicas=1) as p:
        yield p
        # Every sample and upgrade flow of this module ran with the applier authorizing each command.
        assert await p.denials() == []


def with_env(cluster_config: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    """``rayClusterConfig`` with an env var added to every container (a spec change that needs a new cluster)."""
    changed = copy.deepcopy(cluster_config)
    groups = [changed["headGroupSpec"], *changed.get("workerGroupSpecs", [])]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            container["env"] = [*container.get("env", []), {"name": name, "value": value}]
    return changed


def with_slow_head(cluster_config: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``rayClusterConfig`` whose head Pod turns Ready only ``seconds`` after it started (kubesim's fault
    annotation): a new cluster of an upgrade stays pending at least that long, long enough for a status
    poll to see it even on a loaded machine."""
    changed = copy.deepcopy(cluster_config)
    metadata = changed["headGroupSpec"]["template"].setdefault("metadata", {})
    metadata["annotations"] = {**metadata.get("annotations", {}), READY_AFTER_SECONDS: str(seconds)}
    return changed


def with_serve_config(body: dict[str, Any], mutate: Any) -> str:
    """``serveConfigV2`` after ``mutate`` changed its parsed form."""
    config = yaml.safe_load(body["spec"]["serveConfigV2"])
    mutate(config)
    return str(yaml.safe_dump(config, sort_keys=False))


async def history_table(p: Pipeline, rs: ServiceDriver, capsys: pytest.CaptureFixture[str]) -> str:
    """``raybus history rayservice NS/NAME`` as a user runs it."""
    url = f"http://127.0.0.1:{p.settings.status.http_port}"
    capsys.readouterr()
    code = await asyncio.to_thread(history_cli.main, ["rayservice", f"{rs.namespace}/{rs.name}", "--status-url", url])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def steps(rows: list[dict[str, Any]], field: str) -> list[tuple[str, str]]:
    return [(r["from_value"], r["to_value"]) for r in rows if r["field"] == field]


SAMPLES = [
    pytest.param("ray-service.sample.yaml", "rayservice-sample-serve-svc", 8000, id="sample"),
    pytest.param("ray-service.custom-serve-service.yaml", "custom-ray-serve-service-name", 8000, id="custom-serve-svc"),
    pytest.param("ray-service.different-port.yaml", "rayservice-sample-serve-svc", 9000, id="different-port"),
    pytest.param(
        "ray-service.no-ray-serve-replica.yaml",
        "rayservice-no-ray-serve-replica-serve-svc",
        8000,
        id="no-serve-replica",
    ),
]


@pytest.mark.parametrize(("sample", "serve_service", "port"), SAMPLES)
async def test_samples_reach_ready_with_endpoints(pipe: Pipeline, sample: str, serve_service: str, port: int) -> None:
    rs = ServiceDriver(pipe, sample_service(sample), f"rs-{sample.split('.')[1]}")
    await rs.create()
    status = await rs.wait_ready()
    cluster = active(status)
    assert await rs.cluster_names() == {cluster}
    assert status["numServeEndpoints"] > 0
    assert set(status["activeServiceStatus"]["applicationStatuses"]) == {
        app["name"] for app in yaml.safe_load(rs.body["spec"]["serveConfigV2"])["applications"]
    }
    svc = await rs.service(serve_service)
    assert svc.spec is not None
    assert svc.spec.selector == {"ray.io/cluster": cluster, "ray.io/serve": "true"}
    assert [p.port for p in svc.spec.ports or []] == [port]
    endpoints = await rs.ready_endpoints(serve_service)
    assert endpoints and all(pod.startswith(f"{cluster}-") for pod in endpoints)
    head = await rs.service(f"{rs.name}-head-svc")
    assert head.spec is not None and head.spec.selector is not None
    assert head.spec.selector["ray.io/cluster"] == cluster
    assert {a["status"] for a in (await rs.applications(cluster))["applications"].values()} == {"RUNNING"}


async def test_blue_green_upgrade_never_leaves_the_service_without_endpoints(
    pipe: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    body = sample_service("ray-service.sample.yaml")
    body["spec"]["rayClusterDeletionDelaySeconds"] = 2
    rs = ServiceDriver(pipe, body, "rs-blue-green")
    await rs.create()
    old = active(await rs.wait_ready())
    serve_service = f"{rs.name}-serve-svc"
    async with watching_endpoints(rs, serve_service) as watch:
        upgraded = with_slow_head(with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1"), 3)
        await rs.patch({"spec": {"rayClusterConfig": upgraded}})
        upgrading = await rs.wait(lambda s: bool(pending(s)) and active(s) == old, "prepared a pending cluster")
        new = pending(upgrading)
        assert condition(upgrading, "UpgradeInProgress")["status"] == "True"
        await rs.wait(lambda s: active(s) == new and not pending(s) and is_ready(s), "switched to the new cluster")
        await eventually_names(rs, {new})
    assert watch.samples, "the endpoint watch took no sample"
    assert watch.selected_clusters() == [old, new]
    assert watch.empty_samples() == [], "the serve Service had no ready endpoint at some moment"
    assert all(pod.startswith(f"{new}-") for pod in await rs.ready_endpoints(serve_service))

    rows = await rs.history(settled=lambda r: bool(steps(r, "clusterDeleted")))
    promoted = next(r["at"] for r in rows if r["field"] == "activeCluster" and r["to_value"] == new)
    deleted = next(r["at"] for r in rows if r["field"] == "clusterDeleted")
    assert seconds_between(promoted, deleted) >= 2, "the old cluster was deleted before its deletion delay"
    assert ("", new) in steps(rows, "pendingCluster")
    assert (old, new) in steps(rows, "traffic")
    assert (old, new) in steps(rows, "activeCluster")
    assert (old, "") in steps(rows, "clusterDeleted")
    order = [r["field"] for r in rows if r["field"] in ("pendingCluster", "traffic", "activeCluster", "clusterDeleted")]
    assert order[-4:] == ["pendingCluster", "traffic", "activeCluster", "clusterDeleted"]
    table = await history_table(pipe, rs, capsys)
    for field, change in (
        ("pendingCluster", f"- → {new}"),
        ("traffic", f"{old} → {new}"),
        ("activeCluster", f"{old} → {new}"),
        ("clusterDeleted", f"{old} → -"),
    ):
        assert any(field in line and change in line for line in table.splitlines()), (field, change, table)
    assert f"active   {new}" in table and "upgrades 1 completed" in table

    await rs.delete()
    await rs.wait_gone()
    await assert_replays(pipe, rs)


async def eventually_names(rs: ServiceDriver, names: set[str], *, timeout: float = 60) -> None:
    async def probe() -> bool:
        rs.p.check()
        return await rs.cluster_names() == names

    await eventually(probe, timeout=timeout, message=f"{rs.name}'s clusters never became {names}")


def assert_observations_only_on_change(history: KeyHistory) -> None:
    """The prober published a Serve or proxy-health observation only when its significant part changed."""
    significance = {"serve": serve_significant, "servehealth": serve_health_significant}
    last: dict[tuple[str, str], Any] = {}
    seen = 0
    for recorded in history.inputs:
        message = recorded.message
        if not isinstance(message, Observation) or message.source not in significance:
            continue
        seen += 1
        entry = (message.source, message.entry_name)
        now = significance[message.source](message.data)
        assert last.get(entry) != now, f"observation {recorded.seq} of {entry} repeats the previous one"
        last[entry] = now
    assert {source for source, _ in last} == {"serve", "servehealth"} and seen >= len(last)


async def assert_replays(p: Pipeline, rs: ServiceDriver) -> None:
    """The RayService's recorded inputs replayed through today's reconcile decide what was recorded, and
    the transitions the status service confirmed are among the replayed decisions' transitions."""
    key = ReconcileKey(kind="RayService", namespace=rs.namespace, name=rs.name)
    history = await settled_history(p, key)
    assert_observations_only_on_change(history)
    result = Replayer().replay_history(history, raise_on_divergence=False)
    assert result.divergences == (), [str(d) for d in result.divergences]
    replayed = {
        (t.field, t.from_value, t.to_value)
        for step in result.steps
        if step.replayed is not None
        for command in step.replayed.commands
        for t in getattr(command, "transitions", ())
    }
    recorded = {(r["field"], r["from_value"], r["to_value"]) for r in await rs.history() if r["field"] != "lifecycle"}
    assert recorded and recorded <= replayed, recorded - replayed


async def test_serve_config_only_change_goes_to_the_active_cluster(pipe: Pipeline) -> None:
    body = sample_service("ray-service.sample.yaml")
    rs = ServiceDriver(pipe, body, "rs-serve-config")
    await rs.create()
    cluster = active(await rs.wait_ready())

    def raise_price(config: dict[str, Any]) -> None:
        config["applications"][0]["deployments"][0]["user_config"]["price"] = 30

    await rs.patch({"spec": {"serveConfigV2": with_serve_config(body, raise_price)}})

    async def deployed_price() -> Any:
        apps = (await rs.applications(cluster))["applications"]
        mango = apps["fruit_app"]["deployed_app_config"]["deployments"][0]
        return mango["user_config"]["price"] == 30 and apps["fruit_app"]["status"] == "RUNNING"

    await eventually(deployed_price, timeout=30, message="the new serve config never reached the active cluster")
    status = await rs.wait_ready()
    assert active(status) == cluster and not pending(status)
    assert await rs.cluster_names() == {cluster}
    rows = await rs.history()
    assert steps(rows, "pendingCluster") == [("", cluster)]


def incremental_body(*, interval: int = 1, step: int = 25, surge: int = 50) -> dict[str, Any]:
    """KubeRay's incremental-upgrade sample with short steps (and a short deletion delay)."""
    body = sample_service("ray-service.incremental-upgrade.yaml")
    body["spec"]["upgradeStrategy"]["clusterUpgradeOptions"].update(
        intervalSeconds=interval, stepSizePercent=step, maxSurgePercent=surge
    )
    body["spec"]["rayClusterDeletionDelaySeconds"] = 1
    return body


async def route_weights(rs: ServiceDriver) -> dict[str, int]:
    """The backend weights of the RayService's HTTPRoute, once it has settled on one backend."""

    async def probe() -> dict[str, int] | None:
        routes = await rs.gateway_objects("httproutes")
        if len(routes) != 1:
            return None
        weights = {b["name"]: int(b.get("weight", 1)) for b in routes[0]["spec"]["rules"][0]["backendRefs"]}
        return weights if len(weights) == 1 else None

    found: dict[str, int] | None = await eventually(probe, timeout=30, message=f"{rs.name}'s HTTPRoute never settled")
    assert found is not None
    return found


def traffic_percents(rows: list[dict[str, Any]], cluster: str) -> list[int]:
    """The pending cluster's traffic share after each recorded incremental step towards or away from it."""
    found = []
    for r in rows:
        if r["field"] != "traffic" or r["reason"] not in ("IncrementalStep", "RollbackStep"):
            continue
        percent = int(r["attributes"]["toPercent"])
        found.append(percent if r["attributes"]["to"] == cluster else 100 - percent)
    return found


async def test_incremental_upgrade_steps_weights_then_promotes_and_a_rollback_returns_traffic(
    pipe: Pipeline,
) -> None:
    body = incremental_body()
    rs = ServiceDriver(pipe, body, "rs-incremental")
    await rs.create()
    first = active(await rs.wait_ready())
    assert [g["metadata"]["name"] for g in await rs.gateway_objects("gateways")] == [f"{rs.name}-gateway"]
    assert await route_weights(rs) == {f"{first}-serve-svc": 100}

    await rs.patch({"spec": {"rayClusterConfig": with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1")}})
    upgrading = await rs.wait(lambda s: bool(pending(s)), "prepared a pending cluster")
    second = pending(upgrading)
    await rs.wait(lambda s: active(s) == second and not pending(s) and is_ready(s), "promoted the pending cluster")
    rows = await rs.history(settled=lambda r: (first, second) in steps(r, "activeCluster"))
    percents = traffic_percents(rows, second)
    assert percents == [25, 50, 75, 100], percents
    assert [r["reason"] for r in rows if r["field"] == "traffic"][-4:] == ["IncrementalStep"] * 4
    await eventually_names(rs, {second})
    assert await route_weights(rs) == {f"{second}-serve-svc": 100}

    # A second upgrade, rolled back in the middle: the goal spec is the active cluster's again. Its
    # smaller steps keep traffic split for about ten intervals, long enough for a poll to see it even
    # on a loaded machine; the rollback itself is checked in the history, as it may pass between polls.
    upgraded = with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1")
    again = with_env(upgraded, "AGAIN", "1")
    await rs.patch(
        {"spec": {"rayClusterConfig": again, "upgradeStrategy": {"clusterUpgradeOptions": {"stepSizePercent": 10}}}}
    )
    mid = await rs.wait(
        lambda s: 0 < ((s.get("pendingServiceStatus") or {}).get("trafficRoutedPercent") or 0) < 100,
        "moved some traffic to the third cluster",
    )
    third = pending(mid)
    await rs.patch({"spec": {"rayClusterConfig": upgraded}})
    done = await rs.wait(lambda s: not pending(s) and active(s) == second, "finished the rollback")
    assert (done["activeServiceStatus"].get("trafficRoutedPercent"), is_ready(done)) == (100, True)
    assert condition(done, "UpgradeInProgress")["reason"] == "NoPendingCluster"
    rows = await rs.history(settled=lambda r: ("InProgress", "Complete") in steps(r, "rollback"))
    back = traffic_percents(rows, third)
    assert back[-1] == 0 and max(back) < 100, back
    assert [r["reason"] for r in rows if r["field"] == "traffic"][-1] == "RollbackStep"
    await eventually_names(rs, {second})
    assert await route_weights(rs) == {f"{second}-serve-svc": 100}

    await rs.delete()
    await rs.wait_gone()
    await assert_replays(pipe, rs)


async def test_pending_cluster_whose_applications_fail_never_gets_traffic(pipe: Pipeline) -> None:
    body = sample_service("ray-service.sample.yaml")
    rs = ServiceDriver(pipe, body, "rs-deploy-fail")
    await rs.create()
    old = active(await rs.wait_ready())
    before = (await rs.applications(old))["applications"]

    def failing(config: dict[str, Any]) -> None:
        config["applications"][0]["name"] = "fruit_app_kubesim-deploy-fail"

    await rs.patch(
        {
            "spec": {
                "rayClusterConfig": with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1"),
                "serveConfigV2": with_serve_config(body, failing),
            }
        }
    )

    def failed(status: dict[str, Any]) -> bool:
        apps = (status.get("pendingServiceStatus") or {}).get("applicationStatuses") or {}
        return bool(apps.get("fruit_app_kubesim-deploy-fail", {}).get("status") == "DEPLOY_FAILED")

    status = await rs.wait(failed, "saw the pending cluster's applications fail")
    assert active(status) == old and is_ready(status) and status["numServeEndpoints"] > 0
    serve = await rs.service(f"{rs.name}-serve-svc")
    assert serve.spec is not None and serve.spec.selector is not None
    assert serve.spec.selector["ray.io/cluster"] == old
    assert all(pod.startswith(f"{old}-") for pod in await rs.ready_endpoints(f"{rs.name}-serve-svc"))
    assert (await rs.applications(old))["applications"].keys() == before.keys()  # nothing was PUT to it
    rows = await rs.history()
    assert steps(rows, "traffic") == [("", old)] and steps(rows, "activeCluster") == [("", old)]


async def test_initializing_timeout_is_terminal_and_cleans_up(pipe: Pipeline) -> None:
    body = sample_service("ray-service.sample.yaml")
    body["metadata"]["annotations"] = {"ray.io/initializing-timeout": "3s"}
    body["spec"]["rayClusterDeletionDelaySeconds"] = 0
    head = body["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    head.setdefault("metadata", {})["annotations"] = {"kubesim.raybus.io/never-ready": "true"}
    rs = ServiceDriver(pipe, body, "rs-init-timeout")
    await rs.create()
    status = await rs.wait(
        lambda s: condition(s, "Ready").get("reason") == "InitializingTimeout", "timed out", timeout=60
    )
    assert condition(status, "Ready")["status"] == "False" and status.get("serviceStatus", "") == ""
    assert not active(status) and not pending(status)
    await eventually_names(rs, set())
    reasons = {e.reason for e in await rs.events()}
    assert "RayServiceInitializingTimeout" in reasons, reasons
    rows = await rs.history(settled=lambda r: any(x["reason"] == "InitializingTimeout" for x in r))
    assert any(r["field"] == "condition/Ready" and r["reason"] == "InitializingTimeout" for r in rows)


async def test_upgrade_strategy_none_ignores_cluster_spec_changes(pipe: Pipeline) -> None:
    body = sample_service("ray-service.sample.yaml")
    body["spec"]["upgradeStrategy"] = {"type": "None"}
    rs = ServiceDriver(pipe, body, "rs-strategy-none")
    await rs.create()
    cluster = active(await rs.wait_ready())
    await rs.patch({"spec": {"rayClusterConfig": with_env(body["spec"]["rayClusterConfig"], "UPGRADE", "1")}})
    generation = (await rs.get())["metadata"]["generation"]
    status = await rs.wait(
        lambda s: s.get("observedGeneration") == generation, "observed the new generation", timeout=30
    )
    assert active(status) == cluster and not pending(status) and is_ready(status)
    assert await rs.cluster_names() == {cluster}
    assert steps(await rs.history(), "pendingCluster") == [("", cluster)]
