"""The RayCluster spec hash (docs/behaviour.md#2.3 "HashWithoutReplicasAndWorkersToDelete").

Role: the value of the head pod annotation ``ray.io/upgrade-strategy-recreate-hash`` and what
``upgradeStrategy: Recreate`` compares it with.

Invariants: computed from the spec as the API server returns it, after removing ``upgradeStrategy``,
head/worker template ``tolerations`` and ``schedulingGates`` and, per worker group, ``replicas``,
``minReplicas``, ``maxReplicas`` and ``scaleStrategy.workersToDelete``; canonical JSON (sorted keys, no
spaces; null, ``{}`` and ``[]`` values dropped, as unset and empty mean the same), SHA-1, base32 with
the extended-hex alphabet and padding. Only internal consistency matters (docs/behaviour.md#2.3): raybus writes
and compares its own hashes. A Go-operator hash on an adopted head pod differs, so adopting such a
cluster with ``Recreate`` recreates its pods once.

Not here: the RayService variant (it hashes a different field set).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(order="sorted")


def _strip_template(template: object) -> object:
    if not isinstance(template, dict):
        return template
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return template
    spec = {k: v for k, v in spec.items() if k not in ("tolerations", "schedulingGates")}
    return {**template, "spec": spec}


def _prune(value: object) -> object:
    """Drop null, empty-object and empty-list values: unset and empty mean the same to KubeRay."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def spec_hash(raw_spec: dict[str, Any]) -> str:
    """The hash of a RayCluster spec (a JSON-shaped dict)."""
    spec = {k: v for k, v in raw_spec.items() if k != "upgradeStrategy"}
    head = spec.get("headGroupSpec")
    if isinstance(head, dict):
        spec["headGroupSpec"] = {**head, "template": _strip_template(head.get("template"))}
    groups = spec.get("workerGroupSpecs")
    if isinstance(groups, list):
        stripped: list[object] = []
        for group in groups:
            if not isinstance(group, dict):
                stripped.append(group)
                continue
            clean = {k: v for k, v in group.items() if k not in ("replicas", "minReplicas", "maxReplicas")}
            clean["template"] = _strip_template(group.get("template"))
            strategy = group.get("scaleStrategy")
            if isinstance(strategy, dict):
                clean["scaleStrategy"] = {k: v for k, v in strategy.items() if k != "workersToDelete"}
            stripped.append(clean)
        spec["workerGroupSpecs"] = stripped
    digest = hashlib.sha1(_encoder.encode(_prune(spec)), usedforsecurity=False).digest()
    return base64.b32hexencode(digest).decode()
