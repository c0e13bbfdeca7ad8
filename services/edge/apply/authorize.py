"""What a reconcile key may make the applier do: one table, and a pure check of each command against it.

Role: the bus is a trust boundary. Whoever may publish command batches (the reconciler's NATS user) must
not get the watcher's Kubernetes power; :func:`authorize` decides, before any API or dashboard call,
whether one command is within its key's authority:

- the (target kind, verb) pair is one the key's kind's reconcile can emit (:data:`ALLOWED`, the one
  table; the watcher's RBAC in ``deploy/`` is derived from it by ``permissions``);
- the key's custom resource exists (a made-up key has no authority at all);
- the target is in the key's namespace, and a dashboard reference names valid DNS-1123 names;
- an existing target belongs to the key: it is the key's own object, or its controller ownerReference
  names the key's object, or it carries the key's labels (``ray.io/cluster`` for a RayCluster,
  ``ray.io/originated-from-crd`` / ``-cr-name`` for a RayJob or RayService, ``ray.io/cronjob-name`` on a
  RayJob), directly or through a RayCluster that belongs to the key (a RayService's head Pods);
- a create carries that ownerReference or those labels, and its name and namespace are the target's;
  a Role grants no more than the autoscaler Role (:data:`GRANTED_RULES`), a RoleBinding binds a Role
  to ServiceAccounts of the namespace;
- a deletecollection's selector requires ``ray.io/cluster=<the key's cluster>``;
- a status patch targets the key's own object, and its transitions name the key and its uid;
- Events regard the key's own object;
- a dashboard command targets a RayCluster of the key (or the one a RayJob's clusterSelector names),
  through a Service of that cluster, with that cluster's auth Secret only.

What the watcher knows about existing objects comes from :class:`Facts`. A target that is unknown is
denied, unless the watcher saw it deleted recently: then the command is :class:`Gone` (not executed,
counted as the 404 the API server would have answered; a decision made just before a deletion was
projected is not an attack).

Not here: whether a command's content is what the key's custom resource asks for (``provenance``), whether
its batch is a replay (``freshness``); executing, recording and reporting a verdict (``applier``); the RBAC
rules (``permissions``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from schema.keys import KeyKind, ReconcileKey, is_dns1123_subdomain
from schema.messages import (
    Command,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    ObjectRef,
    Outcome,
    PatchObject,
    PatchStatus,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
    command_verb,
)
from schema.ray import conventions
from services.edge.dashboard import dashboard_ref_problem
from services.edge.resources import by_api_version_kind

Rule = tuple[str, str, str]
"""``(apiGroup, resource[/subresource], verb)``."""

DASHBOARD_KIND: Final = "RayCluster"
"""The target kind of dashboard commands in the table (their target is a RayCluster's dashboard)."""
EVENT_KIND: Final = "Event"

_RAYCLUSTER: Final = "RayCluster"
_RBAC_GROUP: Final = "rbac.authorization.k8s.io"


def _rows(*rows: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return frozenset((kind, verb) for kind, *verbs in rows for verb in verbs)


ALLOWED: Final[Mapping[KeyKind, frozenset[tuple[str, str]]]] = {
    # services/reconciler/raycluster: children (commands.Plan), its finalizer (gcsft), its status.
    "RayCluster": _rows(
        ("RayCluster", "patch_object", "patch_status"),
        ("Pod", "create_object", "patch_object", "delete_object", "delete_collection"),
        ("Service", "create_object"),
        ("Secret", "create_object"),
        ("ServiceAccount", "create_object"),
        ("Role", "create_object"),
        ("RoleBinding", "create_object"),
        ("PersistentVolumeClaim", "create_object"),
        ("Ingress", "create_object", "patch_object"),
        ("Job", "create_object"),
        (EVENT_KIND, "emit_event"),
    ),
    # services/reconciler/rayjob: its cluster (create, DeleteWorkers patch, delete), submitter Job,
    # head Service, its finalizer and DeleteSelf, the dashboard's job API.
    "RayJob": _rows(
        ("RayJob", "patch_object", "delete_object", "patch_status"),
        ("RayCluster", "create_object", "patch_object", "delete_object", "submit_ray_job", "stop_ray_job"),
        ("Job", "create_object", "delete_object"),
        ("Service", "create_object", "patch_object"),
        (EVENT_KIND, "emit_event"),
    ),
    # services/reconciler/rayservice: clusters (and their serve-config records), Services, Gateway API
    # objects, head Pods' serve label, its finalizer, Serve configs.
    "RayService": _rows(
        ("RayService", "patch_object", "patch_status"),
        ("RayCluster", "create_object", "patch_object", "delete_object", "put_serve_config"),
        ("Service", "create_object", "patch_object", "delete_object"),
        ("Gateway", "create_object", "patch_object", "delete_object"),
        ("HTTPRoute", "create_object", "patch_object", "delete_object"),
        ("Pod", "patch_object"),
        (EVENT_KIND, "emit_event"),
    ),
    # services/reconciler/raycronjob: child RayJobs and its status.
    "RayCronJob": _rows(
        ("RayCronJob", "patch_status"),
        ("RayJob", "create_object", "delete_object"),
        (EVENT_KIND, "emit_event"),
    ),
}
"""Per custom-resource kind, every (target kind, command verb) its reconcile can emit; nothing else runs."""

GRANTED_RULES: Final[frozenset[Rule]] = frozenset(
    {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "patch"),
        ("", "pods/resize", "patch"),
        (conventions.GROUP, "rayclusters", "get"),
        (conventions.GROUP, "rayclusters", "patch"),
    }
)
"""What the autoscaler Role of a RayCluster grants (KubeRay's): the most a Role the applier creates may
grant, and what the watcher must hold itself (Kubernetes lets it create a Role only within its own)."""


@dataclass(frozen=True, slots=True)
class Allowed:
    """The command is within its key's authority."""


@dataclass(frozen=True, slots=True)
class Denied:
    """The command is outside its key's authority: never executed, recorded with ``reason``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Gone:
    """The target was deleted meanwhile: not executed; ``outcome`` is what the API's 404 would mean."""

    outcome: Outcome
    reason: str


Verdict = Allowed | Denied | Gone

ALLOWED_VERDICT: Final = Allowed()


class Facts(Protocol):
    """What the watcher knows about existing objects, without an API call.

    The watcher's projection implements it from its in-memory cache; an applier in its own process can
    implement it from KV ``raybus-objects`` (the objects that belong to a key are its snapshot's entries,
    deletions its delete markers).
    """

    def find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The object of ``kind`` with that namespace and name, as last seen, or None."""
        ...

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the watcher saw that object deleted recently (and has not seen it since)."""
        ...

    async def caught_up(self, revision: int) -> None:
        """Return once these facts reflect every KV write up to ``revision`` (a decision's snapshot)."""
        ...


def command_kind(command: Command) -> str:
    """The target kind of a command, as the table names it."""
    match command:
        case CreateObject() | PatchObject() | DeleteObject() | PatchStatus():
            return command.target.kind
        case DeleteCollection():
            return command.kind
        case EmitEvent():
            return EVENT_KIND
        case SubmitRayJob() | StopRayJob() | PutServeConfig():
            return DASHBOARD_KIND


def authorize(key: ReconcileKey, command: Command, facts: Facts) -> Verdict:
    """Whether ``command``, published for ``key``, may be executed (see the module docstring).

    Pure: reads only its arguments; never raises on any command the schema decodes.
    """
    kind, verb = command_kind(command), command_verb(command)
    if (kind, verb) not in ALLOWED[key.kind]:
        return Denied(f"a {key.kind} never makes raybus {verb.replace('_', ' ')} on a {kind}")
    if _key_object(key, facts) is None:
        if facts.recently_deleted(key.kind, key.namespace, key.name):
            return Gone("already_done" if isinstance(command, DeleteObject) else "dropped", f"{key} was deleted")
        return Denied(f"{key} is not a custom resource the watcher knows")
    match command:
        case CreateObject():
            return _create(key, command, facts)
        case PatchObject() | DeleteObject():
            return _existing(key, command, facts)
        case PatchStatus():
            return _status(key, command, facts)
        case DeleteCollection():
            return _collection(key, command)
        case EmitEvent():
            return _event(key, command)
        case SubmitRayJob() | StopRayJob() | PutServeConfig():
            return _dashboard(key, command, facts)


# --- object commands --------------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ref_problem(key: ReconcileKey, ref: ObjectRef) -> str:
    """Why ``ref`` cannot be a target of ``key`` ("" when it can)."""
    if ref.namespace != key.namespace:
        return f"{ref.kind} {ref.namespace}/{ref.name} is outside the namespace {key.namespace} of {key}"
    resource = by_api_version_kind(ref.api_version, ref.kind)
    if resource is None or resource.kind != ref.kind or not resource.writable:
        return f"{ref.kind} ({ref.api_version}) is not a kind raybus writes"
    if not is_dns1123_subdomain(ref.name):
        return f"{ref.name!r} is not a valid object name"
    return ""


def _key_object(key: ReconcileKey, facts: Facts) -> Mapping[str, Any] | None:
    return facts.find(key.kind, key.namespace, key.name)


def _uid(obj: Mapping[str, Any] | None) -> str:
    uid = _mapping(_mapping(obj).get("metadata")).get("uid")
    return uid if isinstance(uid, str) else ""


def _is_key(kind: str, name: str, key: ReconcileKey) -> bool:
    return kind == key.kind and name == key.name


def _controller_owners(metadata: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    refs = metadata.get("ownerReferences")
    if isinstance(refs, list):
        for ref in refs:
            if isinstance(ref, Mapping) and ref.get("controller") is True:
                yield ref


def _claimed_by(metadata: Mapping[str, Any], key: ReconcileKey, key_uid: str, kind: str) -> bool:
    """Whether an object's metadata ties it to ``key`` directly (controller owner or the key's labels)."""
    for ref in _controller_owners(metadata):
        api_version = ref.get("apiVersion")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        uid = ref.get("uid")
        if (
            group == conventions.GROUP
            and ref.get("kind") == key.kind
            and ref.get("name") == key.name
            and (not key_uid or not uid or uid == key_uid)
        ):
            return True
    labels = _mapping(metadata.get("labels"))
    if key.kind == _RAYCLUSTER:
        return labels.get(conventions.LABEL_CLUSTER) == key.name
    if key.kind == "RayCronJob":
        return kind == "RayJob" and labels.get(conventions.LABEL_CRONJOB_NAME) == key.name
    return (
        labels.get(conventions.LABEL_ORIGIN_CRD) == key.kind and labels.get(conventions.LABEL_ORIGIN_NAME) == key.name
    )


def _clusters_named(metadata: Mapping[str, Any]) -> set[str]:
    """The RayClusters an object says it belongs to (controller owner, ``ray.io/cluster`` label)."""
    names = {
        name
        for ref in _controller_owners(metadata)
        if ref.get("kind") == _RAYCLUSTER and isinstance(name := ref.get("name"), str)
    }
    label = _mapping(metadata.get("labels")).get(conventions.LABEL_CLUSTER)
    if isinstance(label, str):
        names.add(label)
    return names


def _belongs(kind: str, metadata: Mapping[str, Any], key: ReconcileKey, facts: Facts) -> bool:
    """Whether an object (existing, or the body of a create) belongs to ``key``."""
    key_uid = _uid(_key_object(key, facts))
    if _claimed_by(metadata, key, key_uid, kind):
        return True
    if key.kind == _RAYCLUSTER:
        return False
    for name in _clusters_named(metadata):
        cluster = facts.find(_RAYCLUSTER, key.namespace, name)
        if cluster is not None and _claimed_by(_mapping(cluster.get("metadata")), key, key_uid, _RAYCLUSTER):
            return True
    return False


def _unknown(ref: ObjectRef, facts: Facts, *, gone: Outcome, key: ReconcileKey) -> Verdict:
    if facts.recently_deleted(ref.kind, ref.namespace, ref.name):
        return Gone(gone, f"{ref.kind} {ref.namespace}/{ref.name} was deleted")
    return Denied(f"{ref.kind} {ref.namespace}/{ref.name} is not an object of {key} the watcher knows")


def _create(key: ReconcileKey, command: CreateObject, facts: Facts) -> Verdict:
    target = command.target
    problem = _ref_problem(key, target)
    if problem:
        return Denied(problem)
    body = command.body
    raw_metadata = body.get("metadata", {})
    if not isinstance(raw_metadata, Mapping):
        return Denied("the body's metadata is not an object")
    metadata: Mapping[str, Any] = raw_metadata
    for field, wanted in (("name", target.name), ("namespace", key.namespace)):
        if field in metadata and metadata[field] != wanted:
            return Denied(f"the body's metadata.{field} {metadata[field]!r} is not the target's {wanted!r}")
    for field, wanted in (("kind", target.kind), ("apiVersion", target.api_version)):
        if field in body and body[field] != wanted:
            return Denied(f"the body's {field} {body[field]!r} is not the target's {wanted!r}")
    if not _belongs(target.kind, metadata, key, facts):
        return Denied(f"the new {target.kind} {target.name} carries neither an ownerReference to {key} nor its labels")
    if target.kind == "Role":
        return _role(body)
    if target.kind == "RoleBinding":
        return _role_binding(key, body, facts)
    return ALLOWED_VERDICT


def _role(body: Mapping[str, Any]) -> Verdict:
    rules = body.get("rules", [])
    if not isinstance(rules, list):
        return Denied("the Role's rules are not a list")
    for rule in rules:
        rule = _mapping(rule)
        if "nonResourceURLs" in rule:
            return Denied("the Role grants non-resource URLs")
        lists = [rule.get(f) for f in ("apiGroups", "resources", "verbs")]
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists):
            return Denied("a Role rule is malformed")
        groups, resources, verbs = lists
        assert isinstance(groups, list) and isinstance(resources, list) and isinstance(verbs, list)
        for triple in ((g, r, v) for g in groups for r in resources for v in verbs):
            if triple not in GRANTED_RULES:
                return Denied(f"the Role grants {triple}, more than the autoscaler Role")
    return ALLOWED_VERDICT


def _role_binding(key: ReconcileKey, body: Mapping[str, Any], facts: Facts) -> Verdict:
    role_ref = _mapping(body.get("roleRef"))
    if role_ref.get("kind") != "Role" or role_ref.get("apiGroup") != _RBAC_GROUP:
        return Denied("the RoleBinding does not bind a Role")
    name = role_ref.get("name")
    if not isinstance(name, str):
        return Denied("the RoleBinding's roleRef has no name")
    role = facts.find("Role", key.namespace, name)
    if role is not None and not _belongs("Role", _mapping(role.get("metadata")), key, facts):
        return Denied(f"the RoleBinding binds Role {name}, which does not belong to {key}")
    subjects = body.get("subjects", [])
    if not isinstance(subjects, list):
        return Denied("the RoleBinding's subjects are not a list")
    for subject in subjects:
        subject = _mapping(subject)
        if subject.get("kind") != "ServiceAccount" or subject.get("namespace", key.namespace) != key.namespace:
            return Denied("the RoleBinding binds a subject other than a ServiceAccount of the namespace")
    return ALLOWED_VERDICT


def _existing(key: ReconcileKey, command: PatchObject | DeleteObject, facts: Facts) -> Verdict:
    target = command.target
    problem = _ref_problem(key, target)
    if problem:
        return Denied(problem)
    obj = facts.find(target.kind, target.namespace, target.name)
    if obj is None:
        gone: Outcome = "dropped" if isinstance(command, PatchObject) else "already_done"
        return _unknown(target, facts, gone=gone, key=key)
    if _is_key(target.kind, target.name, key):
        return ALLOWED_VERDICT
    if not _belongs(target.kind, _mapping(obj.get("metadata")), key, facts):
        return Denied(f"{target.kind} {target.namespace}/{target.name} does not belong to {key}")
    return ALLOWED_VERDICT


def _status(key: ReconcileKey, command: PatchStatus, facts: Facts) -> Verdict:
    target = command.target
    problem = _ref_problem(key, target)
    if problem:
        return Denied(problem)
    if not _is_key(target.kind, target.name, key):
        return Denied(f"a status patch of {key} may only target its own object, not {target.kind} {target.name}")
    own = _key_object(key, facts)
    if own is None:
        return _unknown(target, facts, gone="dropped", key=key)
    uid = _uid(own)
    for transition in command.transitions:
        named = (transition.kind, transition.namespace, transition.name, transition.uid)
        if named != (key.kind, key.namespace, key.name, uid):
            return Denied(
                f"a transition names {transition.kind} {transition.namespace}/{transition.name} "
                f"uid {transition.uid!r}, not {key} uid {uid!r}"
            )
    return ALLOWED_VERDICT


def selector_requirements(selector: str) -> list[str]:
    """The requirements of a label selector (commas inside ``in (...)`` sets do not split)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _key_clusters(key: ReconcileKey) -> set[str]:
    """The RayClusters whose objects a key may delete by selector (only a RayCluster deletes so)."""
    return {key.name} if key.kind == _RAYCLUSTER else set()


def _collection(key: ReconcileKey, command: DeleteCollection) -> Verdict:
    ref = ObjectRef(api_version=command.api_version, kind=command.kind, namespace=command.namespace, name="x")
    problem = _ref_problem(key, ref)
    if problem:
        return Denied(problem)
    named = set()
    for requirement in selector_requirements(command.label_selector):
        label, op, value = requirement.partition("==") if "==" in requirement else requirement.partition("=")
        if op and label.strip() == conventions.LABEL_CLUSTER:
            named.add(value.strip())
    if not named & _key_clusters(key):
        return Denied(
            f"the selector {command.label_selector!r} does not require {conventions.LABEL_CLUSTER}=<a cluster of {key}>"
        )
    return ALLOWED_VERDICT


def _event(key: ReconcileKey, command: EmitEvent) -> Verdict:
    regarding = command.regarding
    if regarding.namespace != key.namespace:
        return Denied(f"the Event is outside the namespace {key.namespace} of {key}")
    group = regarding.api_version.rpartition("/")[0]
    if group != conventions.GROUP or not _is_key(regarding.kind, regarding.name, key):
        return Denied(f"an Event of {key} may only regard its own object, not {regarding.kind} {regarding.name}")
    return ALLOWED_VERDICT


# --- dashboard commands -----------------------------------------------------------------------------


def _selected_cluster(key: ReconcileKey, facts: Facts) -> str:
    """The RayCluster a RayJob's ``spec.clusterSelector`` names (a user's choice, not the reconciler's)."""
    if key.kind != "RayJob":
        return ""
    spec = _mapping(_mapping(_key_object(key, facts)).get("spec"))
    name = _mapping(spec.get("clusterSelector")).get(conventions.LABEL_CLUSTER)
    return name if isinstance(name, str) else ""


def _of_cluster(metadata: Mapping[str, Any], cluster: str) -> bool:
    return cluster in _clusters_named(metadata)


def _dashboard(key: ReconcileKey, command: SubmitRayJob | StopRayJob | PutServeConfig, facts: Facts) -> Verdict:
    ref = command.dashboard
    if ref.namespace != key.namespace:
        return Denied(f"the dashboard of {ref.namespace}/{ref.cluster} is outside the namespace of {key}")
    problem = dashboard_ref_problem(ref)
    if problem:
        return Denied(f"dashboard reference: {problem}")
    cluster = facts.find(_RAYCLUSTER, ref.namespace, ref.cluster)
    if cluster is None:
        if facts.recently_deleted(_RAYCLUSTER, ref.namespace, ref.cluster):
            gone: Outcome = "already_done" if isinstance(command, StopRayJob) else "failed"
            return Gone(gone, f"RayCluster {ref.namespace}/{ref.cluster} was deleted")
        return Denied(f"RayCluster {ref.namespace}/{ref.cluster} is not a cluster of {key} the watcher knows")
    cluster_meta = _mapping(cluster.get("metadata"))
    if not (
        _is_key(_RAYCLUSTER, ref.cluster, key)
        or _claimed_by(cluster_meta, key, _uid(_key_object(key, facts)), _RAYCLUSTER)
        or ref.cluster == _selected_cluster(key, facts)
    ):
        return Denied(f"RayCluster {ref.namespace}/{ref.cluster} does not belong to {key}")
    service = facts.find("Service", ref.namespace, ref.service)
    if service is None or not _of_cluster(_mapping(service.get("metadata")), ref.cluster):
        return Denied(f"Service {ref.namespace}/{ref.service} is not a Service of RayCluster {ref.cluster}")
    if ref.auth_secret:
        auth = _mapping(_mapping(cluster.get("spec")).get("authOptions"))
        secret = facts.find("Secret", ref.namespace, ref.auth_secret)
        named = auth.get("secretName") == ref.auth_secret
        if not named and (secret is None or not _of_cluster(_mapping(secret.get("metadata")), ref.cluster)):
            return Denied(f"Secret {ref.namespace}/{ref.auth_secret} is not the auth Secret of {ref.cluster}")
    if isinstance(command, PutServeConfig) and command.record is not None:
        return authorize(key, command.record, facts)
    return ALLOWED_VERDICT
