"""The watcher's probe kinds: what they read, their observation data, and the significance rules of
``schema.probes`` they publish on."""

from __future__ import annotations

from typing import Any

import pytest

from schema.keys import ReconcileKey
from schema.probes import PodEndpoint, ProbeTarget, serve_significant
from schema.probes import serve_health_significant as health_significant
from services.edge.dashboard import DashboardAnswer, pod_base_url
from services.edge.probe.probekinds import PROBE_KINDS, health_data


def _target() -> ProbeTarget:
    pod = PodEndpoint(namespace="ns", name="rs-abcde-head", uid="u1", ip="10.0.0.1", port=8000)
    return ProbeTarget(
        key=ReconcileKey(kind="RayService", namespace="ns", name="rs"),
        source="servehealth",
        entry_kind="obs-servehealth",
        entry_name=pod.name,
        path="/-/healthz",
        pod=pod,
    )


def test_probe_kinds_read_what_their_rules_need() -> None:
    assert {k.name: set(k.kinds) for k in PROBE_KINDS} == {
        "rayjob": {"RayJob", "RayCluster", "Service"},
        "serve": {"RayService", "RayCluster", "Service"},
        "servehealth": {"RayService", "RayCluster", "Pod"},
    }


@pytest.mark.parametrize(
    ("answer", "healthy"),
    [
        pytest.param(DashboardAnswer(status=200, data=b"success"), True, id="success"),
        pytest.param(DashboardAnswer(status=200, data=b"starting"), False, id="other-body"),
        pytest.param(DashboardAnswer(status=503, data=b"This node is being drained."), False, id="draining"),
        pytest.param(DashboardAnswer(status=0, error="ClientConnectorError"), False, id="unreachable"),
    ],
)
def test_health_data(answer: DashboardAnswer, healthy: bool) -> None:
    data = health_data(_target(), answer)
    assert data == {"healthy": healthy, "http_status": answer.status, "pod_uid": "u1"}
    assert health_significant(data) == (healthy, "u1")


def test_health_significance_ignores_the_failure_kind_but_not_the_pod() -> None:
    down = health_significant({"healthy": False, "http_status": 503, "pod_uid": "u1"})
    assert down == health_significant({"healthy": False, "http_status": 0, "pod_uid": "u1"})
    assert down != health_significant({"healthy": False, "http_status": 0, "pod_uid": "u2"})


def _apps(status: str, deployment: str = "HEALTHY", message: str = "") -> dict[str, Any]:
    return {
        "controller_info": {"node_id": "n"},
        "applications": {
            "app": {
                "status": status,
                "message": message,
                "last_deployed_time_s": 1.0,
                "deployments": {"D": {"status": deployment, "message": "", "replicas": []}},
            }
        },
    }


def test_serve_significance_is_statuses_and_messages() -> None:
    base = serve_significant(_apps("RUNNING"))
    noisy = _apps("RUNNING")
    noisy["controller_info"] = {"node_id": "other"}
    noisy["applications"]["app"]["last_deployed_time_s"] = 2.0
    assert serve_significant(noisy) == base
    assert serve_significant(_apps("DEPLOYING", "UPDATING")) != base
    assert serve_significant(_apps("RUNNING", "UNHEALTHY")) != base
    assert serve_significant(_apps("RUNNING", message="m")) != base
    assert serve_significant({"http_status": 0, "error": "refused"}) == ("error", 0, "refused")
    assert serve_significant({"applications": {}}) != serve_significant({"http_status": 404, "error": "x"})


@pytest.mark.parametrize(
    ("use_proxy", "ip", "expected"),
    [
        pytest.param(True, "10.0.0.1", "https://api:6443/api/v1/namespaces/ns/pods/p:8000/proxy", id="proxy"),
        pytest.param(False, "10.0.0.1", "http://10.0.0.1:8000", id="direct"),
        pytest.param(False, "fd00::1", "http://[fd00::1]:8000", id="direct-ipv6"),
    ],
)
def test_pod_base_url(use_proxy: bool, ip: str, expected: str) -> None:
    pod = PodEndpoint(namespace="ns", name="p", uid="u", ip=ip, port=8000)
    assert pod_base_url(pod, use_proxy=use_proxy, api_host="https://api:6443/") == expected
