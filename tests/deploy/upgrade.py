"""What a ``helm upgrade`` from one rendering of the chart to another would break in a running install.

Helm patches each object of the release in place. That fails (or, worse, loses data) where the new chart
changes a field Kubernetes does not let change after creation, or stops rendering an object the old
release had (a rename is a delete and a create: a StatefulSet renamed is a new NATS cluster on empty
volumes). Helm never upgrades ``crds/``: a CRD version the old chart served must still be served by the
new CRDs, which the user applies before the upgrade (docs/helm.md).
"""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

from tests.deploy.normalise import Key, base_name, normalise

IMMUTABLE: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec.selector",),
    "StatefulSet": ("spec.selector", "spec.serviceName", "spec.volumeClaimTemplates", "spec.podManagementPolicy"),
    "Job": ("spec.selector", "spec.template"),
    "Service": ("spec.clusterIP", "spec.clusterIPs"),
    "RoleBinding": ("roleRef",),
    "ClusterRoleBinding": ("roleRef",),
    "CustomResourceDefinition": ("spec.group", "spec.scope", "spec.names.kind", "spec.names.plural"),
}
"""Per kind, the fields the API server refuses to change on an existing object (by dotted path)."""


def _at(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _served_versions(crd: dict[str, Any]) -> set[str]:
    return {v["name"] for v in crd["spec"]["versions"] if v.get("served", True)}


def breaking_changes(old: tuple[dict[str, Any], ...], new: tuple[dict[str, Any], ...]) -> list[str]:
    """One line per change from ``old`` to ``new`` that would break a running install (empty: none)."""
    before, after = normalise(old), normalise(new)
    # A generated name changes with the content: the old object is replaced, not changed in place.
    replaced = {(kind, namespace, base_name(kind, name)) for kind, namespace, name in _names(old) ^ _names(new)}
    found = [f"removed or renamed: {key}" for key in sorted(before.keys() - after.keys())]
    for key in sorted(before.keys() & after.keys()):
        kind = key[0]
        if key in replaced:
            continue
        for path in IMMUTABLE.get(kind, ()):
            if _at(before[key], path) != _at(after[key], path):
                found.append(f"immutable field changed: {key} {path}")
        if kind in {"ConfigMap", "Secret"} and before[key].get("immutable") and before[key] != after[key]:
            found.append(f"immutable object changed: {key}")
        if kind == "CustomResourceDefinition":
            gone = _served_versions(before[key]) - _served_versions(after[key])
            found.extend(f"CRD version no longer served: {key} {version}" for version in sorted(gone))
    return found


def _names(objects: tuple[dict[str, Any], ...]) -> set[Key]:
    """(kind, namespace, name as rendered) of each object."""
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}


def chart_at(repo: Path, commit: str, dest: Path) -> Path:
    """The chart as it was at ``commit`` (with the rest of ``deploy/`` its files link to), under ``dest``.

    Raises:
        subprocess.CalledProcessError: git does not know the commit (a shallow clone, or a wrong id).
    """
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "deploy"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="tar")
    return dest / "deploy" / "helm" / "raybus"
