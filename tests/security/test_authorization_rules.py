"""``authorize``: what a key's commands may do, decided from the watcher's facts alone.

The facts here are plain objects in a dict (the function is pure: its input is what the projection
holds). Every attack of the bus-as-attacker analysis has a case, every kind of legitimate command too,
and hypothesis throws arbitrary bodies, patches, statuses and object shapes at it: it never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CreateObject,
    DashboardRef,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    ObjectRef,
    PatchObject,
    PatchStatus,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
    Transition,
)
from services.edge.apply.authorize import ALLOWED, Allowed, Denied, Gone, authorize, selector_requirements

NS = "team"
CLUSTER = ReconcileKey(kind="RayCluster", namespace=NS, name="rc")
JOB = ReconcileKey(kind="RayJob", namespace=NS, name="rj")
SERVICE = ReconcileKey(kind="RayService", namespace=NS, name="rs")
CRON = ReconcileKey(kind="RayCronJob", namespace=NS, name="cron")
AT = datetime(2026, 1, 1, tzinfo=UTC)


def owner(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": kind, "name": name, "uid": uid, "controller": True}


def obj(
    kind: str, name: str, *, labels: Mapping[str, str] | None = None, owners: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if labels:
        metadata["labels"] = dict(labels)
    if owners:
        metadata["ownerReferences"] = owners
    return {"kind": kind, "metadata": metadata, **extra}


class DictFacts:
    """Objects by (kind, name) in namespace ``team``; ``deleted`` names what the watcher saw go."""

    def __init__(self, *objects: dict[str, Any], deleted: tuple[tuple[str, str], ...] = ()) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.deleted = set(deleted)

    def find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((kind, name)) if namespace == NS else None

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        return namespace == NS and (kind, name) in self.deleted

    async def caught_up(self, revision: int) -> None:
        """At once: the dict's objects are always its latest."""


RC = obj("RayCluster", "rc", spec={"authOptions": {"mode": "token"}})
RC_POD = obj(
    "Pod",
    "rc-head",
    labels={"ray.io/cluster": "rc", "ray.io/node-type": "head"},
    owners=[owner("RayCluster", "rc", "uid-rc")],
)
RC_SECRET = obj("Secret", "rc", labels={"ray.io/cluster": "rc"}, owners=[owner("RayCluster", "rc", "uid-rc")])
RJ = obj("RayJob", "rj")
RJ_CLUSTER = obj(
    "RayCluster",
    "rj-abc",
    labels={"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rj"},
    owners=[owner("RayJob", "rj", "uid-rj")],
)
RJ_HEAD_SVC = obj("Service", "rj-abc-head-svc", labels={"ray.io/cluster": "rj-abc", "ray.io/node-type": "head"})
RS = obj("RayService", "rs")
RS_CLUSTER = obj("RayCluster", "rs-x", owners=[owner("RayService", "rs", "uid-rs")])
RS_POD = obj("Pod", "rs-x-head", labels={"ray.io/cluster": "rs-x"}, owners=[owner("RayCluster", "rs-x", "uid-rs-x")])
RS_HEAD_SVC = obj("Service", "rs-x-head-svc", labels={"ray.io/cluster": "rs-x"})
CRON_OBJ = obj("RayCronJob", "cron")
CRON_CHILD = obj("RayJob", "cron-1", owners=[owner("RayCronJob", "cron", "uid-cron")])
UNOWNED_SECRET = obj("Secret", "db-password")
UNOWNED_POD = obj("Pod", "web-1", labels={"app": "web"})
OTHER_CLUSTER = obj("RayCluster", "other")
FACTS = DictFacts(
    RC,
    RC_POD,
    RC_SECRET,
    RJ,
    RJ_CLUSTER,
    RJ_HEAD_SVC,
    RS,
    RS_CLUSTER,
    RS_POD,
    RS_HEAD_SVC,
    CRON_OBJ,
    CRON_CHILD,
    UNOWNED_SECRET,
    UNOWNED_POD,
    OTHER_CLUSTER,
)


def ref(kind: str, name: str, *, namespace: str = NS, api_version: str = "") -> ObjectRef:
    versions = {
        "RayCluster": "ray.io/v1",
        "RayJob": "ray.io/v1",
        "RayService": "ray.io/v1",
        "RayCronJob": "ray.io/v1",
        "Job": "batch/v1",
        "Role": "rbac.authorization.k8s.io/v1",
        "RoleBinding": "rbac.authorization.k8s.io/v1",
        "Ingress": "networking.k8s.io/v1",
        "Gateway": "gateway.networking.k8s.io/v1",
        "HTTPRoute": "gateway.networking.k8s.io/v1",
    }
    return ObjectRef(api_version=api_version or versions.get(kind, "v1"), kind=kind, namespace=namespace, name=name)


