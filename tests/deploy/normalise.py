"""Bring a kustomize rendering and a Helm rendering of ``deploy/`` to one form, so they compare equal when
they install the same thing.

The differences this removes, each on purpose (docs/helm.md, "The chart and deploy/"):
- Helm's own labels on every object's metadata (``helm.sh/chart``, ``app.kubernetes.io/managed-by``);
  never on selectors or pod templates, so a chart upgrade rolls no pod and changes no selector.
- The Namespace: kustomize creates ``raybus-system``; Helm needs the release's namespace to exist before it
  installs (its release record lives there), so the chart creates none.
- Generated names: kustomize names the NATS ConfigMap ``raybus-nats-config-<hash of its data>``; the chart
  keeps ``raybus-nats-config`` and rolls the servers through a ``checksum/nats-config`` pod annotation. The
  chart names the topology Job ``raybus-nats-topology-<hash of its spec>`` (a Job cannot change in place).
- Comments and blank lines of ``nats.conf``.
- The reconciler Deployment's ``replicas`` when an autoscaler scales it: the chart leaves the count to the
  autoscaler, so that an upgrade does not reset it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

HELM_LABELS = frozenset({"helm.sh/chart", "app.kubernetes.io/managed-by"})
CONFIG_CHECKSUM = "checksum/nats-config"
GENERATED = {("ConfigMap", "raybus-nats-config"), ("Job", "raybus-nats-topology")}
"""(kind, name) of the objects whose rendered name ends in a hash of their content."""

Key = tuple[str, str, str]
"""kind, namespace, name"""


def base_name(kind: str, name: str) -> str:
    """The name without the hash a generated name ends in."""
    stem = name.rpartition("-")[0]
    return stem if (kind, stem) in GENERATED else name


def _config_text(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    template = obj.get("spec", {}).get("template")
    return template if isinstance(template, dict) else None


def normalise(objects: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The objects by (kind, namespace, name), without the differences listed in this module's doc."""
    objects = [copy.deepcopy(o) for o in objects if o["kind"] != "Namespace"]
    autoscaled = {
        (o["metadata"].get("namespace", ""), o["spec"]["scaleTargetRef"]["name"])
        for o in objects
        if o["kind"] == "HorizontalPodAutoscaler"
    }
    normalised: dict[Key, dict[str, Any]] = {}
    for obj in objects:
        meta = obj["metadata"]
        meta["name"] = base_name(obj["kind"], meta["name"])
        labels = {k: v for k, v in meta.get("labels", {}).items() if k not in HELM_LABELS}
        if labels:
            meta["labels"] = labels
        else:
            meta.pop("labels", None)
        template = _pod_spec(obj)
        if template is not None:
            annotations = template.get("metadata", {}).pop("annotations", {})
            annotations.pop(CONFIG_CHECKSUM, None)
            if annotations:
                template["metadata"]["annotations"] = annotations
            for volume in template["spec"].get("volumes", []):
                if "configMap" in volume:
                    volume["configMap"]["name"] = base_name("ConfigMap", volume["configMap"]["name"])
        if obj["kind"] == "Deployment" and (meta.get("namespace", ""), meta["name"]) in autoscaled:
            obj["spec"].pop("replicas", None)
        if obj["kind"] == "ConfigMap":
            obj["data"] = {k: _config_text(v) for k, v in obj.get("data", {}).items()}
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in normalised, f"{key} rendered twice"
        normalised[key] = obj
    return normalised


def differences(left: dict[Key, dict[str, Any]], right: dict[Key, dict[str, Any]]) -> list[str]:
    """What differs between two normalised renderings, one line per object (empty when they are equal)."""
    lines = [f"only left: {key}" for key in sorted(left.keys() - right.keys())]
    lines += [f"only right: {key}" for key in sorted(right.keys() - left.keys())]
    for key in sorted(left.keys() & right.keys()):
        if left[key] != right[key]:
            lines.append(f"differs: {key}: {', '.join(_paths(left[key], right[key]))}")
    return lines


def _paths(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths where ``a`` and ``b`` differ, with both values at a leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(a.keys() | b.keys()) for p in _paths(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _paths(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {_short(a)} != {_short(b)}"]


def _short(value: Any) -> str:
    text = re.sub(r"\s+", " ", repr(value))
    return text if len(text) <= 160 else text[:157] + "..."
