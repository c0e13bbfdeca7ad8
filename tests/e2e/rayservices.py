"""A driver for the RayService end-to-end tests.

``ServiceDriver`` creates a RayService (a KubeRay sample, unchanged but its namespace, or a body built by
a test) in a namespace of its own and reads back its status, clusters, serve Service, EndpointSlices,
the simulated Serve applications (through kubesim's service proxy, as a user with kubectl access would)
and its recorded history. ``EndpointWatch`` samples the serve Service's ready endpoints in a background
task, so a test can prove that a traffic switch never left the Service without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tests.e2e.drivers import ObjectDriver, Rows
from tests.e2e.pipeline import load_yaml_docs
from tests.helpers import eventually, samples_dir

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayservices"
GATEWAY_GROUP, GATEWAY_VERSION = "gateway.networking.k8s.io", "v1"


def sample_service(file_name: str) -> dict[str, Any]:
    """The RayService document of a KubeRay sample."""
    return next(d for d in load_yaml_docs(samples_dir() / file_name) if d.get("kind") == "RayService")


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def is_ready(status: dict[str, Any]) -> bool:
    return status.get("serviceStatus") == "Running" and condition(status, "Ready").get("status") == "True"


def active(status: dict[str, Any]) -> str:
    return str((status.get("activeServiceStatus") or {}).get("rayClusterName") or "")


def pending(status: dict[str, Any]) -> str:
    return str((status.get("pendingServiceStatus") or {}).get("rayClusterName") or "")


class ServiceDriver(ObjectDriver):
    """One RayService in its own namespace."""

    async def _custom(self, method: str, *args: Any, plural: str = PLURAL, group: str = GROUP) -> Any:
        version = GATEWAY_VERSION if group == GATEWAY_GROUP else VERSION
        fn = getattr(self.p.custom(), method)
        return await asyncio.to_thread(fn, group, version, self.namespace, plural, *args)

    async def create(self) -> None:
        namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
        await asyncio.to_thread(self.p.core().create_namespace, namespace)
        await self._custom("create_namespaced_custom_object", self.body)

    async def get(self) -> dict[str, Any]:
        return dict(await self._custom("get_namespaced_custom_object", self.name))

    async def status(self) -> dict[str, Any]:
        return dict((await self.get()).get("status") or {})

    async def patch(self, patch: dict[str, Any]) -> None:
        await self._custom("patch_namespaced_custom_object", self.name, patch)

    async def delete(self) -> None:
        await self._custom("delete_namespaced_custom_object", self.name)

    async def wait_gone(self, *, timeout: float = 60) -> None:
        """Until the RayService (finalizer removed once its clusters are gone) has left the API."""

        async def gone() -> bool:
            self.p.check()
            found = await self._custom("list_namespaced_custom_object")
            return all(item["metadata"]["name"] != self.name for item in found.get("items", []))

        await eventually(gone, timeout=timeout, message=f"{self.name} was never deleted")

    async def wait_ready(self, *, timeout: float = 60) -> dict[str, Any]:
        return await self.wait(
            lambda s: is_ready(s) and (s.get("numServeEndpoints") or 0) > 0 and not pending(s),
            "became Ready with endpoints",
            timeout=timeout,
        )

    async def clusters(self) -> list[dict[str, Any]]:
        found = await self._custom("list_namespaced_custom_object", plural="rayclusters")
        return list(found.get("items", []))

    async def cluster_names(self) -> set[str]:
        return {c["metadata"]["name"] for c in await self.clusters()}

    async def service(self, name: str) -> client.V1Service:
        return await asyncio.to_thread(self.p.core().read_namespaced_service, name, self.namespace)

    async def ready_endpoints(self, service: str) -> set[str]:
        """The pods of every ready endpoint of ``service`` (from its EndpointSlices)."""
        slices = await asyncio.to_thread(
            client.DiscoveryV1Api(self.p.api).list_namespaced_endpoint_slice,
            self.namespace,
            label_selector=f"kubernetes.io/service-name={service}",
        )
        found: set[str] = set()
        for item in slices.items:
            for endpoint in item.endpoints or []:
                ready = endpoint.conditions is None or endpoint.conditions.ready is not False
                ref = endpoint.target_ref
                if ready and ref is not None and ref.kind == "Pod":
                    assert ref.name is not None
                    found.add(ref.name)
        return found

    async def pods(self, cluster: str) -> list[client.V1Pod]:
        found = await asyncio.to_thread(
            self.p.core().list_namespaced_pod, self.namespace, label_selector=f"ray.io/cluster={cluster}"
        )
        return list(found.items)

    def serve_applications(self, cluster: str) -> dict[str, Any]:
        """``GET /api/serve/applications/`` of a cluster's dashboard through kubesim's service proxy."""
        url = (
            f"{self.p.kube.url}/api/v1/namespaces/{self.namespace}/services/{cluster}-head-svc:dashboard"
            "/proxy/api/serve/applications/"
        )
        with urllib.request.urlopen(url, timeout=10) as response:
            return dict(json.loads(response.read()))

    async def applications(self, cluster: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.serve_applications, cluster)

    async def gateway_objects(self, plural: str) -> list[dict[str, Any]]:
        found = await self._custom("list_namespaced_custom_object", plural=plural, group=GATEWAY_GROUP)
        return list(found.get("items", []))

    async def events(self) -> list[client.CoreV1Event]:
        found = await asyncio.to_thread(self.p.core().list_namespaced_event, self.namespace)
        return [e for e in found.items if e.involved_object.kind == "RayService"]

    async def history(self, *, settled: Callable[[Rows], bool] = bool) -> Rows:
        """The recorded transitions (status API) once ``settled`` holds for them."""
        path = f"/v1/rayservices/{self.namespace}/{self.name}/transitions"
        return await self.settled_rows(path, "transitions", settled, "history")


@dataclass
class EndpointWatch:
    """Samples a Service's ready endpoints (and the cluster its selector names) until stopped."""

    driver: ServiceDriver
    service: str
    samples: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    """(the cluster the selector names, the ready endpoints' pods) per sample."""

    async def _run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            svc = await self.driver.service(self.service)
            assert svc.spec is not None
            selected = (svc.spec.selector or {}).get("ray.io/cluster", "")
            self.samples.append((selected, frozenset(await self.driver.ready_endpoints(self.service))))
            await asyncio.sleep(0.01)  # just a yield between samples: each sample is two API reads

    def selected_clusters(self) -> list[str]:
        """The clusters the selector named, in order, without repeats."""
        order: list[str] = []
        for cluster, _ in self.samples:
            if not order or order[-1] != cluster:
                order.append(cluster)
        return order

    def empty_samples(self) -> list[int]:
        return [i for i, (_, endpoints) in enumerate(self.samples) if not endpoints]


@contextlib.asynccontextmanager
async def watching_endpoints(driver: ServiceDriver, service: str) -> AsyncIterator[EndpointWatch]:
    """An :class:`EndpointWatch` running in the background for the body of the ``async with``."""
    watch = EndpointWatch(driver, service)
    stop = asyncio.Event()
    task = asyncio.create_task(watch._run(stop))
    try:
        yield watch
    finally:
        stop.set()
        await task