def dashboard(cluster: str, service: str, *, namespace: str = NS, secret: str = "", port: int = 8265) -> DashboardRef:
    return DashboardRef(namespace=namespace, service=service, port=port, cluster=cluster, auth_secret=secret)


def transition(key: ReconcileKey, uid: str) -> Transition:
    return Transition(
        kind=key.kind,
        uid=uid,
        namespace=key.namespace,
        name=key.name,
        field="state",
        from_value="",
        to_value="ready",
        at=AT,
    )


RC_OWNED = {"labels": {"ray.io/cluster": "rc"}, "ownerReferences": [owner("RayCluster", "rc", "uid-rc")]}

LEGITIMATE: list[tuple[ReconcileKey, Command]] = [
    (CLUSTER, CreateObject(target=ref("Pod", "rc-worker-1"), body={"metadata": {"name": "rc-worker-1", **RC_OWNED}})),
    (CLUSTER, CreateObject(target=ref("Secret", "rc"), body={"metadata": {"name": "rc", **RC_OWNED}})),
    (
        CLUSTER,
        CreateObject(
            target=ref("PersistentVolumeClaim", "rc-gcs"), body={"metadata": {"labels": {"ray.io/cluster": "rc"}}}
        ),
    ),
    (
        CLUSTER,
        CreateObject(
            target=ref("Role", "rc"),
            body={
                "metadata": RC_OWNED,
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
            },
        ),
    ),
    (
        CLUSTER,
        CreateObject(
            target=ref("RoleBinding", "rc"),
            body={
                "metadata": RC_OWNED,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rc"},
                "subjects": [{"kind": "ServiceAccount", "name": "rc", "namespace": NS}],
            },
        ),
    ),
    (CLUSTER, PatchObject(target=ref("Pod", "rc-head"), patch={"metadata": {"annotations": {"a": "b"}}})),
    (CLUSTER, DeleteObject(target=ref("Pod", "rc-head"))),
    (CLUSTER, PatchObject(target=ref("RayCluster", "rc"), patch={"metadata": {"finalizers": []}})),
    (CLUSTER, DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="ray.io/cluster=rc")),
    (
        CLUSTER,
        DeleteCollection(
            api_version="v1",
            kind="Pod",
            namespace=NS,
            label_selector="ray.io/cluster=rc,ray.io/node-type in (head,worker)",
        ),
    ),
    (
        CLUSTER,
        PatchStatus(
            target=ref("RayCluster", "rc"), status={"state": "ready"}, transitions=(transition(CLUSTER, "uid-rc"),)
        ),
    ),
    (CLUSTER, EmitEvent(regarding=ref("RayCluster", "rc"), event_type="Normal", reason="Created", message="m")),
    (
        JOB,
        CreateObject(
            target=ref("RayCluster", "rj-new"),
            body={"metadata": {"ownerReferences": [owner("RayJob", "rj", "uid-rj")]}},
        ),
    ),
    (
        JOB,
        PatchObject(
            target=ref("RayCluster", "rj-abc"), patch=[{"op": "add", "path": "/spec/x", "value": 1}], patch_type="json"
        ),
    ),
    (JOB, DeleteObject(target=ref("RayCluster", "rj-abc"))),
    (JOB, DeleteObject(target=ref("RayJob", "rj"))),
    (JOB, SubmitRayJob(dashboard=dashboard("rj-abc", "rj-abc-head-svc"), request={})),
    (JOB, StopRayJob(dashboard=dashboard("rj-abc", "rj-abc-head-svc"), job_id="j")),
    (SERVICE, PatchObject(target=ref("Pod", "rs-x-head"), patch={"metadata": {"labels": {"ray.io/serve": "true"}}})),
    (SERVICE, DeleteObject(target=ref("RayCluster", "rs-x"))),
    (
        SERVICE,
        PutServeConfig(
            dashboard=dashboard("rs-x", "rs-x-head-svc"),
            config={},
            record=PatchObject(target=ref("RayCluster", "rs-x"), patch={"metadata": {"annotations": {"h": "1"}}}),
        ),
    ),
    (
        CRON,
        CreateObject(
            target=ref("RayJob", "cron-2"),
            body={"metadata": {"ownerReferences": [owner("RayCronJob", "cron", "uid-cron")]}},
        ),
    ),
    (CRON, DeleteObject(target=ref("RayJob", "cron-1"))),
]


