"""Suspend and resume (docs/behaviour.md#6.5).

Role: ``spec.suspend: true`` → ``Suspending=True/SuspendRequested`` (Ready, UpgradeInProgress and
RollbackInProgress False/SuspendInProgress, cluster statuses cleared, no endpoints) and a status write;
the next passes delete every owned RayCluster, Service, Gateway and HTTPRoute and keep
``Suspending=True/SuspendInProgress`` until they are gone; then ``Suspended=True`` with everything
False/SuspendComplete. The flag is ignored while Suspending (atomic). ``spec.suspend: false`` on a
Suspended RayService → ``Suspended=False/RayServiceResumed`` and Ready/UpgradeInProgress reset to
False/Initializing with a fresh transition time (the initializing timeout starts again).

Invariants: pure; deletion progress is observed from the snapshot (deletions are watch events), so
nothing waits on a timer.

Not here: the deletions themselves (``cleanup.delete_owned``).
"""

from __future__ import annotations

from typing import Any

from services.reconciler.rayservice.cleanup import delete_owned
from services.reconciler.rayservice.passes import Pass
from services.reconciler.rayservice.status_draft import (
    ACTIVE,
    PENDING,
    READY,
    ROLLBACK_IN_PROGRESS,
    SUSPENDED,
    SUSPENDING,
    UPGRADE_IN_PROGRESS,
)


def _set(pass_: Pass, type_: str, *, status: str, reason: str, message: str, fresh: bool = False) -> None:
    pass_.status.set_condition(
        type_,
        status=status,
        reason=reason,
        message=message,
        now=pass_.now,
        observed_generation=pass_.model.generation,
        fresh=fresh,
    )


def handle_suspend(pass_: Pass, clusters: list[dict[str, Any]]) -> bool:
    """Run the suspend state machine.

    Returns:
        True when the pass stops here (Suspending or Suspended), False to go on reconciling.
    """
    status = pass_.status
    assert pass_.model.spec is not None
    wants_suspend = pass_.model.spec.suspend
    if status.is_true(SUSPENDING):
        remaining = delete_owned(pass_, clusters)
        if remaining:
            _set(
                pass_,
                SUSPENDING,
                status="True",
                reason="SuspendInProgress",
                message=f"Deleting the resources of the RayService ({remaining} left)",
            )
            pass_.rule("6.5/suspend-in-progress")
            return True
        message = "The RayService is suspended: its RayClusters, Services, Gateway and HTTPRoute are deleted"
        _set(pass_, SUSPENDING, status="False", reason="SuspendComplete", message=message)
        _set(pass_, SUSPENDED, status="True", reason="SuspendComplete", message=message)
        for type_ in (READY, UPGRADE_IN_PROGRESS, ROLLBACK_IN_PROGRESS):
            _set(pass_, type_, status="False", reason="SuspendComplete", message=message)
        pass_.rule("6.5/suspend-complete")
        return True
    if status.is_true(SUSPENDED):
        if wants_suspend:
            pass_.rule("6.5/stay-suspended")
            return True
        _set(
            pass_,
            SUSPENDED,
            status="False",
            reason="RayServiceResumed",
            message="spec.suspend is false: the RayService is resumed",
        )
        _set(pass_, READY, status="False", reason="Initializing", message="RayService is initializing", fresh=True)
        _set(
            pass_,
            UPGRADE_IN_PROGRESS,
            status="False",
            reason="Initializing",
            message="RayService is initializing",
            fresh=True,
        )
        pass_.rule("6.5/resume")
        return False
    if wants_suspend:
        message = "spec.suspend is true: deleting the resources of the RayService"
        _set(pass_, SUSPENDING, status="True", reason="SuspendRequested", message=message)
        _set(pass_, READY, status="False", reason="SuspendInProgress", message=message)
        _set(pass_, UPGRADE_IN_PROGRESS, status="False", reason="SuspendInProgress", message=message)
        _set(pass_, ROLLBACK_IN_PROGRESS, status="False", reason="SuspendInProgress", message=message)
        status.set_cluster(ACTIVE, {})
        status.set_cluster(PENDING, {})
        status.set("numServeEndpoints", 0)
        status.set("serviceStatus", "")
        pass_.rule("6.5/suspend-requested")
        return True
    return False
