"""RayJobs and RayServices on the real API server, read and driven through the official client as cluster
admin: KubeRay's samples applied into namespaces of their own, their status and children read back, and
what a user does with a Ray dashboard (a POST through the API server's service proxy, as ``kubectl proxy``
would send it)."""

from __future__ import annotations

import json
from typing import Any, cast

from kubernetes import client, dynamic

from tests.e2e.pipeline import load_yaml_docs
from tests.helpers import samples_dir
from tests.kubeobjects import meta

GROUP, VERSION = "ray.io", "v1"


def sample_docs(file_name: str) -> list[dict[str, Any]]:
    """The documents of a KubeRay sample."""
    return load_yaml_docs(samples_dir() / file_name)


def apply_docs(api: client.ApiClient, docs: list[dict[str, Any]], namespace: str) -> None:
    """Create a new namespace and every document in it."""
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    dyn = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
        dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(body=doc, namespace=namespace)


def status_of(api: client.ApiClient, plural: str, namespace: str, name: str) -> dict[str, Any]:
    """The status of a ray.io object (empty while it has none)."""
    obj = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name),
    )
    return dict(obj.get("status") or {})


def names(api: client.ApiClient, plural: str, namespace: str) -> set[str]:
    """Names of the ray.io objects of a kind in a namespace."""
    found = cast(
        dict[str, Any], client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
    )
    return {item["metadata"]["name"] for item in found["items"]}


def patch(api: client.ApiClient, plural: str, namespace: str, name: str, body: dict[str, Any]) -> None:
    """A merge patch of a ray.io object."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)


def cluster_pods(api: client.ApiClient, namespace: str, cluster: str) -> list[client.V1Pod]:
    """The Pods of a RayCluster (by its label)."""
    selector = f"ray.io/cluster={cluster}"
    return list(client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items)


def head_pod(api: client.ApiClient, namespace: str, cluster: str) -> client.V1Pod:
    """The one head Pod of a RayCluster."""
    selector = f"ray.io/cluster={cluster},ray.io/node-type=head"
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    assert len(pods) == 1, [meta(p).name for p in pods]
    return pods[0]


def jobs(api: client.ApiClient, namespace: str) -> list[client.V1Job]:
    """The batch Jobs of a namespace."""
    return list(client.BatchV1Api(api).list_namespaced_job(namespace).items)


def job_complete(job: client.V1Job) -> bool:
    """Whether the Job controller marked a Job Complete."""
    assert job.status is not None
    return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])


def ready_endpoint_pods(api: client.ApiClient, namespace: str, service: str) -> set[str]:
    """Names of the Pods behind a Service's ready endpoints (the EndpointSlice controller's view)."""
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return {
        e.target_ref.name
        for s in slices.items
        for e in s.endpoints or []
        if e.target_ref is not None
        and e.target_ref.name is not None
        and (e.conditions is None or e.conditions.ready is not False)
    }


def service_proxy_post(api: client.ApiClient, namespace: str, service: str, path: str, body: dict[str, Any]) -> Any:
    """POST ``body`` (JSON) to ``path`` of a Service through the API server's service proxy; the answer's
    JSON. ``service`` is ``NAME:PORT``."""
    method, url, headers, payload, _ = api.param_serialize(
        "POST",
        f"/api/v1/namespaces/{namespace}/services/{service}/proxy{path}",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=payload)
    return json.loads(response.read())  # type: ignore[no-untyped-call]