@pytest.mark.parametrize(
    ("key", "command"), LEGITIMATE, ids=lambda v: type(v).__name__ if not isinstance(v, ReconcileKey) else v.kind
)
def test_what_reconcile_emits_is_allowed(key: ReconcileKey, command: Command) -> None:
    assert authorize(key, command, FACTS) == Allowed()


ATTACKS: list[tuple[str, ReconcileKey, Command, str]] = [
    (
        "delete a Secret in kube-system",
        CLUSTER,
        DeleteObject(target=ref("Secret", "admin-token", namespace="kube-system")),
        "never makes raybus delete object on a Secret",
    ),
    (
        "privileged hostPath Pod in kube-system",
        CLUSTER,
        CreateObject(
            target=ref("Pod", "x", namespace="kube-system"),
            body={"metadata": RC_OWNED, "spec": {"volumes": [{"hostPath": {"path": "/"}}]}},
        ),
        "outside the namespace",
    ),
    (
        "a made-up key in kube-system creating a Pod there",
        ReconcileKey(kind="RayCluster", namespace="kube-system", name="x"),
        CreateObject(
            target=ref("Pod", "x", namespace="kube-system"), body={"metadata": {"labels": {"ray.io/cluster": "x"}}}
        ),
        "not a custom resource the watcher knows",
    ),
    (
        "overwrite an unowned Secret",
        CLUSTER,
        PatchObject(target=ref("Secret", "db-password"), patch={"data": {"password": "b3duZWQ="}}),
        "never makes raybus patch object on a Secret",
    ),
    (
        "patch a Pod of nobody",
        CLUSTER,
        PatchObject(target=ref("Pod", "web-1"), patch={"metadata": {"labels": {"x": "y"}}}),
        "does not belong",
    ),
    (
        "delete a Pod not known to the watcher",
        CLUSTER,
        DeleteObject(target=ref("Pod", "invisible")),
        "not an object of",
    ),
    (
        "deletecollection of unrelated Pods",
        CLUSTER,
        DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="app=web"),
        "does not require ray.io/cluster",
    ),
    (
        "deletecollection naming another cluster",
        CLUSTER,
        DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="ray.io/cluster=other"),
        "does not require ray.io/cluster",
    ),
    (
        "deletecollection with a negated cluster",
        CLUSTER,
        DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="ray.io/cluster!=rc"),
        "does not require ray.io/cluster",
    ),
    (
        "transition into another key's history",
        CLUSTER,
        PatchStatus(target=ref("RayCluster", "rc"), status={}, transitions=(transition(JOB, "uid-rj"),)),
        "a transition names",
    ),
    (
        "transition with another uid",
        CLUSTER,
        PatchStatus(target=ref("RayCluster", "rc"), status={}, transitions=(transition(CLUSTER, "uid-other"),)),
        "a transition names",
    ),
    (
        "status patch of another custom resource",
        CLUSTER,
        PatchStatus(target=ref("RayCluster", "other"), status={"state": "failed"}),
        "only target its own object",
    ),
    (
        "create without ownership",
        CLUSTER,
        CreateObject(target=ref("Pod", "rc-x"), body={"metadata": {"labels": {"ray.io/cluster": "other"}}}),
        "carries neither",
    ),
    (
        "Role granting more than the autoscaler's",
        CLUSTER,
        CreateObject(
            target=ref("Role", "rc"),
            body={"metadata": RC_OWNED, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]},
        ),
        "more than the autoscaler Role",
    ),
    (
        "RoleBinding to a ClusterRole",
        CLUSTER,
        CreateObject(
            target=ref("RoleBinding", "rc"),
            body={
                "metadata": RC_OWNED,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            },
        ),
        "does not bind a Role",
    ),
    (
        "RoleBinding for a user",
        CLUSTER,
        CreateObject(
            target=ref("RoleBinding", "rc"),
            body={
                "metadata": RC_OWNED,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rc"},
                "subjects": [{"kind": "User", "name": "mallory"}],
            },
        ),
        "other than a ServiceAccount",
    ),
    (
        "a RayJob deleting a cluster it only selects",
        JOB,
        DeleteObject(target=ref("RayCluster", "other")),
        "does not belong",
    ),
    (
        "an Event about someone else",
        CLUSTER,
        EmitEvent(regarding=ref("RayCluster", "other"), event_type="Warning", reason="r", message="m"),
        "only regard its own object",
    ),
    (
        "a kind the table has no row for",
        CRON,
        DeleteCollection(api_version="v1", kind="Pod", namespace=NS, label_selector="ray.io/cluster=rc"),
        "never makes raybus",
    ),
    (
        "a core kind named with a foreign group",
        CLUSTER,
        CreateObject(target=ref("Secret", "rc", api_version="evil.io/v1"), body={"metadata": RC_OWNED}),
        "not a kind raybus writes",
    ),
    (
        "dashboard namespace path injection",
        JOB,
        SubmitRayJob(dashboard=dashboard("rj-abc", "rj-abc-head-svc", namespace="kube-system/pods?x="), request={}),
        "outside the namespace",
    ),
    (
        "dashboard service path injection",
        JOB,
        SubmitRayJob(dashboard=dashboard("rj-abc", "x/../../pods?x="), request={}),
        "not a DNS-1123 label",
    ),
    (
        "dashboard of another cluster",
        JOB,
        SubmitRayJob(dashboard=dashboard("other", "other-head-svc"), request={}),
        "does not belong",
    ),
    (
        "dashboard through a Service of another cluster (direct mode: an arbitrary host)",
        JOB,
        SubmitRayJob(dashboard=dashboard("rj-abc", "rs-x-head-svc"), request={}),
        "is not a Service of RayCluster rj-abc",
    ),
    (
        "dashboard token from an unowned Secret",
        JOB,
        SubmitRayJob(dashboard=dashboard("rj-abc", "rj-abc-head-svc", secret="db-password"), request={}),
        "is not the auth Secret",
    ),
    (
        "a serve-config record patching another cluster",
        SERVICE,
        PutServeConfig(
            dashboard=dashboard("rs-x", "rs-x-head-svc"),
            config={},
            record=PatchObject(target=ref("RayCluster", "other"), patch={}),
        ),
        "does not belong",
    ),
]


