"""CustomResourceDefinitions: checking a CRD, and turning it into served resources.

A CRD contributes one :class:`~kubesim.resources.ResourceInfo` per served version, carrying that
version's structural schema, status-subresource flag and printer columns. The CRD's status
(``acceptedNames``, ``Established``/``NamesAccepted`` conditions) is what the real apiextensions
controllers write a moment after creation; kubesim writes it in the same call.
"""

from __future__ import annotations

from typing import Any

from kubesim.errors import Cause
from kubesim.resources import ResourceInfo

Obj = dict[str, Any]


def validate_crd(crd: Obj) -> list[Cause]:
    """Causes that make a CRD unacceptable (the subset of checks clients trip over)."""
    causes: list[Cause] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    if not group:
        causes.append(Cause("FieldValueRequired", "spec.group", "Required value"))
    if not plural:
        causes.append(Cause("FieldValueRequired", "spec.names.plural", "Required value"))
    if not names.get("kind"):
        causes.append(Cause("FieldValueRequired", "spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            Cause(
                "FieldValueNotSupported",
                "spec.scope",
                f'Unsupported value: "{spec.get("scope")}": supported values: "Cluster", "Namespaced"',
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append(
            Cause(
                "FieldValueRequired",
                "spec.versions",
                "Required value: must have exactly one version marked as storage version",
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            Cause(
                "FieldValueInvalid",
                "spec.versions",
                "Invalid value: must have exactly one version marked as storage version",
            )
        )
    name = (crd.get("metadata") or {}).get("name")
    if group and plural and name != f"{plural}.{group}":
        causes.append(
            Cause(
                "FieldValueInvalid",
                "metadata.name",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
            )
        )
    return causes


def storage_version(crd: Obj) -> str:
    """The version objects are stored at."""
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return str(version["name"])
    return str(crd["spec"]["versions"][0]["name"])


def resource_infos(crd: Obj) -> list[ResourceInfo]:
    """One served resource per served version of the CRD."""
    spec = crd["spec"]
    names = spec["names"]
    infos: list[ResourceInfo] = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        infos.append(
            ResourceInfo(
                group=spec["group"],
                version=version["name"],
                kind=names["kind"],
                plural=names["plural"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status="status" in (version.get("subresources") or {}),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                singular=names.get("singular") or names["kind"].lower(),
                custom=True,
                schema=schema if isinstance(schema, dict) else None,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return infos


def established_status(crd: Obj, now: str) -> Obj:
    """The status the apiextensions controllers give an accepted CRD."""
    names = dict(crd["spec"]["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    conditions = [
        {
            "type": "NamesAccepted",
            "status": "True",
            "reason": "NoConflicts",
            "message": "no conflicts found",
            "lastTransitionTime": now,
        },
        {
            "type": "Established",
            "status": "True",
            "reason": "InitialNamesAccepted",
            "message": "the initial names have been accepted",
            "lastTransitionTime": now,
        },
    ]
    return {
        "acceptedNames": names,
        "conditions": conditions,
        "storedVersions": [storage_version(crd)],
    }
