"""Which reconcile keys an object belongs to (keymap) and how the relation index follows objects."""

from __future__ import annotations

from typing import Any

import pytest

from schema.keys import ReconcileKey
from services.edge.watch.keymap import EMPTY_INDEX, KeyIndex, dependencies, keys_for, origin_keys, selected_clusters
from services.edge.watch.relations import Relations

NS = "team-a"


def key(kind: str, name: str, namespace: str = NS) -> ReconcileKey:
    return ReconcileKey(kind=kind, namespace=namespace, name=name)  # type: ignore[arg-type]


def obj(
    kind: str,
    name: str,
    *,
    api_version: str | None = None,
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
    namespace: str | None = NS,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    if owners:
        metadata["ownerReferences"] = owners
    body: dict[str, Any] = {"kind": kind, "metadata": metadata}
    if api_version:
        body["apiVersion"] = api_version
    if spec is not None:
        body["spec"] = spec
    return body


def owner(kind: str, name: str, *, controller: bool = True, api_version: str = "ray.io/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": controller}


ORIGIN_RJ = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"}

INDEX = KeyIndex(
    cluster_owners={(NS, "rj-abcde"): (key("RayJob", "rj"),), (NS, "rs-xyz12"): (key("RayService", "rs"),)},
    cluster_selectors={(NS, "shared"): (key("RayJob", "sel-1"), key("RayJob", "sel-2"))},
    service_keys={
        (NS, "rj-abcde-head-svc"): (key("RayCluster", "rj-abcde"), key("RayJob", "rj")),
        (NS, "rs-xyz12-serve-svc"): (key("RayCluster", "rs-xyz12"), key("RayService", "rs")),
        (NS, "plain"): (),
    },
)


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        pytest.param(
            "RayCluster", obj("RayCluster", "c1", api_version="ray.io/v1"), [key("RayCluster", "c1")], id="cr"
        ),
        pytest.param("RayJob", obj("RayJob", "rj"), [key("RayJob", "rj")], id="cr-without-apiversion"),
        pytest.param("RayService", obj("RayService", "rs"), [key("RayService", "rs")], id="rayservice"),
        pytest.param("RayCronJob", obj("RayCronJob", "cron"), [key("RayCronJob", "cron")], id="raycronjob"),
        pytest.param(
            "RayCluster",
            obj("RayCluster", "c1", api_version="example.com/v1"),
            [],
            id="same-kind-other-group-is-not-a-key",
        ),
        pytest.param(
            "RayCluster",
            obj("RayCluster", "rj-abcde", owners=[owner("RayJob", "rj")]),
            [key("RayCluster", "rj-abcde"), key("RayJob", "rj")],
            id="cluster-owned-by-rayjob",
        ),
        pytest.param(
            "RayCluster",
            obj("RayCluster", "rj-abcde", labels=ORIGIN_RJ),
            [key("RayCluster", "rj-abcde"), key("RayJob", "rj")],
            id="cluster-with-origin-labels",
        ),
        pytest.param(
            "RayCluster",
            obj("RayCluster", "shared"),
            [key("RayCluster", "shared"), key("RayJob", "sel-1"), key("RayJob", "sel-2")],
            id="cluster-selected-by-rayjobs",
        ),
        pytest.param(
            "RayJob",
            obj("RayJob", "cron-29000000", labels={"ray.io/cronjob-name": "cron"}),
            [key("RayJob", "cron-29000000"), key("RayCronJob", "cron")],
            id="rayjob-of-a-cronjob-by-label",
        ),
        pytest.param(
            "RayJob",
            obj("RayJob", "cron-1", owners=[owner("RayCronJob", "cron")], labels={"ray.io/cronjob-name": "cron"}),
            [key("RayJob", "cron-1"), key("RayCronJob", "cron")],
            id="rayjob-of-a-cronjob-by-owner-and-label-once",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "c1-head-abcde", labels={"ray.io/cluster": "c1"}, owners=[owner("RayCluster", "c1")]),
            [key("RayCluster", "c1")],
            id="pod-of-a-plain-cluster",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "rj-abcde-head-x", labels={"ray.io/cluster": "rj-abcde"}),
            [key("RayCluster", "rj-abcde"), key("RayJob", "rj")],
            id="pod-of-a-rayjob-cluster-reaches-both",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "rs-xyz12-worker-y", labels={"ray.io/cluster": "rs-xyz12"}),
            [key("RayCluster", "rs-xyz12"), key("RayService", "rs")],
            id="pod-of-a-rayservice-cluster",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "shared-head-1", labels={"ray.io/cluster": "shared"}),
            [key("RayCluster", "shared")],
            id="pod-of-a-selected-cluster-stays-with-the-cluster",
        ),
        pytest.param(
            "Service",
            obj("Service", "shared-head-svc", labels={"ray.io/cluster": "shared"}),
            [key("RayCluster", "shared"), key("RayJob", "sel-1"), key("RayJob", "sel-2")],
            id="head-service-of-a-selected-cluster-reaches-the-rayjobs",
        ),
        pytest.param(
            "Service",
            obj("Service", "rj-head-svc", owners=[owner("RayJob", "rj")], labels=ORIGIN_RJ),
            [key("RayJob", "rj")],
            id="rayjob-head-service",
        ),
        pytest.param(
            "Service",
            obj(
                "Service",
                "c1-serve-svc",
                labels={"ray.io/originated-from-crd": "RayCluster", "ray.io/originated-from-cr-name": "c1"},
            ),
            [key("RayCluster", "c1")],
            id="service-originated-from-a-raycluster",
        ),
        pytest.param(
            "Service",
            obj(
                "Service",
                "rs-xyz12-serve-svc",
                labels={"ray.io/originated-from-crd": "RayService", "ray.io/originated-from-cr-name": "rs-xyz12"},
                owners=[owner("RayCluster", "rs-xyz12")],
            ),
            [key("RayCluster", "rs-xyz12"), key("RayService", "rs-xyz12"), key("RayService", "rs")],
            id="per-cluster-serve-service-of-an-incremental-upgrade-reaches-the-rayservice",
        ),
        pytest.param(
            "Service",
            obj(
                "Service",
                "rj-abcde-serve-svc",
                labels={"ray.io/originated-from-crd": "RayCluster", "ray.io/originated-from-cr-name": "rj-abcde"},
            ),
            [key("RayCluster", "rj-abcde"), key("RayJob", "rj")],
            id="object-originated-from-a-cluster-reaches-its-owners",
        ),
        pytest.param(
            "Job",
            obj("Job", "rj", labels={**ORIGIN_RJ, "app.kubernetes.io/created-by": "kuberay-operator"}),
            [key("RayJob", "rj")],
            id="submitter-job-by-labels",
        ),
        pytest.param(
            "Secret",
            obj("Secret", "c1", labels={"ray.io/cluster": "c1"}, owners=[owner("RayCluster", "c1")]),
            [key("RayCluster", "c1")],
            id="auth-secret",
        ),
        pytest.param(
            "EndpointSlice",
            obj("EndpointSlice", "rs-xyz12-serve-svc-8x", labels={"kubernetes.io/service-name": "rs-xyz12-serve-svc"}),
            [key("RayService", "rs")],
            id="endpointslice-follows-its-service-to-rayservice-keys-only",
        ),
        pytest.param(
            "EndpointSlice",
            obj(
                "EndpointSlice",
                "rj-abcde-head-svc-8xk2p",
                labels={"kubernetes.io/service-name": "rj-abcde-head-svc", "ray.io/cluster": "rj-abcde"},
            ),
            [],
            id="endpointslice-read-by-no-key-of-its-service",
        ),
        pytest.param(
            "EndpointSlice",
            obj("EndpointSlice", "plain-1", labels={"kubernetes.io/service-name": "plain"}),
            [],
            id="endpointslice-of-an-unrelated-service",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "c1-worker", owners=[owner("RayCluster", "c1", controller=False)]),
            [],
            id="non-controller-owner-ignored",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "x", owners=[owner("ReplicaSet", "rs-1", api_version="apps/v1")]),
            [],
            id="foreign-owner-ignored",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "x", owners=[owner("RayCluster", "c1", api_version="example.com/v1")]),
            [],
            id="owner-of-another-group-ignored",
        ),
        pytest.param(
            "Pod",
            obj("Pod", "x", labels={"ray.io/originated-from-crd": "Deployment", "ray.io/originated-from-cr-name": "d"}),
            [],
            id="origin-label-of-an-unknown-kind-ignored",
        ),
        pytest.param("Pod", obj("Pod", "x", labels={"ray.io/cluster": ""}), [], id="empty-cluster-label"),
        pytest.param("Pod", obj("Pod", "x", namespace=None), [], id="cluster-scoped-maps-to-nothing"),
        pytest.param("Pod", {"metadata": "garbage"}, [], id="malformed-metadata"),
        pytest.param(
            "Pod",
            obj("Pod", "odd.name", labels={"ray.io/cluster": "c.1"}),
            [key("RayCluster", "c.1")],
            id="dotted-names-kept",
        ),
    ],
)
def test_keys_for(kind: str, body: dict[str, Any], expected: list[ReconcileKey]) -> None:
    assert list(keys_for(kind, body, INDEX)) == expected


