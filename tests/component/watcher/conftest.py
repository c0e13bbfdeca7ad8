"""Fixtures of the watcher's component tests: kubesim (session server, namespace per test), a real
nats-server per test, object builders, and readers of what the watcher stored on the bus."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import msgspec
import nats
import pytest
from kubernetes import client
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schema import subjects
from schema.keys import ReconcileKey
from services.edge.kubeapi import KubeApi, load_configuration
from services.edge.service import Watcher
from services.runtime.leases import Membership
from services.runtime.settings import BusSettings, KubeSettings, NatsSettings, RaybusSettings
from services.runtime.topology import Buckets, ensure_topology
from tests.fixtures.kubesim import KubeSimHandle, kubesim_namespace, kubesim_server  # noqa: F401
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

T = TypeVar("T")

PARTITIONS = 4
"""Partitions of the test bus (of the watcher's settings too)."""
POD_LABELS = {"ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}


def watcher_settings(nats_url: str, kubeconfig: str, namespace: str, **kube: Any) -> RaybusSettings:
    """Settings of a watcher limited to one test namespace."""
    return RaybusSettings(
        nats=NatsSettings(url=nats_url),
        bus=BusSettings(partitions=PARTITIONS),
        kube=KubeSettings(kubeconfig=kubeconfig, watch_namespaces=(namespace,), **kube),
    )


@contextlib.asynccontextmanager
async def running_watcher(settings: RaybusSettings, *, prober: bool = False) -> AsyncIterator[Watcher]:
    """A started watcher, ready (informers synced), stopped afterwards."""
    watcher = Watcher(settings, prober=prober)
    try:
        await watcher.start()
        await eventually(lambda: watcher.readiness() is None, timeout=20, message="watcher ready")
        yield watcher
    finally:
        await watcher.stop()


def partition_of(key: ReconcileKey) -> int:
    """The partition of ``key`` on the test bus."""
    return subjects.partition_of(key, PARTITIONS)


class Bus:
    """Read-only access to what the watcher stored."""

    def __init__(self, nc: Client, buckets: Buckets) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.buckets = buckets

    def membership(self, member: str = "test-member") -> Membership:
        """A member of the partition leases on this bus (one replica of an applier or prober)."""
        return Membership(self.nc, self.buckets.leases, member, PARTITIONS, RaybusSettings().partitions)

    async def event_counts(self, key: ReconcileKey) -> int:
        """Messages stored on the key's (partitioned) events subject."""
        info = await self.js.stream_info(subjects.EVENTS_STREAM, subjects_filter=f"raybus.part.*.{key.token()}")
        return sum((info.state.subjects or {}).values())

    async def messages(self, stream: str, filter_subject: str) -> list[dict[str, Any]]:
        """Every stored message on a subject filter, decoded as JSON, in stream order (no consumer)."""
        found: list[dict[str, Any]] = []
        sequence = 1
        while True:
            try:
                msg = await self.js.get_msg(stream, seq=sequence, subject=filter_subject, next=True)
            except NotFoundError:
                return found
            assert msg.data is not None and msg.seq is not None
            found.append(msgspec.json.decode(msg.data))
            sequence = msg.seq + 1

    async def events(self, key: ReconcileKey) -> list[dict[str, Any]]:
        """Stored inputs of a key."""
        return await self.messages(subjects.EVENTS_STREAM, f"raybus.part.*.{key.token()}")

    async def results(self, key: ReconcileKey) -> list[dict[str, Any]]:
        """Stored results of a key."""
        return await self.messages(subjects.RESULTS_STREAM, subjects.result_subject(key))

    async def entry(self, key: ReconcileKey, kind: str, name: str) -> dict[str, Any] | None:
        """A projected entry, or None."""
        try:
            got = await self.buckets.objects.get(subjects.entry_key(key, kind, name))
        except Exception:
            return None
        return msgspec.json.decode(got.value) if got.value else None


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A NATS connection with the topology in place."""
    nc = await nats.connect(nats_server.url)
    try:
        buckets = await ensure_topology(
            nc, bus=BusSettings(partitions=PARTITIONS), partitions=RaybusSettings().partitions
        )
        yield Bus(nc, buckets)
    finally:
        await nc.close()


@pytest.fixture
def kube(kubesim_server: KubeSimHandle) -> KubeSimHandle:  # noqa: F811
    """The session's kubesim."""
    return kubesim_server


@pytest.fixture
async def kube_api(kubesim_server: KubeSimHandle) -> AsyncIterator[KubeApi]:  # noqa: F811
    """The watcher's own API adapter on kubesim."""
    api = KubeApi(load_configuration(str(kubesim_server.kubeconfig)), concurrency=4)
    try:
        yield api
    finally:
        await api.close()


# --- object builders (shared with the unit tests' tables where it helps) --------------------------------


def raycluster(name: str, *, labels: dict[str, str] | None = None, auth: bool = False) -> dict[str, Any]:
    """A minimal valid RayCluster."""
    spec: dict[str, Any] = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0"}]}},
        }
    }
    if auth:
        spec["authOptions"] = {"mode": "token"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def rayjob(name: str, *, cluster_selector: str | None = None) -> dict[str, Any]:
    """A minimal valid RayJob."""
    spec: dict[str, Any] = {"entrypoint": "python -c 'print(1)'"}
    if cluster_selector:
        spec["clusterSelector"] = {"ray.io/cluster": cluster_selector}
    else:
        spec["rayClusterSpec"] = raycluster("x")["spec"]
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": spec}


def pod(name: str, cluster: str, *, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Ray head Pod of ``cluster``."""
    metadata: dict[str, Any] = {"name": name, "labels": {**POD_LABELS, "ray.io/cluster": cluster}}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0"}]},
    }


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to ``obj`` (as created, with its uid)."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def create_custom(api_client: client.ApiClient, namespace: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a ray.io object through the official client."""
    created = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "ray.io", "v1", namespace, plural, body
    )
    return cast(dict[str, Any], created)


def create_pod(api_client: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a Pod through the official client (which accepts plain dicts); returns it as a dict."""
    created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, cast(Any, body))
    sanitize = cast(Callable[[object], dict[str, Any]], api_client.sanitize_for_serialization)
    return sanitize(created)


async def until(probe: Callable[[], Awaitable[T | None]], *, message: str, timeout: float = 20.0) -> T:
    """``eventually`` for async probes, typed: the probe's first truthy value."""
    found = await eventually(cast(Callable[[], Awaitable[Any]], probe), timeout=timeout, message=message)
    return cast(T, found)


async def in_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking client call off the loop."""
    return await asyncio.to_thread(fn, *args)


async def every_listing_projected(watcher: Watcher) -> bool:
    """Every scope has a resume point: a listing still queued when a watcher stops is not committed, and
    a restart would rightly relist its scope."""
    assert watcher.projection is not None
    return all(watcher.projection.committed(i.scope) for i in watcher.informers)


async def project_and_stop(
    settings: RaybusSettings, bus: Bus, api_client: client.ApiClient, key: ReconcileKey, pods: Sequence[str]
) -> Watcher:
    """Run a watcher while the RayCluster ``key`` and its ``pods`` are created, until they are projected and
    every scope's listing is committed; then stop it, leaving its resume points to the next watcher."""
    async with running_watcher(settings) as watcher:
        await in_thread(create_custom, api_client, key.namespace, "rayclusters", raycluster(key.name))
        for name in pods:
            await in_thread(create_pod, api_client, key.namespace, pod(name, key.name))
        for name in pods:
            await until(functools.partial(bus.entry, key, "Pod", name), message=f"{name} projected")
        await until(lambda: every_listing_projected(watcher), message="every scope's listing projected")
    return watcher
