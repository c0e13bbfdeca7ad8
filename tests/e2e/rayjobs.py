"""RayJob bodies and a driver for the RayJob end-to-end tests.

``small_rayjob`` builds a tiny RayJob (a head, optionally workers, tiny resources) whose outcome is
scripted with kubesim's markers (``KUBESIM_RUN_SECONDS``, ``KUBESIM_EXIT_CODE``, ...; see
kubesim/dashboard/README.md). :class:`JobDriver` creates one in a namespace of its own and reads back
its status, its children, its recorded history and its command audit trail.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

import urllib3
from kubernetes import client

from tests.e2e.clusters import small_cluster
from tests.e2e.drivers import ObjectDriver, Rows
from tests.e2e.pipeline import Pipeline
from tests.helpers import eventually
from tests.kubeobjects import name_of

GROUP, VERSION = "ray.io", "v1"
LONG = "KUBESIM_RUN_SECONDS=inf python main.py"
"""An entrypoint whose Ray job runs until it is stopped."""


def small_rayjob(name: str, *, entrypoint: str = "python main.py", workers: int = 0, **spec: Any) -> dict[str, Any]:
    """A RayJob running ``entrypoint`` on a tiny cluster of its own; ``spec`` adds or replaces fields."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {"entrypoint": entrypoint, "rayClusterSpec": small_cluster(name, workers=workers)["spec"], **spec},
    }


def parse_time(text: str) -> datetime:
    """An RFC 3339 time as Kubernetes and the status API write it."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def steps(rows: Rows, field: str = "jobDeploymentStatus") -> list[tuple[str, str]]:
    """(from, to) of the recorded transitions of one field, in order."""
    return [(r["from_value"], r["to_value"]) for r in rows if r["field"] == field]


def ended(state: str) -> Callable[[Rows], bool]:
    """A history predicate: the last recorded deployment transition went to ``state``."""
    return lambda rows: bool(steps(rows)) and steps(rows)[-1][1] == state


def applied(verb: str, kind: str) -> Callable[[Rows], bool]:
    """An audit predicate: a ``verb`` command on a ``kind`` (or ``dashboard``) was applied."""
    return lambda rows: any(
        r["verb"] == verb and r["target"].split()[0] == kind and r["outcome"] == "applied" for r in rows
    )


def rayjob_statuses(p: Pipeline, namespace: str) -> dict[str, dict[str, Any]]:
    """Status of every RayJob of a namespace, in one list call decoded cheaply (the client's model
    deserialisation of many RayJobs costs more CPU than the pipeline under test)."""
    response = p.custom().list_namespaced_custom_object(GROUP, VERSION, namespace, "rayjobs", _preload_content=False)
    items = json.loads(cast(urllib3.HTTPResponse, response).read())["items"]
    return {item["metadata"]["name"]: dict(item.get("status") or {}) for item in items}


class JobDriver(ObjectDriver):
    """One RayJob in a namespace of its own: create, patch, wait, inspect children, history and audit."""

    async def _custom(self, method: str, plural: str, *args: Any) -> Any:
        fn = getattr(self.p.custom(), method)
        return await asyncio.to_thread(fn, GROUP, VERSION, self.namespace, plural, *args)

    async def create_namespace(self) -> None:
        namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
        await asyncio.to_thread(self.p.core().create_namespace, namespace)

    async def create(self, *, namespace: bool = True) -> None:
        """Create the RayJob (and first its namespace)."""
        if namespace:
            await self.create_namespace()
        await self._custom("create_namespaced_custom_object", "rayjobs", self.body)

    async def create_cluster(self, body: dict[str, Any]) -> None:
        body["metadata"]["namespace"] = self.namespace
        await self._custom("create_namespaced_custom_object", "rayclusters", body)

    async def status(self) -> dict[str, Any]:
        obj = await self._custom("get_namespaced_custom_object", "rayjobs", self.name)
        return dict(obj.get("status") or {})

    async def patch(self, patch: dict[str, Any]) -> None:
        await self._custom("patch_namespaced_custom_object", "rayjobs", self.name, patch)

    async def delete(self) -> None:
        await self._custom("delete_namespaced_custom_object", "rayjobs", self.name)

    async def wait_deployment(self, state: str, *, timeout: float = 60) -> dict[str, Any]:
        return await self.wait(lambda s: s.get("jobDeploymentStatus") == state, f"reached {state}", timeout=timeout)

    async def wait_gone(self, what: str = "was deleted") -> None:
        async def gone() -> bool:
            self.p.check()
            items = (await self._custom("list_namespaced_custom_object", "rayjobs"))["items"]
            return all(item["metadata"]["name"] != self.name for item in items)

        await eventually(gone, message=f"{self.name} never {what}")

    async def clusters(self) -> list[str]:
        """Names of the RayClusters of the namespace."""
        found = await self._custom("list_namespaced_custom_object", "rayclusters")
        return [c["metadata"]["name"] for c in found.get("items", [])]

    async def cluster(self, name: str) -> dict[str, Any] | None:
        found = await self._custom("list_namespaced_custom_object", "rayclusters")
        return next((c for c in found.get("items", []) if c["metadata"]["name"] == name), None)

    async def wait_no_clusters(self, what: str) -> None:
        async def none() -> bool:
            return not await self.clusters()

        await eventually(none, message=f"{self.name}: {what}")

    async def submitter_jobs(self) -> list[str]:
        """Names of the batch Jobs of the namespace."""
        found = await asyncio.to_thread(client.BatchV1Api(self.p.api).list_namespaced_job, self.namespace)
        return [name_of(j) for j in found.items]

    async def head_pod(self, cluster: str) -> client.V1Pod:
        selector = f"ray.io/cluster={cluster},ray.io/node-type=head"
        pods = await asyncio.to_thread(self.p.core().list_namespaced_pod, self.namespace, label_selector=selector)
        assert len(pods.items) == 1, [name_of(x) for x in pods.items]
        return pods.items[0]

    async def dashboard_post(self, service: str, path: str, body: dict[str, Any]) -> Any:
        """POST to a Ray dashboard through kubesim's service proxy, as a user with kubectl access would."""
        url = f"{self.p.kube.url}/api/v1/namespaces/{self.namespace}/services/{service}:dashboard/proxy{path}"
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )

        def post() -> Any:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())

        return await asyncio.to_thread(post)

    async def history(self, *, until: Callable[[Rows], bool]) -> Rows:
        """The RayJob's recorded transitions (status API) once ``until`` holds for them (the status
        service persists a transition a moment after the applier confirmed it)."""
        path = f"/v1/rayjobs/{self.namespace}/{self.name}/transitions"
        return await self.settled_rows(path, "transitions", until, "history")

    async def commands(self, *, until: Callable[[Rows], bool]) -> Rows:
        """The RayJob's command audit trail (status API) once ``until`` holds for it."""
        path = f"/v1/commands?kind=RayJob&namespace={self.namespace}&name={self.name}&limit=500"
        return await self.settled_rows(path, "items", until, "audit trail")
