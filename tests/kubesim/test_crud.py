"""CRUD, metadata and status codes of built-in kinds, through the official client."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle
from tests.kubeobjects import error_body, meta, name_of, version_of


def _pod(name: str, **labels: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or None),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox:1.36")]),
    )


@pytest.fixture
def core(kubesim_server: KubeSimHandle) -> client.CoreV1Api:
    return client.CoreV1Api(kubesim_server.api_client)


def test_create_returns_201_with_server_metadata(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    _, code, _ = core.create_namespaced_pod_with_http_info(kubesim_namespace, _pod("a"))
    pod = core.read_namespaced_pod("a", kubesim_namespace)
    assert code == 201
    assert pod.metadata is not None and pod.status is not None
    assert pod.metadata.uid
    assert int(version_of(pod)) > 0
    assert pod.metadata.creation_timestamp is not None
    assert pod.metadata.generation == 1
    assert pod.status.phase == "Pending"


def test_resource_versions_increase_globally(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    first = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}})  # type: ignore[arg-type]
    second = core.create_namespaced_pod(kubesim_namespace, _pod("b"))
    assert int(version_of(second)) > int(version_of(first))


def test_pod_defaults_are_applied(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    pod = core.create_namespaced_pod(kubesim_namespace, _pod("a"))
    assert pod.spec is not None and pod.status is not None
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.status.qos_class == "BestEffort"


def test_get_missing_is_404_not_found(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("nope", kubesim_namespace)
    body = error_body(err.value)
    assert err.value.status == 404
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"
    assert body["message"] == 'pods "nope" not found'
    assert body["details"] == {"name": "nope", "kind": "pods"}


def test_create_duplicate_is_409_already_exists(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod("a"))
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod(kubesim_namespace, _pod("a"))
    assert err.value.status == 409
    assert error_body(err.value)["reason"] == "AlreadyExists"


def test_create_in_missing_namespace_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod("no-such-namespace", _pod("a"))
    assert err.value.status == 404
    assert error_body(err.value)["message"] == 'namespaces "no-such-namespace" not found'


def test_generate_name_appends_five_chars(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    body = {"metadata": {"generateName": "worker-"}}
    names = {name_of(core.create_namespaced_config_map(kubesim_namespace, body)) for _ in range(5)}  # type: ignore[arg-type]
    assert len(names) == 5
    assert all(n.startswith("worker-") and len(n) == len("worker-") + 5 for n in names)


@pytest.mark.parametrize(
    ("name", "field"),
    [
        pytest.param("Upper", "metadata.name", id="uppercase"),
        pytest.param("under_score", "metadata.name", id="underscore"),
        pytest.param("a" * 254, "metadata.name", id="too-long"),
    ],
)
def test_invalid_names_are_422(core: client.CoreV1Api, kubesim_namespace: str, name: str, field: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": name}})  # type: ignore[arg-type]
    body = error_body(err.value)
    assert err.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == field
    assert body["message"].startswith(f'ConfigMap "{name}" is invalid: metadata.name: Invalid value')


def test_invalid_label_value_is_422(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a", "labels": {"k": "bad value"}}})  # type: ignore[arg-type]
    assert err.value.status == 422
    assert error_body(err.value)["details"]["causes"][0]["field"] == "metadata.labels"


def test_update_with_stale_resource_version_is_409(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    cm = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"k": "1"}})  # type: ignore[arg-type]
    cm.data = {"k": "2"}
    core.replace_namespaced_config_map("a", kubesim_namespace, cm)
    cm.data = {"k": "3"}
    with pytest.raises(client.ApiException) as err:
        core.replace_namespaced_config_map("a", kubesim_namespace, cm)
    assert err.value.status == 409
    assert error_body(err.value)["message"] == (
        'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_update_without_resource_version_wins(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"k": "1"}})  # type: ignore[arg-type]
    body = {"metadata": {"name": "a"}, "data": {"k": "2"}}
    updated = core.replace_namespaced_config_map("a", kubesim_namespace, body)  # type: ignore[arg-type]
    assert updated.data == {"k": "2"}


def test_noop_update_keeps_resource_version(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    cm = core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}, "data": {"k": "1"}})  # type: ignore[arg-type]
    again = core.replace_namespaced_config_map("a", kubesim_namespace, cm)
    assert meta(again).resource_version == meta(cm).resource_version


def test_generation_bumps_on_spec_change_only(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    pod = core.create_namespaced_pod(kubesim_namespace, _pod("a"))
    labelled = core.patch_namespaced_pod("a", kubesim_namespace, {"metadata": {"labels": {"x": "y"}}})
    changed = core.patch_namespaced_pod("a", kubesim_namespace, {"spec": {"activeDeadlineSeconds": 5}})
    assert meta(pod).generation == 1
    assert meta(labelled).generation == 1
    assert meta(changed).generation == 2


def test_update_name_mismatch_is_400(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a"}})  # type: ignore[arg-type]
    with pytest.raises(client.ApiException) as err:
        core.replace_namespaced_config_map("a", kubesim_namespace, {"metadata": {"name": "b"}})  # type: ignore[arg-type]
    assert err.value.status == 400
    assert error_body(err.value)["reason"] == "BadRequest"


def test_service_gets_cluster_ip_unless_headless(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    ports = [{"port": 8265, "name": "dashboard"}]
    normal = core.create_namespaced_service(kubesim_namespace, {"metadata": {"name": "a"}, "spec": {"ports": ports}})  # type: ignore[arg-type]
    headless_body = {"metadata": {"name": "b"}, "spec": {"clusterIP": "None", "ports": ports}}
    headless = core.create_namespaced_service(kubesim_namespace, headless_body)  # type: ignore[arg-type]
    assert normal.spec is not None and normal.spec.cluster_ip is not None and normal.spec.ports is not None
    assert headless.spec is not None
    assert normal.spec.cluster_ip.startswith("10.")
    assert normal.spec.ports[0].target_port == 8265
    assert headless.spec.cluster_ip == "None"


def test_service_cluster_ip_survives_replace(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    first = {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}}
    second = {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 81}]}}
    svc = core.create_namespaced_service(kubesim_namespace, first)  # type: ignore[arg-type]
    replaced = core.replace_namespaced_service("a", kubesim_namespace, second)  # type: ignore[arg-type]
    assert replaced.spec is not None and svc.spec is not None
    assert replaced.spec.cluster_ip == svc.spec.cluster_ip


def test_list_carries_resource_version_and_items(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    for name in ("b", "a", "c"):
        core.create_namespaced_pod(kubesim_namespace, _pod(name))
    listed = core.list_namespaced_pod(kubesim_namespace)
    assert [name_of(p) for p in listed.items] == ["a", "b", "c"]
    assert int(version_of(listed)) >= max(int(version_of(p)) for p in listed.items)


def test_list_chunking_with_limit_and_continue(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    for i in range(7):
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": f"cm-{i}"}})  # type: ignore[arg-type]
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map(kubesim_namespace, limit=3, _continue=token)
        seen += [name_of(c) for c in page.items]
        pages += 1
        assert page.metadata is not None
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"cm-{i}" for i in range(7)]
    assert pages == 3


def test_list_across_namespaces(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod("a", app=kubesim_namespace))
    pods = core.list_pod_for_all_namespaces(label_selector=f"app={kubesim_namespace}", resource_version="0")
    assert [(meta(p).namespace, name_of(p)) for p in pods.items] == [(kubesim_namespace, "a")]


def test_delete_returns_object_and_removes_it(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    core.create_namespaced_pod(kubesim_namespace, _pod("a"))
    deleted = core.delete_namespaced_pod("a", kubesim_namespace)
    assert name_of(deleted) == "a"
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("a", kubesim_namespace)
    assert err.value.status == 404


def test_delete_missing_is_404(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.delete_namespaced_config_map("nope", kubesim_namespace)
    assert err.value.status == 404


def test_batch_jobs_get_selector_and_labels(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    batch = client.BatchV1Api(kubesim_server.api_client)
    body = {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
    }
    job = batch.create_namespaced_job(kubesim_namespace, body)  # type: ignore[arg-type]
    assert job.metadata is not None and job.spec is not None
    assert job.spec.selector is not None and job.spec.template.metadata is not None
    assert job.spec.template.metadata.labels is not None
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": job.metadata.uid}
    assert job.spec.template.metadata.labels["job-name"] == "j"
    assert job.spec.backoff_limit == 6


@pytest.mark.parametrize(
    ("field", "value"),
    [pytest.param("kind", "Secret", id="kind"), pytest.param("apiVersion", "apps/v1", id="apiVersion")],
)
def test_body_type_mismatch_is_400(core: client.CoreV1Api, kubesim_namespace: str, field: str, value: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(kubesim_namespace, {field: value, "metadata": {"name": "a"}})  # type: ignore[arg-type]
    assert err.value.status == 400
    assert "does not match the expected" in error_body(err.value)["message"]


def test_create_with_resource_version_is_400(core: client.CoreV1Api, kubesim_namespace: str) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(kubesim_namespace, {"metadata": {"name": "a", "resourceVersion": "5"}})  # type: ignore[arg-type]
    assert err.value.status == 400
