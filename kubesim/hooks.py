"""The seam between kubesim's API-server core and its simulators (kubelet, Job controller, Ray dashboard).

The core implements :class:`Store`; simulators are :class:`Controller` objects that the server starts and
stops with itself, and they act on objects only through the store, so every change they make gets a
resourceVersion, reaches watchers and goes through the same admission as a client's write.
The service/pod proxy and the pod port-forward ask :class:`ProxyResolver` objects where a Service or Pod
port really listens (a resolver that is a :class:`StoreReader` gets the store when the server starts).

What the core's store (``kubesim.store.ObjectStore``) offers beyond :class:`Store` (backward compatible):

- Store errors are ``kubesim.errors.ApiError`` with the HTTP ``code`` (404, 409, 422, ...), ``reason``
  and ``status()`` (the ``Status`` body a client would get).
- ``delete`` also takes keyword-only ``grace_period_seconds`` and ``propagation_policy``.
- Pod termination: the core removes a deleted Pod at once unless ``handles_pod_termination`` is True
  (set it from a controller's ``run``, or give the controller a ``handles_pod_termination = True``
  attribute, which ``KubeSim.start`` honours). Then a scheduled Pod only gets ``deletionTimestamp`` /
  ``deletionGracePeriodSeconds`` and stays until the kubelet calls
  ``delete(..., grace_period_seconds=0)`` (and its finalizers are gone).
- ``subscribe()`` registers at call time; the iterator has ``aclose()`` to unregister.
- ``subscribe(resources)`` delivers only the changes of those resources, so a simulator that wants Jobs
  does not see every Pod and Event.
- ``create(BINDINGS, binding)`` assigns a Pod to a node as kube-apiserver's Binding does (``spec.nodeName``
  and the ``PodScheduled`` condition): there is no scheduler, and a real server refuses ``spec.nodeName``
  changes through an update.

``kubesim.remote.RemoteStore`` implements the same protocol over HTTP against any API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable


class GVR(NamedTuple):
    """A resource: API group ("" for core), version and plural name."""

    group: str
    version: str
    plural: str


BINDINGS = GVR("", "v1", "bindings")
"""Core v1 Bindings (create only): ``metadata.name`` names the Pod, ``target`` the Node it is bound to."""

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class StoreEvent(NamedTuple):
    """One committed change, in resourceVersion order; ``object`` is the committed object itself, to read
    only (a simulator that needs to change it works on ``Store.get``'s copy)."""

    type: EventType
    gvr: GVR
    object: Mapping[str, Any]


class Store(Protocol):
    """In-process access to the API server's objects (same semantics as the HTTP API)."""

    def get(self, gvr: GVR, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Return a deep copy of the object, or None."""
        ...

    def view(self, gvr: GVR, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The stored object itself, not a copy, or None: for reading only. The store never changes a
        committed object in place (a write stores a new one), so it stays as it was read."""
        ...

    def list(self, gvr: GVR, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Return deep copies of matching objects (namespace None = all namespaces)."""
        ...

    def create(self, gvr: GVR, obj: dict[str, Any]) -> dict[str, Any]:
        """Create (generateName honoured); raises KeyError-like errors of the core on conflict."""
        ...

    def update(self, gvr: GVR, obj: dict[str, Any], *, subresource: str | None = None) -> None:
        """Replace the object (or only its status with subresource="status"); last write wins
        when obj carries no metadata.resourceVersion."""
        ...

    def delete(self, gvr: GVR, namespace: str | None, name: str) -> None:
        """Delete as a client would (finalizers and graceful deletion honoured)."""
        ...

    def subscribe(self, resources: Collection[GVR] | None = None) -> AsyncIterator[StoreEvent]:
        """Every change (of ``resources``, when given) from now on, in order, never dropped."""
        ...


class Controller(Protocol):
    """A simulator loop; the server runs it as a task and cancels it on stop."""

    async def run(self, store: Store) -> None:
        """Run until cancelled."""
        ...


class ProxyResolver(Protocol):
    """Where the service proxy, the pod proxy and the pod port-forward forward to."""

    def resolve_service(self, namespace: str, service: str, port: str) -> str | None:
        """Base URL (``http://127.0.0.1:PORT``) behind ``<service>:<port>``, or None."""
        ...

    def resolve_pod(self, namespace: str, pod: str, port: str) -> str | None:
        """Base URL behind ``<pod>:<port>``, or None."""
        ...


@runtime_checkable
class RequestAdapter(Protocol):
    """A proxy resolver that adapts a request body to the backend it resolved to."""

    def adapt_request(self, base_url: str, method: str, path: str, body: bytes) -> bytes:
        """The body to forward to ``base_url`` (``path`` is the path after ``/proxy``)."""
        ...


@runtime_checkable
class StoreReader(Protocol):
    """A proxy resolver that reads the store: the server hands it the store when it starts."""

    def attach(self, store: Store) -> None:
        """Read objects from ``store`` from now on."""
        ...
