"""Watch → projection against kubesim and a real nats-server: keys, KV entries, events, lifecycle facts."""

from __future__ import annotations

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
    assert chain[0]["kv_previous"] is None  # the key's first write since the watcher started
    assert [e["kv_previous"] for e in chain[1:]] == [e["kv_revision"] for e in chain[:-1]]
