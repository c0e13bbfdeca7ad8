"""The drift check: a watcher whose projection missed changes repairs it from a list of the API server,
and a check that finds nothing wrong writes nothing."""

from __future__ import annotations

from typing import Any

import msgspec
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from schema import subjects
from schema.keys import ReconcileKey
from services.edge.service import Watcher
from services.runtime.metrics import render_prometheus, setup_metrics
from tests.component.watcher.conftest import (
    Bus,
    create_custom,
    create_pod,
    in_thread,
    pod,
    project_and_stop,
    raycluster,
    running_watcher,
    until,
    watcher_settings,
)
from tests.fixtures.kubesim import KubeSimHandle
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

REPAIRS = "raybus_projection_repairs"
"""The repairs counter's family name in the Prometheus text (without ``_total``)."""


def repairs() -> dict[tuple[str, str], float]:
    """``raybus_projection_repairs_total`` by (kind, reason), as this process exports it."""
    text, _ = render_prometheus()
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text.decode()):
        if family.name != REPAIRS:
            continue
        for sample in family.samples:
            if sample.name == f"{REPAIRS}_total":
                found[(sample.labels["kind"], sample.labels["reason"])] = sample.value
    return found


def pods_informer(watcher: Watcher) -> Any:
    return next(i for i in watcher.informers if i.scope.resource.kind == "Pod")


async def test_a_check_repairs_changes_the_watch_never_showed_and_then_writes_nothing(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    setup_metrics("raybus-test")  # what the watcher process does at start; once per process
    ns = kubesim_namespace
    core = client.CoreV1Api(kube.api_client)
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="d")
    quiet = watcher_settings(nats_server.url, str(kube.kubeconfig), ns, check_interval=0)
    await project_and_stop(quiet, bus, kube.api_client, key, ["d-keep", "d-change", "d-vanish"])

    # While the watcher is down, three changes; then its resume point is moved past them, as if their
    # events had been lost: only a check can show them.
    await in_thread(lambda: core.patch_namespaced_pod("d-change", ns, {"metadata": {"labels": {"drift": "yes"}}}))
    await in_thread(lambda: core.delete_namespaced_pod("d-vanish", ns))
    await in_thread(create_pod, kube.api_client, ns, pod("d-new", "d"))
    now = (await in_thread(lambda: core.list_namespaced_pod(ns))).metadata.resource_version
    await bus.buckets.watcher.put(subjects.resume_key(f"pods/{ns}"), now.encode())
    before = repairs()

    checking = watcher_settings(nats_server.url, str(kube.kubeconfig), ns, check_interval=0.5)
    async with running_watcher(checking) as restarted:
        assert restarted.projection is not None
        informer = pods_informer(restarted)
        assert informer.relists == 0  # resumed: the changes were not listed at start

        async def repaired() -> bool:
            changed = await bus.entry(key, "Pod", "d-change")
            return (
                await bus.entry(key, "Pod", "d-new") is not None
                and await bus.entry(key, "Pod", "d-vanish") is None
                and changed is not None
                and changed["metadata"]["labels"].get("drift") == "yes"
            )

        await until(repaired, message="the check repaired the projection", timeout=30)
        assert await bus.entry(key, "Pod", "d-keep") is not None
        after = repairs()
        counted = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        assert {k: v for k, v in counted.items() if v} == {
            ("Pod", "missing"): 1,
            ("Pod", "stale"): 1,
            ("Pod", "vanished"): 1,
        }
        events = await bus.events(key)
        assert sorted((e["event_type"], e["object"]["metadata"]["name"]) for e in events[-3:]) == [
            ("ADDED", "d-new"),
            ("DELETED", "d-vanish"),
            ("MODIFIED", "d-change"),
        ]
        assert restarted.projection.repairs == 3

        projection = restarted.projection
        # The entries are visible in KV a moment before the projection counts their writes as done.
        await eventually(lambda: projection.writes_done >= 3, message="the repairs' writes counted")
        assert (projection.writes_done, projection.events_published) == (3, 3)  # nothing but the repairs

        # The projection now matches the API server: further checks list and write nothing.
        checks = informer.checks
        await eventually(lambda: informer.checks >= checks + 2, message="two more checks")
        assert (projection.repairs, projection.writes_done, projection.events_published) == (3, 3, 3)


async def test_a_check_writes_again_an_entry_lost_from_kv_and_deletes_one_nothing_placed(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    setup_metrics("raybus-test")
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="e")
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns, check_interval=0.5)
    async with running_watcher(settings) as watcher:
        assert watcher.projection is not None
        await in_thread(create_custom, kube.api_client, ns, "rayclusters", raycluster("e"))
        await in_thread(create_pod, kube.api_client, ns, pod("e-head", "e"))
        await until(lambda: bus.entry(key, "Pod", "e-head"), message="the pod projected")
        before = repairs()

        # Behind the watcher's back: the pod's entry deleted, and an entry of a Pod that does not exist.
        await bus.buckets.objects.delete(subjects.entry_key(key, "Pod", "e-head"))
        ghost = pod("e-ghost", "e")
        ghost["metadata"].update(namespace=ns, uid="ghost-uid", resourceVersion="1")
        await bus.buckets.objects.put(subjects.entry_key(key, "Pod", "e-ghost"), msgspec.json.encode(ghost))

        async def repaired() -> bool:
            return await bus.entry(key, "Pod", "e-head") is not None and await bus.entry(key, "Pod", "e-ghost") is None

        await until(repaired, message="the check repaired KV", timeout=30)
        after = repairs()
        counted = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        assert {k: v for k, v in counted.items() if v} == {("Pod", "lost"): 1, ("Pod", "orphaned"): 1}
        events = await bus.events(key)
        assert sorted((e["event_type"], e["object"]["metadata"]["name"]) for e in events[-2:]) == [
            ("DELETED", "e-ghost"),
            ("MODIFIED", "e-head"),
        ]
