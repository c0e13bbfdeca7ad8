"""A Gateway API status simulator: accept and program every Gateway, accept every HTTPRoute.

Stands in for a gateway implementation (what a cluster admin installs for RayService incremental
upgrades). It acts only when the Gateway API CRDs are registered in the core; without them it idles.

- GatewayClass: ``Accepted`` True.
- Gateway: ``Accepted`` and ``Programmed`` True (reason = type) with ``observedGeneration``, an
  ``IPAddress`` in 10.96.0.0/16 derived from its uid, and per listener ``attachedRoutes``,
  ``supportedKinds`` and Accepted/Programmed/ResolvedRefs True, Conflicted False.
- HTTPRoute: one ``status.parents[]`` entry per parentRef with ``controllerName``
  ``kubesim.raybus.io/gateway-controller``: ``Accepted`` True (False/``NoMatchingParent`` when the Gateway
  does not exist) and ``ResolvedRefs`` True (False/``BackendNotFound`` while a backend Service is missing).

lastTransitionTime only moves when a condition's status changes. Traffic is not routed anywhere.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from kubesim.dashboard import Clock
from kubesim.hooks import Store, StoreEvent
from kubesim.sims.loop import WorkQueue, consume, process, safe_list
from kubesim.sims.objects import (
    GATEWAYCLASSES,
    GATEWAYS,
    HTTPROUTES,
    SERVICES,
    meta,
    name_of,
    namespace_of,
    rfc3339,
    spec_of,
    status_of,
    uid_of,
)
from schema.ray import conventions

CONTROLLER_NAME = "kubesim.raybus.io/gateway-controller"
Key = tuple[str, str, str]
"""(plural, namespace, name)."""


def _conditions(
    previous: list[Any] | None, wanted: list[tuple[str, bool, str, str]], *, generation: int, now: str
) -> list[dict[str, Any]]:
    """Build conditions, keeping lastTransitionTime of those whose status did not change."""
    old = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out = []
    for kind, ok, reason, message in wanted:
        status = "True" if ok else "False"
        before = old.get(kind)
        since = before.get("lastTransitionTime") if before and before.get("status") == status else now
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": since or now,
            }
        )
    return out


def _address(gateway: dict[str, Any]) -> str:
    digest = hashlib.sha1(uid_of(gateway).encode()).digest()
    return f"10.96.{digest[0]}.{digest[1] % 250 + 2}"


def _parent_namespace(route: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    return str(ref.get("namespace") or namespace_of(route))


def _is_gateway_ref(ref: dict[str, Any]) -> bool:
    return bool(
        ref.get("kind", "Gateway") == "Gateway"
        and ref.get("group", conventions.GATEWAY_GROUP) == conventions.GATEWAY_GROUP
    )


class GatewayStatusController:
    """Writes Gateway API statuses as an always-successful implementation would."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._store: Store | None = None
        self._queue: WorkQueue[Key] = WorkQueue()

    async def run(self, store: Store) -> None:
        """Run until cancelled."""
        self._store = store
        worker = asyncio.ensure_future(process(self._queue, self._reconcile, what="gateway status"))
        try:
            await consume(store, self._on_event, initial=[GATEWAYCLASSES, GATEWAYS, HTTPROUTES], changes=[SERVICES])
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    def _on_event(self, event: StoreEvent) -> None:
        obj, gvr = event.object, event.gvr
        namespace = namespace_of(obj)
        if gvr == GATEWAYCLASSES and event.type != "DELETED":
            self._queue.add((gvr.plural, "", name_of(obj)))
        elif gvr == GATEWAYS and event.type != "DELETED":
            self._queue.add((gvr.plural, namespace, name_of(obj)))
            self._routes_of_namespace(namespace)
        elif gvr == HTTPROUTES:
            if event.type != "DELETED":
                self._queue.add((gvr.plural, namespace, name_of(obj)))
            for ref in spec_of(obj).get("parentRefs") or []:
                if isinstance(ref, dict) and _is_gateway_ref(ref):
                    self._queue.add((GATEWAYS.plural, _parent_namespace(obj, ref), str(ref.get("name", ""))))
        elif gvr == SERVICES:
            self._routes_of_namespace(namespace)

    def _routes_of_namespace(self, namespace: str) -> None:
        if self._store is None:
            return
        for route in safe_list(self._store, HTTPROUTES, namespace):
            self._queue.add((HTTPROUTES.plural, namespace, name_of(route)))

    def _reconcile(self, key: Key) -> None:
        store = self._store
        if store is None:
            return
        plural, namespace, name = key
        gvr = {g.plural: g for g in (GATEWAYCLASSES, GATEWAYS, HTTPROUTES)}[plural]
        obj = store.get(gvr, namespace or None, name)
        if obj is None or meta(obj).get("deletionTimestamp"):
            return
        now = rfc3339(self._clock.time())
        generation = int(meta(obj).get("generation") or 1)
        previous = status_of(obj)
        if gvr == GATEWAYCLASSES:
            status = {
                **previous,
                "conditions": _conditions(
                    previous.get("conditions"),
                    [("Accepted", True, "Accepted", "Handled by the kubesim gateway simulator")],
                    generation=generation,
                    now=now,
                ),
            }
        elif gvr == GATEWAYS:
            status = self._gateway_status(store, obj, generation=generation, now=now)
        else:
            status = self._route_status(store, obj, generation=generation, now=now)
        if status != previous:
            obj["status"] = status
            store.update(gvr, obj, subresource="status")

    def _gateway_status(self, store: Store, gateway: dict[str, Any], *, generation: int, now: str) -> dict[str, Any]:
        previous = status_of(gateway)
        old_listeners = {
            entry.get("name"): entry for entry in previous.get("listeners") or [] if isinstance(entry, dict)
        }
        routes = safe_list(store, HTTPROUTES)
        listeners = []
        for listener in spec_of(gateway).get("listeners") or []:
            listener_name = str(listener.get("name", ""))
            attached = sum(
                1
                for route in routes
                for ref in spec_of(route).get("parentRefs") or []
                if _is_gateway_ref(ref)
                and ref.get("name") == name_of(gateway)
                and _parent_namespace(route, ref) == namespace_of(gateway)
                and ref.get("sectionName") in (None, listener_name)
            )
            old = old_listeners.get(listener_name) or {}
            listeners.append(
                {
                    "name": listener_name,
                    "supportedKinds": [{"group": conventions.GATEWAY_GROUP, "kind": "HTTPRoute"}],
                    "attachedRoutes": attached,
                    "conditions": _conditions(
                        old.get("conditions"),
                        [
                            ("Accepted", True, "Accepted", ""),
                            ("Programmed", True, "Programmed", ""),
                            ("ResolvedRefs", True, "ResolvedRefs", ""),
                            ("Conflicted", False, "NoConflicts", ""),
                        ],
                        generation=generation,
                        now=now,
                    ),
                }
            )
        return {
            "addresses": [{"type": "IPAddress", "value": _address(gateway)}],
            "conditions": _conditions(
                previous.get("conditions"),
                [
                    ("Accepted", True, "Accepted", "Accepted by the kubesim gateway simulator"),
                    ("Programmed", True, "Programmed", "Programmed by the kubesim gateway simulator"),
                ],
                generation=generation,
                now=now,
            ),
            "listeners": listeners,
        }

    def _route_status(self, store: Store, route: dict[str, Any], *, generation: int, now: str) -> dict[str, Any]:
        previous = status_of(route)
        old_parents = [p for p in previous.get("parents") or [] if isinstance(p, dict)]
        missing = []
        for rule in spec_of(route).get("rules") or []:
            for backend in rule.get("backendRefs") or []:
                if backend.get("kind", "Service") != "Service" or backend.get("group", "") not in ("", "core"):
                    continue
                backend_ns = str(backend.get("namespace") or namespace_of(route))
                if store.get(SERVICES, backend_ns, str(backend.get("name", ""))) is None:
                    missing.append(f"{backend_ns}/{backend.get('name', '')}")
        parents = []
        for ref in spec_of(route).get("parentRefs") or []:
            if not isinstance(ref, dict):
                continue
            exists = _is_gateway_ref(ref) and (
                store.get(GATEWAYS, _parent_namespace(route, ref), str(ref.get("name", ""))) is not None
            )
            old = next((p for p in old_parents if p.get("parentRef") == ref), {})
            resolved_message = f"Service(s) {', '.join(missing)} not found" if missing else ""
            parents.append(
                {
                    "parentRef": ref,
                    "controllerName": CONTROLLER_NAME,
                    "conditions": _conditions(
                        old.get("conditions"),
                        [
                            ("Accepted", exists, "Accepted" if exists else "NoMatchingParent", ""),
                            (
                                "ResolvedRefs",
                                not missing,
                                "ResolvedRefs" if not missing else "BackendNotFound",
                                resolved_message,
                            ),
                        ],
                        generation=generation,
                        now=now,
                    ),
                }
            )
        return {**previous, "parents": parents}
