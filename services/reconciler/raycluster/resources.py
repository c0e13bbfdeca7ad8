"""The ``desiredCPU`` / ``desiredMemory`` / ``desiredGPU`` / ``desiredTPU`` status fields (docs/behaviour.md#1.2).

Role: sum the pod resources the spec asks for: the head pod plus, per worker group, pod resources x
``numOfHosts`` x raw ``replicas`` (not clamped; a docs/behaviour.md#12 quirk kept on purpose). Per container,
requests win over limits; containers are summed. GPU is the sum of every GPU-like resource name.

Invariants: exact arithmetic (``quantity``); each total keeps the format of its first non-zero term, as
Go's ``Quantity.Add`` does (head first, then groups in spec order), so ``5Gi`` + ``1Gi`` prints ``6Gi``.
Suspended groups are skipped (like the replica counts; KubeRay's ``CalculateDesiredResources`` skips them too).

Not here: pod counts (``status``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from schema.ray import RayClusterSpec
from services.reconciler.common.memo import by_identity
from services.reconciler.raycluster.quantity import ZERO, Quantity, try_parse_quantity
from services.reconciler.raycluster.rayparams import is_gpu


class DesiredResources(msgspec.Struct, frozen=True, kw_only=True):
    """Printed totals (``"0"`` when nothing asks for the resource)."""

    cpu: str
    memory: str
    gpu: str
    tpu: str


def pod_resources(template: dict[str, Any]) -> dict[str, Quantity]:
    """Resource name → total over the template's containers (requests win over limits)."""
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    totals: dict[str, Quantity] = {}
    if not isinstance(containers, list):
        return totals
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        if not isinstance(resources, dict):
            continue
        requests = resources.get("requests")
        limits = resources.get("limits")
        merged: dict[str, Any] = dict(requests) if isinstance(requests, dict) else {}
        if isinstance(limits, dict):
            for name, value in limits.items():
                merged.setdefault(name, value)
        for name, raw in merged.items():
            quantity = try_parse_quantity(raw)
            if quantity is None:
                continue
            totals[name] = totals[name].add(quantity) if name in totals else quantity
    return totals


@by_identity()
def desired_resources(spec: RayClusterSpec) -> DesiredResources:
    """The four ``desired*`` status values of ``spec``."""
    totals: dict[str, Quantity] = dict(pod_resources(spec.head_group_spec.template))
    for group in spec.worker_group_specs or ():
        if group.suspend or group.replicas <= 0:
            continue
        factor = max(group.num_of_hosts, 1) * group.replicas
        for name, quantity in pod_resources(group.template).items():
            scaled = quantity.mul(factor)
            totals[name] = totals[name].add(scaled) if name in totals else scaled
    gpu = ZERO
    for name in sorted(totals):
        if is_gpu(name):
            gpu = gpu.add(totals[name])
    return DesiredResources(
        cpu=str(totals.get("cpu", ZERO)),
        memory=str(totals.get("memory", ZERO)),
        gpu=str(gpu),
        tpu=str(totals.get("google.com/tpu", ZERO)),
    )