@pytest.mark.parametrize(("case", "key", "command", "reason"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_what_reconcile_never_emits_is_denied(case: str, key: ReconcileKey, command: Command, reason: str) -> None:
    verdict = authorize(key, command, FACTS)
    assert isinstance(verdict, Denied), case
    assert reason in verdict.reason


def test_a_target_deleted_meanwhile_is_gone_not_denied() -> None:
    facts = DictFacts(RC, RJ, deleted=(("Pod", "rc-worker-9"), ("RayCluster", "rj-old"), ("RayService", "rs")))
    assert authorize(CLUSTER, DeleteObject(target=ref("Pod", "rc-worker-9")), facts) == Gone(
        "already_done", "Pod team/rc-worker-9 was deleted"
    )
    patch = authorize(CLUSTER, PatchObject(target=ref("Pod", "rc-worker-9"), patch={}), facts)
    assert isinstance(patch, Gone) and patch.outcome == "dropped"
    stop = authorize(JOB, StopRayJob(dashboard=dashboard("rj-old", "rj-old-head-svc"), job_id="j"), facts)
    assert isinstance(stop, Gone) and stop.outcome == "already_done"
    late = authorize(
        SERVICE, EmitEvent(regarding=ref("RayService", "rs"), event_type="Normal", reason="r", message="m"), facts
    )
    assert late == Gone("dropped", "RayService/team/rs was deleted")


def test_a_rayjob_may_use_the_cluster_its_selector_names() -> None:
    selected = obj("RayCluster", "shared", spec={"authOptions": {"mode": "token", "secretName": "shared-token"}})
    head = obj(
        "Service",
        "shared-head-svc",
        labels={"ray.io/cluster": "shared"},
        owners=[owner("RayCluster", "shared", "uid-shared")],
    )
    job = obj("RayJob", "rj", spec={"clusterSelector": {"ray.io/cluster": "shared"}})
    facts = DictFacts(selected, head, job)
    command = SubmitRayJob(dashboard=dashboard("shared", "shared-head-svc", secret="shared-token"), request={})
    assert authorize(JOB, command, facts) == Allowed()
    assert isinstance(authorize(JOB, DeleteObject(target=ref("RayCluster", "shared")), facts), Denied)


def test_selector_requirements_keep_sets_whole() -> None:
    assert selector_requirements("a=b, c in (x,y),!d") == ["a=b", "c in (x,y)", "!d"]


# --- fuzzing ----------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_name = st.sampled_from(
    ["rc", "rc-head", "rj", "rj-abc", "rs-x", "other", "db-password", "", "A/../x", "kube-system"]
) | st.text(max_size=12)
_kind = st.sampled_from(sorted({kind for rows in ALLOWED.values() for kind, _ in rows} | {"Secret", "Node", ""}))
_metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": _json | _name,
        "namespace": _json | st.just(NS),
        "labels": _json
        | st.dictionaries(
            st.sampled_from(["ray.io/cluster", "ray.io/originated-from-crd", "ray.io/originated-from-cr-name"]),
            _name | _json,
        ),
        "ownerReferences": _json
        | st.lists(
            st.dictionaries(st.sampled_from(["apiVersion", "kind", "name", "uid", "controller"]), _json | _name | _kind)
        ),
        "uid": _json,
    },
)
_body = st.dictionaries(
    st.sampled_from(["metadata", "kind", "apiVersion", "rules", "roleRef", "subjects", "spec"]), _json | _metadata
)
_ref = st.builds(
    ObjectRef,
    api_version=st.sampled_from(["v1", "ray.io/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "x/v1", ""]),
    kind=_kind,
    namespace=st.sampled_from([NS, "kube-system", ""]),
    name=_name,
    uid=st.text(max_size=4),
)
_dash = st.builds(
    DashboardRef,
    namespace=st.sampled_from([NS, "kube-system/pods?x=", ""]) | st.text(max_size=8),
    service=_name,
    port=st.integers(-1, 70000),
    cluster=_name,
    auth_secret=_name,
)
_transition = st.builds(
    Transition,
    kind=st.sampled_from(["RayCluster", "RayJob"]),
    uid=st.text(max_size=6),
    namespace=st.sampled_from([NS, "x"]),
    name=_name,
    field=st.just("f"),
    from_value=st.just(""),
    to_value=st.just("x"),
    at=st.just(AT),
)
_patch_object = st.builds(
    PatchObject,
    target=_ref,
    patch=_json.filter(lambda v: isinstance(v, dict))
    | st.lists(st.dictionaries(st.text(max_size=4), _json), max_size=2),
)
_commands = st.one_of(
    st.builds(CreateObject, target=_ref, body=_body),
    _patch_object,
    st.builds(DeleteObject, target=_ref),
    st.builds(
        DeleteCollection,
        api_version=st.sampled_from(["v1", "x"]),
        kind=_kind,
        namespace=st.sampled_from([NS, "x"]),
        label_selector=st.text(max_size=30) | st.just("ray.io/cluster=rc"),
    ),
    st.builds(
        PatchStatus,
        target=_ref,
        status=st.dictionaries(st.text(max_size=4), _json),
        transitions=st.lists(_transition, max_size=2).map(tuple),
    ),
    st.builds(
        EmitEvent,
        regarding=_ref,
        event_type=st.just("Warning"),
        reason=st.text(max_size=4),
        message=st.text(max_size=4),
    ),
    st.builds(SubmitRayJob, dashboard=_dash, request=st.dictionaries(st.text(max_size=4), _json)),
    st.builds(StopRayJob, dashboard=_dash, job_id=st.text(max_size=4)),
    st.builds(PutServeConfig, dashboard=_dash, config=st.just({}), record=st.none() | _patch_object),
)
_objects = st.lists(
    st.builds(
        lambda kind, meta, spec: {
            "kind": kind,
            "metadata": {**meta, "name": "rc" if not isinstance(meta.get("name"), str) else meta["name"]},
            "spec": spec,
        },
        _kind,
        _metadata,
        _json,
    ),
    max_size=4,
)
_keys = st.builds(
    ReconcileKey,
    kind=st.sampled_from(["RayCluster", "RayJob", "RayService", "RayCronJob"]),
    namespace=st.sampled_from([NS, "kube-system"]),
    name=_name,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(key=_keys, command=_commands, objects=_objects, extra=st.lists(_json, max_size=2))
def test_no_command_body_makes_authorize_raise(
    key: ReconcileKey, command: Command, objects: list[dict[str, Any]], extra: list[Any]
) -> None:
    facts = DictFacts(*(o for o in objects if isinstance(o["metadata"]["name"], str)), RC, RJ_CLUSTER, RJ_HEAD_SVC)
    verdict = authorize(key, command, facts)
    assert isinstance(verdict, Allowed | Denied | Gone)
    if isinstance(verdict, Allowed):
        # Whatever got through stays in the key's namespace.
        target = (
            getattr(command, "target", None)
            or getattr(command, "regarding", None)
            or getattr(command, "dashboard", None)
        )
        namespace = getattr(command, "namespace", None) or getattr(target, "namespace", "")
        assert namespace == key.namespace
