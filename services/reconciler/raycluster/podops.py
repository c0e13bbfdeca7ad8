"""Small pod-planning helpers shared by the single-host and multi-host paths of ``podplan``.

Role: desired replica arithmetic, the idempotent pod delete (never re-issued for a terminating pod,
UID precondition), the stable scale-down order and lowest-free-index selection.

Not here: the planning itself (``podplan``, ``multihost``).
"""

from __future__ import annotations

from collections.abc import Iterator

from schema.ray import WorkerGroupSpec
from services.reconciler.raycluster import events
from services.reconciler.raycluster.commands import Plan
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.podindex import PodInfo


def condition_true(view: ClusterView, condition_type: str) -> bool:
    """True when the RayCluster's status has ``condition_type`` = True."""
    return any(c.type == condition_type and c.status == "True" for c in view.status.conditions or ())


def group_replicas(group: WorkerGroupSpec) -> int:
    """clamp(replicas, min, max), 0 for a suspended group (replicas, not pods)."""
    if group.suspend:
        return 0
    if group.replicas < group.min_replicas:
        return group.min_replicas
    if group.replicas > group.max_replicas:
        return group.max_replicas
    return group.replicas


def desired_pods(group: WorkerGroupSpec) -> int:
    """The pods a group wants: ``group_replicas x numOfHosts``."""
    return group_replicas(group) * max(group.num_of_hosts, 1)


def delete_pod(plan: Plan, pod: PodInfo, *, head: bool, why: str) -> bool:
    """Delete ``pod`` unless it is already terminating. Returns True when a delete was issued."""
    if pod.terminating:
        return False
    plan.delete("Pod", pod.name, uid=pod.uid)
    if head:
        events.deleted_head_pod(plan, pod.name, why)
    else:
        events.deleted_worker_pod(plan, pod.name, why)
    return True


def scale_down_order(items: list[PodInfo]) -> list[PodInfo]:
    return sorted(items, key=lambda p: (not p.terminating, p.name))


def free_indices(used: set[int]) -> Iterator[int]:
    """The indices not in ``used``, lowest first: the next one is the lowest free after taking the previous
    ones (one pass, not a search from 0 per new replica, which made a 5,000-worker scale-up quadratic)."""
    index = 0
    while True:
        if index not in used:
            yield index
        index += 1


def used_indices(infos: list[PodInfo]) -> set[int]:
    used: set[int] = set()
    for info in infos:
        if info.replica_index.isdigit():
            used.add(int(info.replica_index))
    return used
