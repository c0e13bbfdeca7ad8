"""Watch → projection against kubesim and a real nats-server: keys, KV entries, events, lifecycle facts."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from schema.keys import ReconcileKey
from tests.component.watcher.conftest import (
    Bus,
    create_custom,
    create_pod,
    in_thread,
    owner_ref,
    pod,
    project_and_stop,
    raycluster,
    rayjob,
    running_watcher,
    until,
    watcher_settings,
)
from tests.fixtures.kubesim import KubeSimHandle
from tests.fixtures.nats import NatsServer

MERGE = "application/merge-patch+json"


async def test_pod_of_a_rayjob_cluster_reaches_both_keys(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns)
    async with running_watcher(settings):
        job = await in_thread(create_custom, kube.api_client, ns, "rayjobs", rayjob("rj"))
        labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"}
        cluster_body = raycluster("rj-abcde", labels=labels)
        cluster_body["metadata"]["ownerReferences"] = [owner_ref(job)]
        cluster = await in_thread(create_custom, kube.api_client, ns, "rayclusters", cluster_body)
        head = pod("rj-abcde-head-x1.y", "rj-abcde", owner=owner_ref(cluster))
        await in_thread(create_pod, kube.api_client, ns, head)

        job_key = ReconcileKey(kind="RayJob", namespace=ns, name="rj")
        cluster_key = ReconcileKey(kind="RayCluster", namespace=ns, name="rj-abcde")
        await until(lambda: bus.entry(job_key, "Pod", "rj-abcde-head-x1.y"), message="pod under the RayJob key")
        await until(lambda: bus.entry(cluster_key, "Pod", "rj-abcde-head-x1.y"), message="pod under the cluster")
        assert await bus.entry(job_key, "RayCluster", "rj-abcde") is not None
        assert await bus.entry(job_key, "RayJob", "rj") is not None
        assert await bus.entry(cluster_key, "RayCluster", "rj-abcde") is not None

        events = await bus.events(job_key)
        kinds = sorted({(e["entry_kind"], e["event_type"]) for e in events})
        assert kinds == [("Pod", "ADDED"), ("RayCluster", "ADDED"), ("RayJob", "ADDED")]
        pod_event = next(e for e in events if e["entry_kind"] == "Pod")
        assert pod_event["kv_revision"] > 0
        assert pod_event["object"]["metadata"]["name"] == "rj-abcde-head-x1.y"
        assert pod_event["key"] == {"kind": "RayJob", "namespace": ns, "name": "rj"}

        results = await until(lambda: bus.results(job_key), message="lifecycle fact")
        assert results[0]["verb"] == "observe"
        assert results[0]["transitions"][0]["to_value"] == "created"


async def test_each_event_of_a_key_after_its_first_names_the_write_before_it(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    # What lets a reconciler holding the key apply the events' objects instead of reading the key again.
    key = ReconcileKey(kind="RayCluster", namespace=kubesim_namespace, name="chain")
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), key.namespace)
    await project_and_stop(settings, bus, kube.api_client, key, ["chain-head", "chain-worker-a", "chain-worker-b"])
    chain = sorted(await bus.events(key), key=lambda e: e["kv_revision"])
    assert len(chain) == 4
    assert chain[0]["kv_previous"] == 0  # a new key: nothing was written under it before
    assert [e["kv_previous"] for e in chain[1:]] == [e["kv_revision"] for e in chain[:-1]]


async def test_a_change_of_the_keys_own_status_alone_is_marked_as_such(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    """The echo of a status write, and only it: a label changed beside the status, or the same status change
    seen under another key (a RayJob's cluster), is an ordinary event."""
    ns = kubesim_namespace
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns)
    custom = client.CustomObjectsApi(kube.api_client)
    async with running_watcher(settings):
        job = await in_thread(create_custom, kube.api_client, ns, "rayjobs", rayjob("sj"))
        labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "sj"}
        body = raycluster("sj-cluster", labels=labels)
        body["metadata"]["ownerReferences"] = [owner_ref(job)]
        await in_thread(create_custom, kube.api_client, ns, "rayclusters", body)
        own = ReconcileKey(kind="RayCluster", namespace=ns, name="sj-cluster")
        job_key = ReconcileKey(kind="RayJob", namespace=ns, name="sj")

        def patch_status() -> None:
            status = {"status": {"state": "ready"}}
            custom.patch_namespaced_custom_object_status(
                "ray.io", "v1", ns, "rayclusters", "sj-cluster", status, _content_type=MERGE
            )

        def patch_labels() -> None:
            labels = {"metadata": {"labels": {"team": "a"}}}
            custom.patch_namespaced_custom_object(
                "ray.io", "v1", ns, "rayclusters", "sj-cluster", labels, _content_type=MERGE
            )

        async def modified(key: ReconcileKey, count: int) -> list[dict[str, Any]] | None:
            events = [e for e in await bus.events(key) if e["entry_kind"] == "RayCluster"]
            changes = [e for e in events if e["event_type"] == "MODIFIED"]
            return changes if len(changes) >= count else None

        await in_thread(patch_status)
        echo = (await until(lambda: modified(own, 1), message="the status change"))[0]
        assert echo["status_only"] is True
        under_job = (await until(lambda: modified(job_key, 1), message="the status change under the RayJob"))[0]
        assert under_job["status_only"] is False
        await in_thread(patch_labels)
        assert (await until(lambda: modified(own, 2), message="the label change"))[1]["status_only"] is False
