"""A small in-memory :class:`kubesim.hooks.Store` for testing the simulators without the API-server core.

It keeps objects per GVR, assigns uid/resourceVersion/creationTimestamp, honours generateName, publishes
every change to subscribers, and mimics the core's graceful pod deletion (``handles_pod_termination``:
a scheduled, unfinished pod is only marked terminating until ``delete(grace_period_seconds=0)``).
Owner-reference garbage collection is one level deep (enough for Job → Pod and Service → slice).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
import string
import uuid
from collections.abc import AsyncIterator, Collection
from typing import Any

from kubesim.hooks import GVR, StoreEvent

Obj = dict[str, Any]
PODS = GVR("", "v1", "pods")


class FakeApiError(Exception):
    """An API error with an HTTP code, like the core's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Subscription:
    """Every change after the call, queued (tests may drain ``queue`` directly)."""

    def __init__(self, store: FakeStore, resources: Collection[GVR] | None) -> None:
        self._store = store
        self.resources = resources
        self.queue: asyncio.Queue[StoreEvent] = asyncio.Queue()
        store.subscriptions.append(self)

    def __aiter__(self) -> AsyncIterator[StoreEvent]:
        return self

    async def __anext__(self) -> StoreEvent:
        return await self.queue.get()

    async def aclose(self) -> None:
        if self in self._store.subscriptions:
            self._store.subscriptions.remove(self)


class FakeStore:
    """Objects by (gvr, namespace, name)."""

    def __init__(self, *, known: set[GVR] | None = None) -> None:
        self.objects: dict[GVR, dict[tuple[str, str], Obj]] = {}
        self.subscriptions: list[Subscription] = []
        self.known = known
        self.handles_pod_termination = False
        self._rv = itertools.count(1)

    def _bucket(self, gvr: GVR) -> dict[tuple[str, str], Obj]:
        if self.known is not None and gvr not in self.known:
            raise FakeApiError(404, f"the server could not find the requested resource {gvr}")
        return self.objects.setdefault(gvr, {})

    def _publish(self, kind: str, gvr: GVR, obj: Obj) -> None:
        for sub in self.subscriptions:
            if sub.resources is None or gvr in sub.resources:
                sub.queue.put_nowait(StoreEvent(kind, gvr, copy.deepcopy(obj)))  # type: ignore[arg-type]

    def get(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        obj = self._bucket(gvr).get((namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def view(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        return self.get(gvr, namespace, name)  # a copy: this store changes objects in place

    def list(self, gvr: GVR, namespace: str | None = None, label_selector: str | None = None) -> list[Obj]:
        wanted = dict(part.split("=", 1) for part in label_selector.split(",")) if label_selector else {}
        out = []
        for (ns, _), obj in sorted(self._bucket(gvr).items()):
            labels = obj["metadata"].get("labels") or {}
            if (namespace is None or ns == namespace) and all(labels.get(k) == v for k, v in wanted.items()):
                out.append(copy.deepcopy(obj))
        return out

    def create(self, gvr: GVR, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            meta["name"] = meta["generateName"] + suffix
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._bucket(gvr)
        if key in bucket:
            raise FakeApiError(409, f"{meta['name']} already exists")
        meta.update(uid=str(uuid.uuid4()), resourceVersion=str(next(self._rv)), generation=1)
        meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        bucket[key] = obj
        self._publish("ADDED", gvr, obj)
        return copy.deepcopy(obj)

    def update(self, gvr: GVR, obj: Obj, *, subresource: str | None = None) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._bucket(gvr)
        current = bucket.get(key)
        if current is None:
            raise FakeApiError(404, f"{meta['name']} not found")
        if subresource == "status":
            new = copy.deepcopy(current)
            new["status"] = copy.deepcopy(obj.get("status"))
        else:
            new = copy.deepcopy(obj)
            new["status"] = copy.deepcopy(current.get("status"))
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            for field in ("uid", "creationTimestamp", "deletionTimestamp"):
                if field in current["metadata"]:
                    new["metadata"][field] = current["metadata"][field]
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        bucket[key] = new
        self._publish("MODIFIED", gvr, new)

    def delete(self, gvr: GVR, namespace: str | None, name: str, *, grace_period_seconds: int | None = None) -> None:
        bucket = self._bucket(gvr)
        key = (namespace or "", name)
        obj = bucket.get(key)
        if obj is None:
            raise FakeApiError(404, f"{name} not found")
        graceful = (
            gvr == PODS
            and self.handles_pod_termination
            and grace_period_seconds != 0
            and (obj.get("spec") or {}).get("nodeName")
            and (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        if graceful:
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
                obj["metadata"]["deletionGracePeriodSeconds"] = 30
                obj["metadata"]["resourceVersion"] = str(next(self._rv))
                self._publish("MODIFIED", gvr, obj)
            return
        del bucket[key]
        self._publish("DELETED", gvr, obj)
        uid = obj["metadata"]["uid"]
        for other_gvr, other_bucket in list(self.objects.items()):
            for (ns, other_name), other in list(other_bucket.items()):
                refs = other["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    self.delete(other_gvr, ns, other_name)

    def subscribe(self, resources: Collection[GVR] | None = None) -> Subscription:
        return Subscription(self, resources)
