"""A snapshot never shows a parent alive after its children's deletions were projected.

The race, made deterministic: a RayCluster is deleted on kubesim (its Pod goes with it, later on the API
server), and the Pod informer delivers the Pod's DELETED while the RayCluster informer has not delivered
the cluster's DELETE yet.
"""

from __future__ import annotations

from typing import Any

import msgspec
from kubernetes import client

from schema.keys import ReconcileKey
from services.edge.kubeapi import KubeApi
from services.edge.resources import ResourceType, by_kind
from services.edge.watch.informer import Batch, Change, Scope, make_change
from services.edge.watch.owners import api_owner_reader
from services.edge.watch.projection import Projection
from tests.component.watcher.conftest import Bus, create_custom, create_pod, in_thread, owner_ref, pod, raycluster
from tests.fixtures.kubesim import KubeSimHandle


def resource(kind: str) -> ResourceType:
    found = by_kind(kind)
    assert found is not None
    return found


def change(kind: str, type_: str, obj: dict[str, Any]) -> Change:
    return make_change(resource(kind), type_, msgspec.json.encode(obj))  # type: ignore[arg-type]


async def events_of(bus: Bus, key: ReconcileKey) -> list[tuple[str, str, str]]:
    return [(e["entry_kind"], e["event_type"], e["resource_version"]) for e in await bus.events(key)]


async def project(projection: Projection, kind: str, ns: str, *changes: Change) -> None:
    await projection.project(Batch(Scope(resource(kind), ns), changes))
    await projection.drain()


async def projected_pair(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, ns: str, cluster_body: dict[str, Any], child: str
) -> tuple[Projection, dict[str, Any], dict[str, Any]]:
    """A RayCluster and one Pod of it, created on kubesim and projected (the informers were in step)."""
    cluster = await in_thread(create_custom, kube.api_client, ns, "rayclusters", cluster_body)
    name = cluster["metadata"]["name"]
    made = await in_thread(create_pod, kube.api_client, ns, pod(child, name, owner=owner_ref(cluster)))
    projection = Projection(bus.js, owners=api_owner_reader(kube_api))
    await project(projection, "RayCluster", ns, change("RayCluster", "ADDED", cluster))
    await project(projection, "Pod", ns, change("Pod", "ADDED", made))
    return projection, cluster, made


async def test_a_child_deletion_seen_before_its_owners_is_projected_after_it(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    projection, cluster, head = await projected_pair(bus, kube, kube_api, ns, raycluster("c"), "c-head")

    await in_thread(
        lambda: client.CustomObjectsApi(kube.api_client).delete_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "c"
        )
    )
    gone_head = {**head, "metadata": {**head["metadata"], "resourceVersion": str(10**9)}}
    # the Pod informer is first: the cluster's own DELETE has not reached the projection
    await project(projection, "Pod", ns, change("Pod", "DELETED", gone_head))

    key = ReconcileKey(kind="RayCluster", namespace=ns, name="c")
    events = await events_of(bus, key)
    assert events[-2:] == [
        ("RayCluster", "DELETED", cluster["metadata"]["resourceVersion"]),
        ("Pod", "DELETED", str(10**9)),
    ], events
    assert await bus.entry(key, "RayCluster", "c") is None

    # the cluster's DELETE arriving now changes nothing
    await project(projection, "RayCluster", ns, change("RayCluster", "DELETED", cluster))
    assert await events_of(bus, key) == events


async def test_a_child_deletion_of_a_live_owner_projects_as_before(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    projection, _, worker = await projected_pair(bus, kube, kube_api, ns, raycluster("alive"), "alive-worker")
    await in_thread(lambda: client.CoreV1Api(kube.api_client).delete_namespaced_pod("alive-worker", ns))
    await project(projection, "Pod", ns, change("Pod", "DELETED", worker))
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="alive")
    events = await events_of(bus, key)
    assert [e[:2] for e in events] == [("RayCluster", "ADDED"), ("Pod", "ADDED"), ("Pod", "DELETED")]
    assert await bus.entry(key, "RayCluster", "alive") is not None


async def test_an_owner_being_deleted_is_projected_with_its_deletion_timestamp_first(
    bus: Bus, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    body = raycluster("held")
    body["metadata"]["finalizers"] = ["raybus.test/hold"]
    projection, cluster, head = await projected_pair(bus, kube, kube_api, ns, body, "held-head")
    custom = client.CustomObjectsApi(kube.api_client)
    await in_thread(
        lambda: custom.delete_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "held", propagation_policy="Foreground"
        )
    )
    going = {**head, "metadata": {**head["metadata"], "deletionTimestamp": "2025-01-01T00:00:00Z"}}
    await project(projection, "Pod", ns, change("Pod", "MODIFIED", going))
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="held")
    entry = await bus.entry(key, "RayCluster", "held")
    assert entry is not None and entry["metadata"].get("deletionTimestamp")
    # the informer's older version of the cluster, arriving late, does not make it alive again
    await project(projection, "RayCluster", ns, change("RayCluster", "MODIFIED", cluster))
    entry = await bus.entry(key, "RayCluster", "held")
    assert entry is not None and entry["metadata"].get("deletionTimestamp")
    await in_thread(
        lambda: custom.patch_namespaced_custom_object(
            "ray.io", "v1", ns, "rayclusters", "held", {"metadata": {"finalizers": None}}
        )
    )
