"""The RayService view folded from the transitions the RayService reconcile records."""

from __future__ import annotations

import random

import pytest

from services.status.transition_folds import Fact, RayServiceState, fold_rayservice
from tests.unit.status.builders import at


def fact(
    field: str, frm: str, to_value: str, seconds: float, seq: int, /, *, reason: str = "", **attributes: str
) -> Fact:
    """A transition; attributes named like keywords (``from``, ``to``) go in as ``**{"from": ...}``."""
    return Fact(
        field=field, from_value=frm, to_value=to_value, at=at(seconds), seq=seq, attributes=attributes, reason=reason
    )


FIRST_CLUSTER = [
    fact("lifecycle", "", "created", 0, 1),
    fact("condition/Ready", "", "False", 1, 2, reason="Initializing"),
    fact("pendingCluster", "", "rs-aaaaa", 1, 2, reason="NewClusterPrepared", activeCluster=""),
    fact("traffic", "", "rs-aaaaa", 5, 3, reason="ServiceSelectorSwitched", **{"from": "", "to": "rs-aaaaa"}),
    fact("activeCluster", "", "rs-aaaaa", 5, 3, reason="PendingClusterPromoted", **{"from": "", "to": "rs-aaaaa"}),
    fact("serviceStatus", "", "Running", 6, 4, reason="NonZeroServeEndpoints"),
    fact("condition/Ready", "False", "True", 6, 4, reason="NonZeroServeEndpoints"),
]
BLUE_GREEN = [
    *FIRST_CLUSTER,
    fact("pendingCluster", "", "rs-bbbbb", 10, 5, reason="NewClusterPrepared", activeCluster="rs-aaaaa"),
    fact("condition/UpgradeInProgress", "False", "True", 10, 5, reason="BothActivePendingClustersExist"),
    fact(
        "traffic",
        "rs-aaaaa",
        "rs-bbbbb",
        14,
        6,
        reason="ServiceSelectorSwitched",
        **{"from": "rs-aaaaa", "to": "rs-bbbbb"},
    ),
    fact("activeCluster", "rs-aaaaa", "rs-bbbbb", 14, 6, reason="PendingClusterPromoted"),
    fact("clusterDeleted", "rs-aaaaa", "", 20, 7, reason="DanglingCluster"),
]


def _step(to_pending: int, seconds: float, seq: int, *, back: bool = False) -> Fact:
    """An incremental traffic step as the reconcile records it (backwards during a rollback)."""
    if back:
        attrs = {"from": "rs-bbbbb", "to": "rs-aaaaa", "toPercent": str(100 - to_pending)}
        return fact("traffic", "", str(100 - to_pending), seconds, seq, reason="RollbackStep", **attrs)
    attrs = {"from": "rs-aaaaa", "to": "rs-bbbbb", "toPercent": str(to_pending)}
    return fact("traffic", "", str(to_pending), seconds, seq, reason="IncrementalStep", **attrs)


INCREMENTAL_ROLLBACK = [
    *FIRST_CLUSTER,
    fact("pendingCluster", "", "rs-bbbbb", 10, 5, activeCluster="rs-aaaaa"),
    _step(10, 12, 6),
    _step(20, 13, 7),
    fact("rollback", "", "InProgress", 14, 8, reason="DesiredClusterSpecChanged"),
    _step(10, 15, 9, back=True),
    _step(0, 16, 10, back=True),
    fact("rollback", "InProgress", "Complete", 17, 11, reason="RollbackComplete"),
    fact("clusterDeleted", "rs-bbbbb", "", 30, 12),
]


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param([], RayServiceState(), id="nothing"),
        pytest.param(
            FIRST_CLUSTER,
            {
                "service_status": "Running",
                "ready_reason": "NonZeroServeEndpoints",
                "active_cluster": "rs-aaaaa",
                "pending_cluster": "",
                "serving_cluster": "rs-aaaaa",
                "clusters_created": 1,
                "upgrades": 0,
                "ready_at": at(6),
                "upgrade_started_at": None,
                "last_upgrade_seconds": None,
            },
            id="first-cluster-is-no-upgrade",
        ),
        pytest.param(
            BLUE_GREEN,
            {
                "active_cluster": "rs-bbbbb",
                "pending_cluster": "",
                "serving_cluster": "rs-bbbbb",
                "clusters_created": 2,
                "clusters_deleted": 1,
                "upgrades": 1,
                "upgrade_started_at": at(10),
                "upgraded_at": at(14),
                "last_upgrade_seconds": 4.0,
                "ready_at": at(6),
                "updated_at": at(20),
            },
            id="blue-green",
        ),
        pytest.param(
            INCREMENTAL_ROLLBACK[:-5],
            {"pending_cluster": "rs-bbbbb", "pending_traffic_percent": 20, "rollback_status": ""},
            id="incremental-mid-way",
        ),
        pytest.param(
            INCREMENTAL_ROLLBACK[:-3],
            {"pending_traffic_percent": 10, "rollbacks": 1},
            id="rolling-back",
        ),
        pytest.param(
            INCREMENTAL_ROLLBACK,
            {
                "active_cluster": "rs-aaaaa",
                "pending_cluster": "",
                "pending_traffic_percent": None,
                "rollback_status": "Complete",
                "rollbacks": 1,
                "upgrades": 0,
                "clusters_created": 2,
                "clusters_deleted": 1,
            },
            id="rolled-back",
        ),
        pytest.param(
            [
                *FIRST_CLUSTER[:3],
                fact("pendingCluster", "rs-aaaaa", "", 30, 5, reason="InitializingTimeout"),
                fact("condition/Ready", "False", "False", 30, 5, reason="InitializingTimeout"),
            ],
            {"service_status": "", "ready_reason": "InitializingTimeout", "pending_cluster": "", "ready_at": None},
            id="initializing-timeout",
        ),
    ],
)
def test_rayservice_view(facts: list[Fact], expected: RayServiceState | dict[str, object]) -> None:
    view = fold_rayservice(facts)
    if isinstance(expected, RayServiceState):
        assert view == expected
        return
    for name, value in expected.items():
        assert getattr(view, name) == value, name


@pytest.mark.parametrize("facts", [BLUE_GREEN, INCREMENTAL_ROLLBACK])
def test_rayservice_view_ignores_order(facts: list[Fact]) -> None:
    expected = fold_rayservice(facts)
    shuffled = list(facts)
    for seed in range(20):
        random.Random(seed).shuffle(shuffled)
        assert fold_rayservice(shuffled) == expected
