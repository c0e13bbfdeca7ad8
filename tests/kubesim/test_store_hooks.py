"""The store as the simulators use it in-process: filtered subscriptions and status-only updates."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

from kubesim.hooks import GVR, StoreEvent
from tests.fixtures.kubesim import KubeSimHandle

PODS = GVR("", "v1", "pods")
CONFIGMAPS = GVR("", "v1", "configmaps")


def _pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _first_change(kube: KubeSimHandle, resources: Collection[GVR] | None, writes: Callable[[], None]) -> StoreEvent:
    """The first change a subscription made before ``writes`` receives (changes are queued as committed)."""

    async def first() -> StoreEvent:
        events = kube.sim.store.subscribe(resources)
        try:
            writes()
            return await anext(aiter(events))
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    return asyncio.run_coroutine_threadsafe(first(), kube.loop).result()


def _config_map_then_pod(kube: KubeSimHandle, namespace: str) -> Callable[[], None]:
    def writes() -> None:
        store = kube.sim.store
        store.create(CONFIGMAPS, {"metadata": {"namespace": namespace, "name": "cm"}, "data": {"a": "b"}})
        store.create(PODS, _pod(namespace, "p"))

    return writes


def test_a_subscription_to_pods_receives_no_other_change(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    event = _first_change(kubesim_server, {PODS}, _config_map_then_pod(kubesim_server, kubesim_namespace))
    assert (event.type, event.gvr, event.object["metadata"]["name"]) == ("ADDED", PODS, "p")
    stored = kubesim_server.call(lambda: kubesim_server.sim.store.view(PODS, kubesim_namespace, "p"))
    assert event.object is stored  # the committed object itself, not a copy


def test_a_subscription_to_everything_receives_every_change(
    kubesim_server: KubeSimHandle, kubesim_namespace: str
) -> None:
    event = _first_change(kubesim_server, None, _config_map_then_pod(kubesim_server, kubesim_namespace))
    assert (event.type, event.gvr, event.object["metadata"]["name"]) == ("ADDED", CONFIGMAPS, "cm")


def test_a_status_update_changes_only_the_status(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    store = kubesim_server.sim.store

    def update() -> dict[str, Any] | None:
        store.create(PODS, _pod(kubesim_namespace, "p"))
        pod = store.get(PODS, kubesim_namespace, "p")
        assert pod is not None
        pod["spec"]["containers"][0]["image"] = "changed"
        pod["metadata"]["labels"] = {"changed": "yes"}
        pod["status"] = {"phase": "Running"}
        store.update(PODS, pod, subresource="status")
        pod["status"]["phase"] = "Failed"  # the store kept a copy of its own
        return store.get(PODS, kubesim_namespace, "p")

    stored = kubesim_server.call(update)
    assert stored is not None
    assert stored["status"]["phase"] == "Running"
    assert stored["spec"]["containers"][0]["image"] == "x"
    assert "labels" not in stored["metadata"]


def test_a_view_is_not_a_copy_and_a_later_write_leaves_it_as_it_was(
    kubesim_server: KubeSimHandle, kubesim_namespace: str
) -> None:
    store = kubesim_server.sim.store

    def views() -> tuple[Any, Any, Any]:
        store.create(PODS, _pod(kubesim_namespace, "p"))
        before = store.view(PODS, kubesim_namespace, "p")
        same = store.view(PODS, kubesim_namespace, "p")
        assert before is not None and same is before
        store.update(PODS, {**before, "status": {"phase": "Running"}}, subresource="status")
        return before, store.view(PODS, kubesim_namespace, "p"), store.view(PODS, kubesim_namespace, "missing")

    before, after, missing = kubesim_server.call(views)
    assert before["status"]["phase"] == "Pending"
    assert after["status"]["phase"] == "Running"
    assert missing is None
