"""Discovery documents (``/version``, ``/api``, ``/apis``, per-group resource lists) and a minimal OpenAPI.

Only the legacy (unaggregated) discovery format is served: clients that ask for aggregated discovery
get the legacy documents with ``application/json`` and fall back, as they do with older servers.
The OpenAPI v3 documents are deliberately minimal: enough for ``kubectl apply`` to leave validation
to the server (and build strategic merge patches from its own types), no schemas. ``/openapi/v2`` is
not served (kubectl asks for it in protobuf and copes with a 404).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from kubesim import codec
from kubesim.resources import ALL_VERBS, Registry, ResourceInfo

Obj = dict[str, Any]

VERSION_INFO: Obj = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-kubesim",
    "gitCommit": "kubesim",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int]:
    """Sort key putting the preferred version first (v2 > v1 > v1beta2 > v1beta1 > v1alpha1)."""
    m = _VERSION.match(version)
    if m is None:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))


def api_versions(address: str) -> Obj:
    """``/api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    ordered = sorted(versions, key=version_priority)
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in ordered]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries, "preferredVersion": entries[0]}


def api_groups(registry: Registry) -> Obj:
    """``/apis``."""
    groups = [_group(name, versions) for name, versions in registry.group_versions().items() if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, name: str) -> Obj | None:
    """``/apis/<group>``, or None when not served."""
    versions = registry.group_versions().get(name)
    return None if not versions or not name else _group(name, versions)


def _resource_entries(info: ResourceInfo) -> list[Obj]:
    main: Obj = {
        "name": info.plural,
        "singularName": info.singular_name,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": list(ALL_VERBS),
    }
    if info.short_names:
        main["shortNames"] = list(info.short_names)
    if info.categories:
        main["categories"] = list(info.categories)
    entries = [main]
    if info.status:
        entries.append(
            {
                "name": f"{info.plural}/status",
                "singularName": "",
                "namespaced": info.namespaced,
                "kind": info.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if info.storage_key in (("", "services"), ("", "pods")):
        entries.append(
            {
                "name": f"{info.plural}/proxy",
                "singularName": "",
                "namespaced": True,
                "kind": "ServiceProxyOptions" if info.plural == "services" else "PodProxyOptions",
                "verbs": ["create", "delete", "get", "patch", "update"],
            }
        )
    if info.storage_key == ("", "pods"):
        entries.append(
            {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
        )
        entries.append(
            {"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
        )
    return entries


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    """``/api/v1`` or ``/apis/<group>/<version>``, or None when not served."""
    infos = [i for i in registry.all() if i.group == group and i.version == version]
    if not infos:
        return None
    resources = [entry for info in infos for entry in _resource_entries(info)]
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _gv_paths(registry: Registry, group: str, version: str) -> dict[str, Obj]:
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths: dict[str, Obj] = {}
    for info in registry.all():
        if info.group != group or info.version != version:
            continue
        scope = "/namespaces/{namespace}" if info.namespaced else ""
        # Just enough for kubectl: the PATCH operation names its kind and the path accepts
        # ``fieldValidation``, so kubectl leaves validation to the server instead of needing schemas.
        # No requestBody: kubectl then builds strategic merge patches from its compiled-in types.
        paths[f"{prefix}{scope}/{info.plural}/{{name}}"] = {
            "patch": {
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": info.kind},
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK"}},
            },
        }
    return paths


def openapi_v3_document(registry: Registry, group: str, version: str) -> Obj | None:
    """One group-version's OpenAPI v3 document (paths only, no schemas), or None when not served."""
    paths = _gv_paths(registry, group, version)
    if not paths:
        return None
    title = f"{group}/{version}" if group else version
    return {"openapi": "3.0.0", "info": {"title": title, "version": "kubesim"}, "paths": paths}


def openapi_v3_index(registry: Registry) -> Obj:
    """``/openapi/v3``: one entry per served group-version, addressed by a content hash."""
    entries: dict[str, Obj] = {}
    for name, versions in registry.group_versions().items():
        for version in versions:
            key = f"apis/{name}/{version}" if name else f"api/{version}"
            doc = codec.encode(_gv_paths(registry, name, version))
            digest = hashlib.sha256(doc).hexdigest()[:16].upper()
            entries[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": entries}
