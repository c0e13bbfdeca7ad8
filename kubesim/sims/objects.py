"""Resource identities and small accessors shared by the simulators.

Objects cross the store seam as plain dicts (``kubesim.hooks``); these helpers read them without
repeating ``obj.get("metadata", {}).get(...)`` everywhere and turn the core's errors into HTTP codes,
so a simulator can treat "already gone" and "already exists" as done without importing the core.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kubesim.hooks import BINDINGS as BINDINGS  # the simulators bind Pods through the store
from kubesim.hooks import GVR, Store
from schema.ray import conventions

Obj = dict[str, Any]

PODS = GVR("", "v1", "pods")
SERVICES = GVR("", "v1", "services")
SECRETS = GVR("", "v1", "secrets")
CONFIGMAPS = GVR("", "v1", "configmaps")
NODES = GVR("", "v1", "nodes")
LEASES = GVR("coordination.k8s.io", "v1", "leases")
JOBS = GVR("batch", "v1", "jobs")
ENDPOINTSLICES = GVR("discovery.k8s.io", "v1", "endpointslices")
GATEWAYS = GVR(conventions.GATEWAY_GROUP, conventions.GATEWAY_VERSION, "gateways")
GATEWAYCLASSES = GVR(conventions.GATEWAY_GROUP, conventions.GATEWAY_VERSION, "gatewayclasses")
HTTPROUTES = GVR(conventions.GATEWAY_GROUP, conventions.GATEWAY_VERSION, "httproutes")


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's metadata (empty dict when absent)."""
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    """metadata.name."""
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Mapping[str, Any]) -> str:
    """metadata.namespace."""
    return str(meta(obj).get("namespace", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    """metadata.uid."""
    return str(meta(obj).get("uid", ""))


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """metadata.labels (empty dict when absent)."""
    value = meta(obj).get("labels")
    return value if isinstance(value, dict) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """metadata.annotations (empty dict when absent)."""
    value = meta(obj).get("annotations")
    return value if isinstance(value, dict) else {}


def spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's spec (empty dict when absent)."""
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def status_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's status (empty dict when absent)."""
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def is_terminating(obj: Mapping[str, Any]) -> bool:
    """True once metadata.deletionTimestamp is set."""
    return bool(meta(obj).get("deletionTimestamp"))


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Equality-based selector (a Service's ``spec.selector``); an empty selector matches nothing."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def label_selector_text(selector: Mapping[str, str]) -> str:
    """The ``k=v,k2=v2`` form of an equality selector, for ``Store.list``."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def controller_owner_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    """The uid of the controlling owner of ``kind``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("uid", ""))
    return None


def rfc3339(epoch_seconds: float) -> str:
    """Kubernetes' timestamp format (second precision, UTC, ``Z``)."""
    moment = datetime.datetime.fromtimestamp(int(epoch_seconds), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def api_error_code(error: BaseException) -> int | None:
    """The HTTP code of a core store error (``ApiError.code``), or None for anything else."""
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


TRANSIENT_CODES = frozenset({0, 429, 500, 502, 503, 504})
"""Codes of a failure worth trying again: no answer (0, an API server reached over HTTP), throttled, or
the server failing for now."""
RETRY_SECONDS = 0.5
"""How long a simulator waits before it tries a transiently failed write again."""


def is_transient(error: BaseException) -> bool:
    """True for an error a later attempt may not meet (:data:`TRANSIENT_CODES`)."""
    return api_error_code(error) in TRANSIENT_CODES


async def create_in(store: Store, gvr: GVR, obj: Obj) -> Obj:
    """``store.create``, without holding the event loop where the store can (a store over HTTP:
    ``RemoteStore.acreate``), so many simulated objects' writes are in flight at once."""
    acreate = getattr(store, "acreate", None)
    if acreate is None:
        return store.create(gvr, obj)
    created: Obj = await acreate(gvr, obj)
    return created


async def update_in(store: Store, gvr: GVR, obj: Obj, *, subresource: str | None = None) -> None:
    """``store.update``, without holding the event loop where the store can (see :func:`create_in`)."""
    aupdate = getattr(store, "aupdate", None)
    if aupdate is None:
        store.update(gvr, obj, subresource=subresource)
    else:
        await aupdate(gvr, obj, subresource=subresource)
