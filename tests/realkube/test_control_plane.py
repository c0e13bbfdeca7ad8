"""The control plane is a working cluster minus scheduling: the controller manager's garbage collector,
namespace, ServiceAccount, Job and EndpointSlice controllers act; finalizers hold a deletion; and a
ServiceAccount kubeconfig from the TokenRequest API authenticates as that account, limited by RBAC."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from kubernetes import client, config

from realkube import ControlPlane
from tests.helpers import eventually_sync
from tests.kubeobjects import meta, uid_of

HOLD = "raybus.io/test-hold"
# Controllers act once their informers have synced, which on a busy machine can take a while after start.
CONTROLLERS = 180.0


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _config_map(
    name: str, *, owner_references: list[client.V1OwnerReference] | None = None, finalizers: list[str] | None = None
) -> client.V1ConfigMap:
    meta = client.V1ObjectMeta(name=name, owner_references=owner_references, finalizers=finalizers)
    return client.V1ConfigMap(metadata=meta, data={"k": "v"})


def test_the_garbage_collector_deletes_dependents_of_a_deleted_owner(
    kube_admin: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    owner = core.create_namespaced_config_map(kube_namespace, _config_map("owner"))
    reference = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=uid_of(owner))
    core.create_namespaced_config_map(kube_namespace, _config_map("dependent", owner_references=[reference]))
    core.create_namespaced_config_map(kube_namespace, _config_map("bystander"))

    core.delete_namespaced_config_map("owner", kube_namespace, propagation_policy="Background")

    eventually_sync(
        lambda: _gone(lambda: core.read_namespaced_config_map("dependent", kube_namespace)),
        timeout=CONTROLLERS,
        message="the dependent is collected",
    )
    assert core.read_namespaced_config_map("bystander", kube_namespace).data == {"k": "v"}


def test_foreground_deletion_waits_for_dependents(kube_admin: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_admin)
    owner = core.create_namespaced_config_map(kube_namespace, _config_map("owner"))
    reference = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=uid_of(owner), block_owner_deletion=True
    )
    core.create_namespaced_config_map(
        kube_namespace, _config_map("dependent", owner_references=[reference], finalizers=[HOLD])
    )

    core.delete_namespaced_config_map("owner", kube_namespace, propagation_policy="Foreground")

    # The owner waits (foregroundDeletion) on a dependent that a finalizer holds.
    held = eventually_sync(
        lambda: meta(core.read_namespaced_config_map("dependent", kube_namespace)).deletion_timestamp,
        timeout=CONTROLLERS,
        message="the collector deletes the dependent",
    )
    assert held
    assert "foregroundDeletion" in (meta(core.read_namespaced_config_map("owner", kube_namespace)).finalizers or [])

    core.patch_namespaced_config_map("dependent", kube_namespace, {"metadata": {"finalizers": None}})
    for name in ("dependent", "owner"):
        eventually_sync(
            partial(_gone, partial(core.read_namespaced_config_map, name, kube_namespace)),
            timeout=CONTROLLERS,
            message=f"{name} is removed",
        )


def test_a_finalizer_holds_deletion_until_removed(kube_admin: client.ApiClient, kube_namespace: str) -> None:
    core = client.CoreV1Api(kube_admin)
    core.create_namespaced_config_map(kube_namespace, _config_map("held", finalizers=[HOLD]))

    core.delete_namespaced_config_map("held", kube_namespace)

    held = meta(core.read_namespaced_config_map("held", kube_namespace))
    assert held.deletion_timestamp is not None
    assert held.finalizers == [HOLD]
    core.patch_namespaced_config_map("held", kube_namespace, {"metadata": {"finalizers": None}})
    eventually_sync(
        lambda: _gone(lambda: core.read_namespaced_config_map("held", kube_namespace)),
        timeout=CONTROLLERS,
        message="held is removed",
    )


def test_a_deleted_namespace_is_emptied_and_removed(kube_admin: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="rk-doomed")))
    core.create_namespaced_config_map("rk-doomed", _config_map("content"))

    core.delete_namespace("rk-doomed")

    eventually_sync(
        lambda: _gone(lambda: core.read_namespace("rk-doomed")), timeout=CONTROLLERS, message="the namespace is removed"
    )


def test_a_job_gets_a_pod_and_a_service_gets_endpoint_slices(kube_admin: client.ApiClient, kube_namespace: str) -> None:
    core, batch = client.CoreV1Api(kube_admin), client.BatchV1Api(kube_admin)
    discovery = client.DiscoveryV1Api(kube_admin)
    # The ServiceAccount controller gives every namespace its default account; Pods need it.
    eventually_sync(
        lambda: core.read_namespaced_service_account("default", kube_namespace),
        timeout=CONTROLLERS,
        message="default SA",
    )
    container = client.V1Container(name="main", image="busybox", command=["true"])
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="once"),
        spec=client.V1JobSpec(
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "once"}),
                spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
            )
        ),
    )
    batch.create_namespaced_job(kube_namespace, job)
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="once"),
        spec=client.V1ServiceSpec(selector={"app": "once"}, ports=[client.V1ServicePort(port=80)]),
    )
    core.create_namespaced_service(kube_namespace, service)

    pods = eventually_sync(
        lambda: core.list_namespaced_pod(kube_namespace, label_selector="job-name=once").items,
        timeout=CONTROLLERS,
        message="the Job controller creates the Pod",
    )
    # No scheduler, no kubelet: the Pod is stored and stays Pending.
    status = pods[0].status
    assert status is not None and status.phase == "Pending"
    slices = discovery.list_namespaced_endpoint_slice
    eventually_sync(
        lambda: slices(kube_namespace, label_selector="kubernetes.io/service-name=once").items,
        timeout=CONTROLLERS,
        message="the EndpointSlice controller creates the Service's slice",
    )


def test_a_service_account_kubeconfig_authenticates_as_the_account(
    real_kube: ControlPlane, kube_admin: client.ApiClient, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    core.create_namespaced_service_account(
        kube_namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    role = client.V1Role(
        metadata=client.V1ObjectMeta(name="configmap-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
    )
    rbac = client.RbacAuthorizationV1Api(kube_admin)
    rbac.create_namespaced_role(kube_namespace, role)
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=kube_namespace)],
    )
    rbac.create_namespaced_role_binding(kube_namespace, binding)

    path = real_kube.service_account_kubeconfig(kube_namespace, "reader")

    assert path.stat().st_mode & 0o077 == 0
    api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    try:
        me = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview()).status
        assert me is not None and me.user_info is not None
        assert me.user_info.username == f"system:serviceaccount:{kube_namespace}:reader"
        # The RBAC authorizer sees the new RoleBinding through its informers, a moment after it is stored.
        eventually_sync(
            lambda: client.CoreV1Api(api).list_namespaced_config_map(kube_namespace).items is not None,
            timeout=CONTROLLERS,
            message="the RoleBinding grants listing ConfigMaps",
        )
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(api).list_namespaced_secret(kube_namespace)
        assert refused.value.status == 403
    finally:
        api.close()