def test_keys_for_defaults_to_an_empty_index() -> None:
    assert keys_for("Pod", obj("Pod", "p", labels={"ray.io/cluster": "rj-abcde"})) == (key("RayCluster", "rj-abcde"),)
    assert keys_for("Pod", obj("Pod", "p"), EMPTY_INDEX) == ()


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        pytest.param("RayCluster", obj("RayCluster", "c1"), [("cluster", NS, "c1")], id="cluster-reads-its-selectors"),
        pytest.param("Pod", obj("Pod", "p", labels={"ray.io/cluster": "c1"}), [("cluster", NS, "c1")], id="pod"),
        pytest.param(
            "EndpointSlice",
            obj("EndpointSlice", "s", labels={"kubernetes.io/service-name": "svc"}),
            [("service", NS, "svc")],
            id="slice",
        ),
        pytest.param(
            "Service",
            obj("Service", "c1-serve-svc", owners=[owner("RayCluster", "c1")], labels={"ray.io/cluster": "c1"}),
            [("cluster", NS, "c1")],
            id="owned-by-a-cluster-once",
        ),
        pytest.param(
            "Service",
            obj("Service", "c2-serve-svc", owners=[owner("RayCluster", "c2")]),
            [("cluster", NS, "c2")],
            id="owned-by-a-cluster",
        ),
        pytest.param(
            "RayCluster",
            obj("RayCluster", "c3", owners=[owner("RayService", "rs")]),
            [("cluster", NS, "c3")],
            id="cluster-owned-by-a-rayservice",
        ),
        pytest.param("Pod", obj("Pod", "p"), [], id="nothing"),
        pytest.param("Pod", obj("Pod", "p", namespace=None), [], id="cluster-scoped"),
    ],
)
def test_dependencies(kind: str, body: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert list(dependencies(kind, body)) == expected


def test_origin_keys_and_selected_clusters() -> None:
    both = obj("RayCluster", "c", owners=[owner("RayJob", "rj")], labels=ORIGIN_RJ)
    assert origin_keys(both) == (key("RayJob", "rj"),)
    assert selected_clusters(obj("RayJob", "rj", spec={"clusterSelector": {"ray.io/cluster": "shared"}})) == ("shared",)
    assert selected_clusters(obj("RayJob", "rj", spec={"clusterSelector": {"other": "x"}})) == ()
    assert selected_clusters(obj("RayJob", "rj", spec={"clusterSelector": "nope"})) == ()


def test_relations_follow_clusters_jobs_and_services() -> None:
    relations = Relations()
    cluster = obj("RayCluster", "rj-abcde", labels=ORIGIN_RJ)
    assert relations.record("RayCluster", cluster, ()) == [("cluster", NS, "rj-abcde")]
    assert relations.record("RayCluster", cluster, ()) == []
    pod = obj("Pod", "p", labels={"ray.io/cluster": "rj-abcde"})
    assert keys_for("Pod", pod, relations.index) == (key("RayCluster", "rj-abcde"), key("RayJob", "rj"))

    selecting = obj("RayJob", "sel", spec={"clusterSelector": {"ray.io/cluster": "shared"}})
    assert relations.record("RayJob", selecting, ()) == [("cluster", NS, "shared")]
    assert keys_for("RayCluster", obj("RayCluster", "shared"), relations.index) == (
        key("RayCluster", "shared"),
        key("RayJob", "sel"),
    )
    moved = obj("RayJob", "sel", spec={"clusterSelector": {"ray.io/cluster": "other"}})
    assert relations.record("RayJob", moved, ()) == [("cluster", NS, "shared"), ("cluster", NS, "other")]
    assert relations.forget("RayJob", moved) == [("cluster", NS, "other")]
    assert keys_for("RayCluster", obj("RayCluster", "other"), relations.index) == (key("RayCluster", "other"),)

    svc_keys = (key("RayCluster", "rj-abcde"),)
    service = obj("Service", "svc")
    assert relations.record("Service", service, svc_keys) == [("service", NS, "svc")]
    assert relations.record("Service", service, svc_keys) == []
    assert relations.forget("Service", service) == [("service", NS, "svc")]
    assert relations.forget("RayCluster", cluster) == [("cluster", NS, "rj-abcde")]
    assert keys_for("Pod", pod, relations.index) == (key("RayCluster", "rj-abcde"),)


def test_relations_track_dependents() -> None:
    relations = Relations()
    relations.track(("Pod", "u1"), (("cluster", NS, "c1"),))
    relations.track(("Pod", "u2"), (("cluster", NS, "c1"),))
    assert relations.dependents(("cluster", NS, "c1")) == [("Pod", "u1"), ("Pod", "u2")]
    relations.track(("Pod", "u1"), (("cluster", NS, "c2"),))
    assert relations.dependents(("cluster", NS, "c1")) == [("Pod", "u2")]
    relations.untrack(("Pod", "u2"))
    assert relations.dependents(("cluster", NS, "c1")) == []
    assert relations.dependents(("cluster", NS, "c2")) == [("Pod", "u1")]
