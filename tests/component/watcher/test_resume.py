"""HA, restart and relist behaviour of the watcher against kubesim and a real nats-server."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from kubesim.settings import KubeSimSettings
from schema import subjects
from schema.keys import ReconcileKey
from services.edge.service import Watcher
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
from tests.fixtures.kubesim import KubeSimHandle, default_crd_paths, running_kubesim
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

KV_STREAM = subjects.kv_stream(subjects.OBJECTS_BUCKET)


def entry_count(watcher: Watcher) -> int:
    assert watcher.projection is not None
    return watcher.projection.writes_done


async def test_two_replicas_store_each_event_once(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns)
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="ha")
    async with running_watcher(settings) as first, running_watcher(settings) as second:
        await in_thread(create_custom, kube.api_client, ns, "rayclusters", raycluster("ha"))
        await in_thread(create_pod, kube.api_client, ns, pod("ha-head", "ha"))

        async def both_wrote() -> bool:
            return entry_count(first) >= 2 and entry_count(second) >= 2

        await until(both_wrote, message="both replicas projected both objects")
        assert await bus.event_counts(key) == 2
        kv = await bus.js.stream_info(KV_STREAM)
        assert kv.state.last_seq == 2  # two entries, each written once although two replicas wrote them
        results = await bus.results(key)
        assert [r["transitions"][0]["to_value"] for r in results] == ["created"]
        assert first.projection is not None and second.projection is not None
        assert first.projection.events_published + second.projection.events_published == 2


async def test_a_restarted_watcher_resumes_without_relisting_or_republishing(
    nats_server: NatsServer, bus: Bus, kube: KubeSimHandle, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns)
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="rs")
    watcher = await project_and_stop(settings, bus, kube.api_client, key, ["rs-head"])
    assert all(i.relists == 1 for i in watcher.informers)
    stored = await bus.buckets.watcher.get(subjects.resume_key(f"pods/{ns}"))
    assert stored.value

    await in_thread(create_pod, kube.api_client, ns, pod("rs-worker", "rs"))
    async with running_watcher(settings) as restarted:
        await until(lambda: bus.entry(key, "Pod", "rs-worker"), message="the pod created while down")
        assert all(i.relists == 0 for i in restarted.informers)
        assert restarted.projection is not None
        assert restarted.projection.get("RayCluster", "") is None
        assert len(restarted.projection.objects_of("Pod")) == 2
        # The entry is visible in KV a moment before the projection counts its write as done.
        await eventually(lambda: entry_count(restarted) >= 1, message="the new pod's write counted")
        assert entry_count(restarted) == 1  # only the new pod: nothing was re-sent
    assert await bus.event_counts(key) == 3


async def test_a_too_old_resume_point_relists_and_deletes_what_vanished(
    nats_server: NatsServer, bus: Bus, tmp_path: Any
) -> None:
    async with running_kubesim(
        crd_paths=default_crd_paths(), settings=KubeSimSettings(event_window=3), workdir=tmp_path
    ) as kube:
        ns = "gone"
        core = client.CoreV1Api(kube.api_client)
        await in_thread(lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns))))
        settings = watcher_settings(nats_server.url, str(kube.kubeconfig), ns)
        key = ReconcileKey(kind="RayCluster", namespace=ns, name="g")
        await project_and_stop(settings, bus, kube.api_client, key, ["g-keep", "g-vanish"])

        # While the watcher is down: the pod goes away, and enough pod churn happens that the stored
        # resourceVersion falls out of the server's window (410 Gone on resume).
        await in_thread(lambda: core.delete_namespaced_pod("g-vanish", ns))
        for index in range(5):
            await in_thread(lambda i=index: core.create_namespaced_pod(ns, cast(Any, _bare_pod(f"churn-{i}"))))

        async with running_watcher(settings) as restarted:

            async def vanished() -> bool:
                return await bus.entry(key, "Pod", "g-vanish") is None

            await until(vanished, message="synthetic DELETED for the vanished pod")
            pods = next(i for i in restarted.informers if i.scope.resource.kind == "Pod")
            assert pods.relists == 1
            assert await bus.entry(key, "Pod", "g-keep") is not None
            events = await bus.events(key)
            deleted = [e for e in events if e["event_type"] == "DELETED"]
            assert [e["object"]["metadata"]["name"] for e in deleted] == ["g-vanish"]


def _bare_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
