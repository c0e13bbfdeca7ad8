"""The scaling steps shared by the single-host (``reconcile_pods``) and multi-host (``multihost``) paths of
reconcilePods.

Role: the idempotent pod delete (never re-issued for a terminating pod, UID precondition), the stable
scale-down order and lowest-free-index selection.

Not here: how many pods a group wants (``model.desired_pods``), deciding what to create or delete
(``reconcile_pods``, ``multihost``).
"""

from __future__ import annotations

from collections.abc import Iterator

from services.reconciler.raycluster import events
from services.reconciler.raycluster.commands import Plan
from services.reconciler.raycluster.pod_census import PodInfo


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
