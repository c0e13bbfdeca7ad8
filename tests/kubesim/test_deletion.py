"""Deletion: finalizers, preconditions, collections, ownerReference GC, namespaces and pod termination."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.helpers import eventually_sync
from tests.kubeobjects import error_body, meta


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


def _exists(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _owned(name: str, owner: Any, *, block: bool = False) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    }
    return {"metadata": {"name": name, "ownerReferences": [ref]}}


def test_finalizers_keep_object_until_removed(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    body = {"metadata": {"name": "a", "finalizers": ["kubesim.test/hold"]}}
    core.create_namespaced_config_map(kubesim_namespace, body)  # type: ignore[arg-type]
    core.delete_namespaced_config_map("a", kubesim_namespace)
    held = core.read_namespaced_config_map("a", kubesim_namespace)
    assert meta(held).deletion_timestamp is not None
    core.patch_namespaced_config_map(
        "a", kubesim_namespace, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    assert not _exists(core.read_namespaced_config_map, "a", kubesim_namespace)


def test_no_new_finalizers_on_terminating_object(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    body = {"metadata": {"name": "a", "finalizers": ["kubesim.test/hold"]}}
    core.create_namespaced_config_map(kubesim_namespace, body)  # type: ignore[arg-type]
    core.delete_namespaced_config_map("a", kubesim_namespace)
    with pytest.raises(client.ApiException) as err:
        core.patch_namespaced_config_map("a", kubesim_namespace, {"metadata": {"finalizers": ["kubesim.test/more"]}})
    assert err.value.status == 422
    core.patch_namespaced_config_map(
        "a", kubesim_namespace, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )


@pytest.mark.parametrize("which", ["uid", "resourceVersion"])
def test_delete_preconditions_mismatch_is_409(core: client.CoreV1Api, kubesim_namespace: str, which: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}})  # type: ignore[arg-type]
    options = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(**{("uid" if which == "uid" else "resource_version"): "1"})
    )
    with pytest.raises(client.ApiException) as err:
        core.delete_namespaced_config_map("a", kubesim_namespace, body=options)
    assert err.value.status == 409
    assert "in the precondition (1) does not match" in error_body(err.value)["message"]


def test_delete_precondition_match_deletes(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    cm = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}})  # type: ignore[arg-type]
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta(cm).uid))
    status: Any = core.delete_namespaced_config_map("a", kubesim_namespace, body=options)
    assert status["status"] == "Success"
    assert not _exists(core.read_namespaced_config_map, "a", kubesim_namespace)


def test_delete_collection_with_label_selector(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    for name, tier in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": name, "labels": {"tier": tier}}})  # type: ignore[arg-type]
    core.delete_collection_namespaced_config_map(kubesim_namespace, label_selector="tier=x")
    assert [meta(c).name for c in core.list_namespaced_config_map(kubesim_namespace).items] == ["c"]


def test_delete_collection_with_field_selector(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    for name in ("a", "b"):
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": name}})  # type: ignore[arg-type]
    core.delete_collection_namespaced_config_map(kubesim_namespace, field_selector="metadata.name=a")
    assert [meta(c).name for c in core.list_namespaced_config_map(kubesim_namespace).items] == ["b"]


def test_background_propagation_deletes_dependents(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.create_namespaced_config_map(kubesim_namespace, _owned("child", owner))  # type: ignore[arg-type]
    core.create_namespaced_secret(kubesim_namespace, _owned("secret-child", owner))  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace, propagation_policy="Background")
    eventually_sync(lambda: not _exists(core.read_namespaced_config_map, "child", kubesim_namespace))
    eventually_sync(lambda: not _exists(core.read_namespaced_secret, "secret-child", kubesim_namespace))


def test_dependent_with_another_live_owner_survives(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    one = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "one"}})  # type: ignore[arg-type]
    two = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "two"}})  # type: ignore[arg-type]
    body = _owned("child", one)
    body["metadata"]["ownerReferences"] += _owned("x", two)["metadata"]["ownerReferences"]
    core.create_namespaced_config_map(kubesim_namespace, body)  # type: ignore[arg-type]
    core.delete_namespaced_config_map("one", kubesim_namespace)
    assert _exists(core.read_namespaced_config_map, "child", kubesim_namespace)


def test_dependent_created_after_its_owner_is_gone_is_collected(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace)
    # what a controller acting on a stale view does: create a child of an owner already deleted
    core.create_namespaced_config_map(kubesim_namespace, _owned("late-child", owner))  # type: ignore[arg-type]
    core.create_namespaced_pod(
        kubesim_namespace,
        {**_owned("late-pod", owner), "spec": {"containers": [{"name": "c", "image": "x"}]}},  # type: ignore[arg-type]
    )
    assert not _exists(core.read_namespaced_config_map, "late-child", kubesim_namespace)
    assert not _exists(core.read_namespaced_pod, "late-pod", kubesim_namespace)


def test_dependent_of_a_recreated_owner_name_is_collected(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    old = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace)
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    # the reference names the old incarnation: its uid is gone even though the name exists again
    core.create_namespaced_config_map(kubesim_namespace, _owned("child", old))  # type: ignore[arg-type]
    assert not _exists(core.read_namespaced_config_map, "child", kubesim_namespace)


def test_dangling_reference_beside_a_live_owner_is_dropped(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    live = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "live"}})  # type: ignore[arg-type]
    gone = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "gone"}})  # type: ignore[arg-type]
    core.delete_namespaced_config_map("gone", kubesim_namespace)
    body = _owned("child", live)
    body["metadata"]["ownerReferences"] += _owned("x", gone)["metadata"]["ownerReferences"]
    core.create_namespaced_config_map(kubesim_namespace, body)  # type: ignore[arg-type]
    child = core.read_namespaced_config_map("child", kubesim_namespace)
    references = meta(child).owner_references
    assert references is not None
    assert [ref.uid for ref in references] == [meta(live).uid]


def test_update_pointing_at_a_missing_owner_collects_the_object(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "child"}})  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace)
    core.patch_namespaced_config_map("child", kubesim_namespace, _owned("child", owner))
    assert not _exists(core.read_namespaced_config_map, "child", kubesim_namespace)


def test_orphan_propagation_removes_owner_references(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.create_namespaced_config_map(kubesim_namespace, _owned("child", owner))  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace, propagation_policy="Orphan")
    child = core.read_namespaced_config_map("child", kubesim_namespace)
    assert meta(child).owner_references is None


def test_foreground_propagation_waits_for_blocking_dependents(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    child = _owned("child", owner, block=True)
    child["metadata"]["finalizers"] = ["kubesim.test/hold"]
    core.create_namespaced_config_map(kubesim_namespace, child)  # type: ignore[arg-type]
    core.delete_namespaced_config_map("owner", kubesim_namespace, propagation_policy="Foreground")
    waiting = core.read_namespaced_config_map("owner", kubesim_namespace)
    assert meta(waiting).finalizers == ["foregroundDeletion"]
    assert meta(waiting).deletion_timestamp is not None
    assert meta(core.read_namespaced_config_map("child", kubesim_namespace)).deletion_timestamp is not None
    core.patch_namespaced_config_map(
        "child", kubesim_namespace, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    eventually_sync(lambda: not _exists(core.read_namespaced_config_map, "owner", kubesim_namespace))


def test_propagation_policy_in_delete_options_body(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    owner = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "owner"}})  # type: ignore[arg-type]
    core.create_namespaced_config_map(kubesim_namespace, _owned("child", owner))  # type: ignore[arg-type]
    core.delete_namespaced_config_map(
        "owner", kubesim_namespace, body=client.V1DeleteOptions(propagation_policy="Orphan")
    )
    assert _exists(core.read_namespaced_config_map, "child", kubesim_namespace)


def test_jobs_orphan_their_pods_by_default(
    kubesim_server: KubeSimHandle, core: client.CoreV1Api, kubesim_namespace: str
) -> None:
    batch = client.BatchV1Api(kubesim_server.api_client)
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}
    job = batch.create_namespaced_job(kubesim_namespace, {"metadata": {"name": "j"}, "spec": spec})  # type: ignore[arg-type]
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": meta(job).uid, "controller": True}
    pod = {"metadata": {"name": "j-pod", "ownerReferences": [ref]}, "spec": spec["template"]["spec"]}
    core.create_namespaced_pod(kubesim_namespace, pod)  # type: ignore[arg-type]
    batch.delete_namespaced_job("j", kubesim_namespace)
    assert _exists(core.read_namespaced_pod, "j-pod", kubesim_namespace)


def test_namespace_deletion_removes_content(core: client.CoreV1Api) -> None:
    ns = f"doomed-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    core.create_namespaced_config_map(ns, {"metadata": {"name": "held", "finalizers": ["kubesim.test/hold"]}})  # type: ignore[arg-type]
    core.delete_namespace(ns)
    terminating = core.read_namespace(ns)
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})  # type: ignore[arg-type]
    core.patch_namespaced_config_map(
        "held", ns, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    assert terminating.status is not None
    assert terminating.status.phase == "Terminating"
    assert err.value.status == 403
    eventually_sync(lambda: not _exists(core.read_namespace, ns))


@pytest.fixture(scope="module")
def kubelet_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    """A server that believes a kubelet finishes pod termination (flag only, no simulator)."""
    handle = start_kubesim(workdir=tmp_path_factory.mktemp("kubesim-kubelet"))
    handle.call(lambda: setattr(handle.sim.store, "handles_pod_termination", True))
    try:
        yield handle
    finally:
        handle.close()


def _scheduled_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]}}


def test_pod_deletion_is_graceful_when_a_kubelet_is_registered(kubelet_sim: KubeSimHandle) -> None:
    core = client.CoreV1Api(kubelet_sim.api_client)
    core.create_namespaced_pod("default", _scheduled_pod("graceful"))  # type: ignore[arg-type]
    terminating = core.delete_namespaced_pod("graceful", "default", grace_period_seconds=5)
    assert meta(terminating).deletion_timestamp is not None
    assert meta(terminating).deletion_grace_period_seconds == 5
    core.delete_namespaced_pod("graceful", "default", grace_period_seconds=0)
    assert not _exists(core.read_namespaced_pod, "graceful", "default")


def test_unscheduled_pods_are_deleted_at_once(kubelet_sim: KubeSimHandle) -> None:
    core = client.CoreV1Api(kubelet_sim.api_client)
    body = {"metadata": {"name": "pending"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    core.create_namespaced_pod("default", body)  # type: ignore[arg-type]
    core.delete_namespaced_pod("pending", "default")
    assert not _exists(core.read_namespaced_pod, "pending", "default")


def test_pods_are_deleted_at_once_without_a_kubelet(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _scheduled_pod("p"))  # type: ignore[arg-type]
    core.delete_namespaced_pod("p", kubesim_namespace)
    assert not _exists(core.read_namespaced_pod, "p", kubesim_namespace)


@pytest.mark.parametrize("name", ["default", "kube-system"])
def test_system_namespaces_may_not_be_deleted(core: client.CoreV1Api, name: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.delete_namespace(name)
    assert err.value.status == 403
    assert error_body(err.value)["message"] == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
