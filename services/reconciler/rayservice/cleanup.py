"""Cleanup of a RayService's clusters (docs/behaviour.md#6.1 step 3) and of everything it owns on suspend (#6.5).

Durable deletion delay (KubeRay keeps "cluster → scheduled deletion time" in operator memory, so a
restart restarts every delay): the first pass that sees a dangling cluster (neither active nor
pending) records ``now + rayClusterDeletionDelaySeconds`` as the RayCluster's ``raybus.io/delete-after``
annotation (a merge patch) and asks for a wake-up at that instant; the pass at or after it deletes the
cluster (background propagation, uid precondition). The deadline survives restarts and replays, and
the cluster carries it where ``kubectl`` shows it. A referenced cluster that carries a stale deadline
has it removed. When the RayService is being deleted every cluster is deleted at once (delay 0).

Invariants: pure; a cluster already being deleted gets no second delete; each deletion records an
Event and a ``clusterDeleted`` step fact.

Not here: the finalizer (``reconcile``), suspend conditions (``suspend``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from schema.ray import conventions
from schema.times import format_time, parse_time
from services.reconciler.rayservice import names
from services.reconciler.rayservice.clusters import annotations_of, being_deleted, labels_of, name_of
from services.reconciler.rayservice.model import deletion_delay
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.status_draft import ACTIVE, PENDING, SUSPENDING


def delete_cluster(pass_: Pass, cluster: Mapping[str, Any], *, reason: str) -> None:
    """Delete one RayCluster (background propagation), with its Event and step fact."""
    name = name_of(cluster)
    if not pass_.mark_deleted("RayCluster", name):
        return
    pass_.delete("RayCluster", cluster, propagation="Background")
    pass_.emit("Normal", reason="DeletedRayCluster", message=f"Deleted the RayCluster {pass_.ref.namespace}/{name}")
    pass_.status.step(
        "clusterDeleted", from_value=name, to_value="", reason=reason, message=f"RayCluster {name} deleted"
    )


def _ceil_seconds(moment: datetime) -> datetime:
    """``moment`` rounded up to a whole second."""
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)


def cleanup_dangling(pass_: Pass, clusters: list[dict[str, Any]]) -> bool:
    """Schedule or perform the deletion of every dangling cluster.

    Returns:
        True when clusters remain to be cleaned up (scheduled, waiting or being deleted).
    """
    deleting = pass_.model.deleting
    referenced = set() if deleting else {pass_.status.cluster_name(ACTIVE), pass_.status.cluster_name(PENDING)} - {""}
    # Suspending deletes every cluster right away anyway (docs/behaviour.md#6.5): no point in scheduling.
    suspending = pass_.status.is_true(SUSPENDING)
    delay = 0 if deleting or suspending else deletion_delay(pass_.model)
    remaining = False
    for cluster in clusters:
        name = name_of(cluster)
        annotations = annotations_of(cluster)
        if name in referenced:
            if names.ANN_DELETE_AFTER in annotations and not being_deleted(cluster):
                pass_.patch(
                    "RayCluster",
                    cluster,
                    body={"metadata": {"annotations": {names.ANN_DELETE_AFTER: None}}},
                    guarded=False,
                )
                pass_.rule("6.1/cleanup-unschedule-referenced")
            continue
        remaining = True
        if being_deleted(cluster):
            continue
        if delay == 0:
            reason = "RayServiceDeleted" if deleting else "Suspended" if suspending else "DeletionDelayPassed"
            delete_cluster(pass_, cluster, reason=reason)
            pass_.rule("6.1/cleanup-delete-now")
            continue
        deadline = parse_time(annotations.get(names.ANN_DELETE_AFTER))
        if deadline is None:
            # The annotation holds whole seconds: round up, so the delay is never cut short.
            deadline = _ceil_seconds(pass_.now + timedelta(seconds=delay))
            pass_.patch(
                "RayCluster",
                cluster,
                body={"metadata": {"annotations": {names.ANN_DELETE_AFTER: format_time(deadline)}}},
                guarded=False,
            )
            pass_.wake(deadline)
            pass_.rule("6.1/cleanup-schedule")
        elif pass_.now >= deadline:
            delete_cluster(pass_, cluster, reason="DeletionDelayPassed")
            pass_.rule("6.1/cleanup-delete-after-delay")
        else:
            pass_.wake(deadline)
            pass_.rule("6.1/cleanup-waiting")
    return remaining


def owned_services(pass_: Pass) -> list[dict[str, Any]]:
    """Services labelled as created by this RayService (``<rs>-head-svc``, the serve Service)."""
    found = []
    for service in pass_.snapshot.of_kind("Service"):
        labels = labels_of(service)
        if (
            labels.get(conventions.LABEL_ORIGIN_NAME) == pass_.model.name
            and labels.get(conventions.LABEL_ORIGIN_CRD) == names.ORIGIN_CRD
        ):
            found.append(service)
    return found


def delete_owned(pass_: Pass, clusters: list[dict[str, Any]]) -> int:
    """Suspend: delete every owned RayCluster, Service, Gateway and HTTPRoute; count what remains."""
    remaining = 0
    for cluster in clusters:
        remaining += 1
        if not being_deleted(cluster):
            delete_cluster(pass_, cluster, reason="Suspended")
    others: list[tuple[str, dict[str, Any]]] = [("Service", s) for s in owned_services(pass_)]
    for kind, name in (
        ("Gateway", names.gateway_name(pass_.model.name)),
        ("HTTPRoute", names.httproute_name(pass_.model.name)),
    ):
        obj = pass_.snapshot.get(kind, name)
        if obj is not None:
            others.append((kind, obj))
    for kind, obj in others:
        remaining += 1
        if not being_deleted(obj) and pass_.mark_deleted(kind, name_of(obj)):
            pass_.delete(kind, obj)
    return remaining
