"""The EndpointSlice controller simulator: one ``discovery.k8s.io/v1`` slice per selector Service.

Each Service with a selector gets a slice named ``<service>-<5 hex of its uid>``, labelled
``kubernetes.io/service-name`` and ``endpointslice.kubernetes.io/managed-by``, owned by the Service (so the
core's garbage collector removes it with the Service). Endpoints are the selected pods that have a podIP
and are not finished, with the real controller's conditions: ``ready`` = pod Ready (always true with
``publishNotReadyAddresses``, false while terminating unless so), ``serving`` = pod Ready (or publish),
``terminating`` = deletionTimestamp set; ``targetRef`` names the Pod. Ports come from the Service, named
targetPorts resolved against the first selected pod's container ports.

A slice is rewritten only when its content changes. Services without a selector (user-managed slices)
and ExternalName Services are left alone. Legacy ``v1/Endpoints`` objects are not produced, and a Service
never gets more than one slice (no 100-endpoint split).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from kubesim.dashboard import Clock
from kubesim.hooks import Store, StoreEvent
from kubesim.sims.loop import WorkQueue, consume, process
from kubesim.sims.objects import (
    ENDPOINTSLICES,
    PODS,
    SERVICES,
    is_terminating,
    label_selector_text,
    labels_of,
    name_of,
    namespace_of,
    selector_matches,
    spec_of,
    status_of,
    uid_of,
)
from schema.ray import conventions

ServiceKey = tuple[str, str]
Pair = tuple[str, str, str]
"""``(namespace, label, value)``."""
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"


def slice_name(service: dict[str, Any]) -> str:
    """The slice name of a Service."""
    return f"{name_of(service)}-{hashlib.sha1(uid_of(service).encode()).hexdigest()[:5]}"


def _pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status_of(pod).get("conditions") or [])


def _endpoint(pod: dict[str, Any], *, publish: bool) -> dict[str, Any]:
    terminating = is_terminating(pod)
    ready_pod = _pod_ready(pod)
    serving = publish or ready_pod
    ready = publish or (ready_pod and not terminating)
    endpoint: dict[str, Any] = {
        "addresses": [str(status_of(pod)["podIP"])],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod), "uid": uid_of(pod)},
    }
    node = spec_of(pod).get("nodeName")
    if node:
        endpoint["nodeName"] = node
    return endpoint


def _container_port(pod: dict[str, Any] | None, name: str) -> int | None:
    if pod is None:
        return None
    for container in spec_of(pod).get("containers") or []:
        for entry in container.get("ports") or []:
            if entry.get("name") == name and isinstance(entry.get("containerPort"), int):
                return int(entry["containerPort"])
    return None


def _ports(service: dict[str, Any], first_pod: dict[str, Any] | None) -> list[dict[str, Any]]:
    ports: list[dict[str, Any]] = []
    for entry in spec_of(service).get("ports") or []:
        target = entry.get("targetPort", entry.get("port"))
        number = target if isinstance(target, int) else None
        if isinstance(target, str):
            number = int(target) if target.isdigit() else _container_port(first_pod, target)
        if number is None:
            continue
        port: dict[str, Any] = {"name": entry.get("name", ""), "port": number, "protocol": entry.get("protocol", "TCP")}
        if entry.get("appProtocol"):
            port["appProtocol"] = entry["appProtocol"]
        ports.append(port)
    return ports


class SelectorIndex:
    """Which Services may select a Pod, without testing every Service per Pod event.

    Each Service is filed under one pair of its selector, the one fewest Services' selectors shared
    when it was filed (a cluster's name rather than ``app.kubernetes.io/created-by``). A Service can
    only select a Pod that carries that pair, so a Pod's candidates are the Services filed under its
    own label pairs.
    """

    def __init__(self) -> None:
        self.selectors: dict[ServiceKey, dict[str, str]] = {}
        self._filed: dict[ServiceKey, Pair] = {}
        self._under: dict[Pair, set[ServiceKey]] = {}
        self._uses: dict[Pair, int] = {}

    def put(self, key: ServiceKey, selector: dict[str, str]) -> None:
        """File (or re-file) a Service's selector."""
        self.drop(key)
        if not selector:
            return
        pairs = [(key[0], k, v) for k, v in sorted(selector.items())]
        for pair in pairs:
            self._uses[pair] = self._uses.get(pair, 0) + 1
        filed = min(pairs, key=lambda pair: self._uses[pair])
        self.selectors[key] = selector
        self._filed[key] = filed
        self._under.setdefault(filed, set()).add(key)

    def drop(self, key: ServiceKey) -> None:
        """Forget a Service."""
        selector = self.selectors.pop(key, None)
        if selector is None:
            return
        for k, v in selector.items():
            pair = (key[0], k, v)
            self._uses[pair] -= 1
            if not self._uses[pair]:
                del self._uses[pair]
        filed = self._filed.pop(key)
        self._under[filed].discard(key)
        if not self._under[filed]:
            del self._under[filed]

    def selecting(self, namespace: str, labels: dict[str, str]) -> set[ServiceKey]:
        """The Services whose selector matches these Pod labels."""
        found: set[ServiceKey] = set()
        for k, v in labels.items():
            for key in self._under.get((namespace, k, v), ()):
                if selector_matches(self.selectors[key], labels):
                    found.add(key)
        return found


class EndpointSliceController:
    """Keeps each selector Service's EndpointSlice in step with its pods."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._store: Store | None = None
        self._queue: WorkQueue[ServiceKey] = WorkQueue()
        self._members: dict[ServiceKey, set[str]] = {}
        # The Services each Pod is an endpoint of: a Pod that loses its labels must leave their slices.
        self._member_of: dict[tuple[str, str], set[ServiceKey]] = {}
        self._selectors = SelectorIndex()

    async def run(self, store: Store) -> None:
        """Run until cancelled."""
        self._store = store
        worker = asyncio.ensure_future(process(self._queue, self._reconcile, what="endpointslice controller"))
        try:
            await consume(store, self._on_event, initial=[SERVICES], changes=[PODS])
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    def _on_event(self, event: StoreEvent) -> None:
        obj = event.object
        namespace = namespace_of(obj)
        if event.gvr == SERVICES:
            key = (namespace, name_of(obj))
            if event.type == "DELETED":
                self._set_members(key, set())
                self._selectors.drop(key)
            else:
                self._selectors.put(key, dict(spec_of(obj).get("selector") or {}))
                self._queue.add(key)
        elif event.gvr == PODS:
            pod = (namespace, name_of(obj))
            for key in self._selectors.selecting(namespace, labels_of(obj)) | self._member_of.get(pod, set()):
                self._queue.add(key)

    def _set_members(self, key: ServiceKey, members: set[str]) -> None:
        for name in self._members.pop(key, set()) - members:
            services = self._member_of.get((key[0], name))
            if services is not None:
                services.discard(key)
                if not services:
                    del self._member_of[(key[0], name)]
        if members:
            self._members[key] = members
            for name in members:
                self._member_of.setdefault((key[0], name), set()).add(key)

    def _reconcile(self, key: ServiceKey) -> None:
        store = self._store
        if store is None:
            return
        namespace, name = key
        service = store.get(SERVICES, namespace, name)
        if service is None:
            return
        spec = spec_of(service)
        selector = spec.get("selector") or {}
        if not selector or spec.get("type") == "ExternalName":
            return
        publish = bool(spec.get("publishNotReadyAddresses"))
        # The store filters by the selector before copying: only this Service's pods are cloned.
        label_selector = label_selector_text(selector)
        pods = sorted(
            (
                pod
                for pod in store.list(PODS, namespace, label_selector=label_selector)
                if selector_matches(selector, labels_of(pod))
                and status_of(pod).get("podIP")
                and status_of(pod).get("phase") not in ("Succeeded", "Failed")
            ),
            key=name_of,
        )
        self._set_members(key, {name_of(p) for p in pods})
        labels = {**labels_of(service), conventions.LABEL_SERVICE_NAME: name, MANAGED_BY_LABEL: MANAGED_BY}
        wanted: dict[str, Any] = {
            "addressType": "IPv4",
            "endpoints": [_endpoint(p, publish=publish) for p in pods],
            "ports": _ports(service, pods[0] if pods else None),
        }
        existing = store.get(ENDPOINTSLICES, namespace, slice_name(service))
        if existing is None:
            body = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name(service),
                    "namespace": namespace,
                    "labels": labels,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Service",
                            "name": name,
                            "uid": uid_of(service),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                **wanted,
            }
            store.create(ENDPOINTSLICES, body)
            return
        current = {k: existing.get(k) for k in wanted}
        if current == wanted and labels_of(existing) == labels:
            return
        existing.update(wanted)
        existing["metadata"]["labels"] = labels
        store.update(ENDPOINTSLICES, existing)
