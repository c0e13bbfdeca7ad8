"""Inputs of the CRD tests: the shared KubeRay / Gateway API CRDs and a small hand-written CRD.

The KubeRay and Gateway API CRDs are the copies in tests/data (see its README).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import conformance_dir


def load_yaml(path: Path) -> dict[str, Any]:
    """The single document of a YAML file."""
    # The C loader: KubeRay's CRDs are ~85k lines and the pure-Python loader takes seconds.
    doc = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert isinstance(doc, dict), f"{path} is not a YAML mapping"
    return doc


def kuberay_crd(name: str) -> dict[str, Any]:
    """One of KubeRay's CRDs, e.g. ``rayclusters``."""
    return load_yaml(conformance_dir() / "kuberay" / "crds" / f"ray.io_{name}.yaml")


def gateway_crd(name: str) -> dict[str, Any]:
    """One of the Gateway API standard-channel CRDs, e.g. ``gateways``."""
    return load_yaml(conformance_dir() / "gateway-api" / f"gateway.networking.k8s.io_{name}.yaml")


def widget_crd(group: str) -> dict[str, Any]:
    """A small CRD exercising every schema rule kubesim checks, in its own API group."""
    spec_schema = {
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
            "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 8},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "ratio": {"type": "number", "nullable": True},
            "items": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["key"],
                "items": {
                    "type": "object",
                    "required": ["key"],
                    "properties": {"key": {"type": "string"}, "count": {"type": "integer", "default": 1}},
                },
            },
        },
    }
    version_schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec_schema,
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": version_schema,
                    "subresources": {"status": {}},
                },
                {"name": "v1beta1", "served": True, "storage": False, "schema": version_schema},
            ],
        },
    }
