"""The Kubernetes permissions the watcher needs: every ``(apiGroup, resource, verb)`` each of its roles uses, derived.

Role: :data:`RULES_BY_ROLE` is computed from the same code that makes the requests, so it cannot drift
from them; each role (``KubeSettings.roles``) runs in its own Deployment under its own ServiceAccount in
``deploy/``, which grants it exactly its rules (``tests/deploy/test_rbac.py``):

- ``watch``: the informers' list and watch queries (the ``resources`` table with ``informer.WatchDriver``)
  and the projection's owner reads (``owners.owner_request``, a list by name); plus, in the watcher's
  own namespace only (:data:`NAMESPACE_RULES_BY_ROLE`, a namespaced Role), the Lease it is elected by
  (``election``: get and update of the Lease by name, create of it, which RBAC cannot restrict by name);
  and the create of the Warning Event that says on an object why it is not projected.
- ``apply``: the applier's planned calls for exactly the (kind, verb) rows of the authorization table
  (``authorize.ALLOWED``, through ``plan.plan_call`` and the dashboard client's token read and service-proxy
  calls, with the GET that confirms a timed-out Serve config), and the failure reports' read of the key's
  custom resource (``failures.owner_path``; their Warning Events and RayCluster status patch are table
  rows). It gets no list or watch of its own: its facts come from the projection, or from KV (``kvfacts``).
- ``probe``: the prober's GETs (Ray jobs and Serve applications through the service proxy, the head's Serve
  health through the pod proxy) and the auth Secret read; no write.

A command the table does not allow is never sent, so its permission is never granted either (e.g.
Secrets: create, and get/list/watch, never patch or delete). Each planned request is turned into an RBAC
triple by :func:`rule_for` (method + path + query → verb, the way the API server's authorizer does it).
:data:`REQUIRED_RULES` is the union of the cluster-wide rules: what one process running every role holds.

Two additions of the applier are not requests but API-server rules, so they are listed with their reason:
- ``<plural>/finalizers`` update on the four custom resources: creating a child whose controller
  ownerReference has ``blockOwnerDeletion: true`` needs it (OwnerReferencesPermissionEnforcement).
- ``authorize.GRANTED_RULES``: the autoscaler Role the RayCluster reconcile creates; Kubernetes only
  lets the applier create a Role granting what it holds itself (RBAC escalation check), which is why the
  applier holds ``get``/``list``/``watch`` on Pods and ``get`` on RayClusters.
  ``tests/unit/watcher/test_permissions.py`` checks the reconciler's Role against it.

Deliberately absent: ``update`` except the Lease, finalizers and the proxies (the applier only patches),
configmaps, endpoints, nodes. API discovery (``/api``, ``/apis``) is a non-resource URL every
authenticated client may read (``system:discovery``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from schema.keys import KEY_KINDS
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
)
from schema.probes import HEALTHZ_PATH, SERVE_APPLICATIONS_PATH, PodEndpoint
from schema.ray.conventions import DEFAULT_DASHBOARD_PORT, DEFAULT_SERVE_PORT
from services.edge.apply.authorize import ALLOWED, GRANTED_RULES, Rule
from services.edge.apply.failures import owner_path
from services.edge.apply.plan import plan_call
from services.edge.calls import object_path
from services.edge.dashboard import (
    dashboard_base_url,
    plan_dashboard_call,
    pod_base_url,
    secret_path,
)
from services.edge.events import event_call
from services.edge.resources import LEASE, RESOURCES, ResourceType, by_kind
from services.edge.watch.election import LEASE_NAME
from services.edge.watch.informer import Scope, WatchDriver
from services.edge.watch.owners import owner_request
from services.runtime.settings import WATCHER_ROLES, WatcherRole

_SAMPLE_NS: Final = "ns"
_SAMPLE_TIME: Final = datetime(2000, 1, 1, tzinfo=UTC)
_SAMPLE_DASHBOARD: Final = DashboardRef(
    namespace=_SAMPLE_NS, service="svc", port=DEFAULT_DASHBOARD_PORT, cluster="c", auth_secret="c"
)

_METHOD_VERBS: Final = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "GET": "get"}


NamedRule = tuple[str, str, str, str]
"""``(apiGroup, resource[/subresource], verb, resourceName)``; an empty name: any object."""


def _resource_path(path: str) -> tuple[str, list[str]]:
    """``path``'s API group and the segments after the namespace (resource, name, subresource)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        raise ValueError(f"no resource in {path}")
    return group, rest


def rule_for(method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> Rule:
    """The RBAC triple the API server's authorizer checks for one request.

    Raises:
        ValueError: not a resource path.
    """
    group, rest = _resource_path(path)
    resource = rest[0]
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    collection = len(rest) == 1
    verb = _METHOD_VERBS[method.upper()]
    if method.upper() == "GET" and collection:
        verb = "watch" if dict(query).get("watch") in ("true", "1") else "list"
    elif method.upper() == "DELETE" and collection:
        verb = "deletecollection"
    return group, resource, verb


def named_rule_for(method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> NamedRule:
    """:func:`rule_for` with the object's name the authorizer sees ("" for a collection: a create's name is
    in its body, so RBAC cannot restrict it by name).

    Raises:
        ValueError: not a resource path.
    """
    _, rest = _resource_path(path)
    return (*rule_for(method, path, query), rest[1] if len(rest) >= 2 else "")


def sample_command(kind: str, verb: str) -> Command:
    """A command of one row of the authorization table (what its request looks like is all that matters).

    Raises:
        ValueError: a verb no command has, or a kind the resource table does not know.
    """
    resource = by_kind(kind)
    if resource is None:
        raise ValueError(f"unknown kind {kind}")
    target = ObjectRef(api_version=resource.api_version, kind=kind, namespace=_SAMPLE_NS, name="x", uid="u")
    samples: dict[str, Command] = {
        "create_object": CreateObject(target=target, body={}),
        "patch_object": PatchObject(target=target, patch={}),
        "delete_object": DeleteObject(target=target, propagation="Background"),
        "delete_collection": DeleteCollection(
            api_version=resource.api_version, kind=kind, namespace=_SAMPLE_NS, label_selector="a=b"
        ),
        "patch_status": PatchStatus(target=target, status={}),
        "emit_event": EmitEvent(regarding=target, event_type="Normal", reason="r", message="m"),
        "submit_ray_job": SubmitRayJob(dashboard=_SAMPLE_DASHBOARD, request={}),
        "stop_ray_job": StopRayJob(dashboard=_SAMPLE_DASHBOARD, job_id="j"),
        "put_serve_config": PutServeConfig(dashboard=_SAMPLE_DASHBOARD, config={}),
    }
    if verb not in samples:
        raise ValueError(f"no command has the verb {verb}")
    return samples[verb]


def allowed_pairs() -> frozenset[tuple[str, str]]:
    """Every (kind, verb) some custom-resource kind may make the applier do."""
    return frozenset(pair for pairs in ALLOWED.values() for pair in pairs)


def _informer_rules(resources: Iterable[ResourceType]) -> Iterator[Rule]:
    for resource in resources:
        if not resource.watched:
            continue
        driver = WatchDriver(Scope(resource, _SAMPLE_NS), "1")
        path = resource.collection_path(_SAMPLE_NS)
        yield rule_for("GET", path, driver.list_query(""))
        yield rule_for("GET", path, driver.watch_query())


def _owner_rules(resources: Iterable[ResourceType]) -> Iterator[Rule]:
    """The projection's reads of a custom resource whose child goes (``owners``)."""
    for resource in resources:
        if resource.is_key_kind:
            yield rule_for("GET", *owner_request(resource, _SAMPLE_NS, "x"))


def _refusal_rules() -> Iterator[Rule]:
    """The informers' Warning Event on an object they do not project (``informer.Informer._refuse``)."""
    regarding = ObjectRef(api_version="v1", kind="Pod", namespace=_SAMPLE_NS, name="x", uid="u")
    call = event_call(EmitEvent(regarding=regarding, event_type="Warning", reason="r", message="m"), now=_SAMPLE_TIME)
    yield rule_for(call.method, call.path, call.query)


def _election_rules() -> Iterator[NamedRule]:
    """The requests of ``election.LeaseElection``: GET and PUT of the Lease, POST of a missing one."""
    path = object_path(LEASE, _SAMPLE_NS, LEASE_NAME)
    yield named_rule_for("GET", path)
    yield named_rule_for("PUT", path)
    yield named_rule_for("POST", LEASE.collection_path(_SAMPLE_NS))


def _applier_rules(pairs: Iterable[tuple[str, str]]) -> Iterator[Rule]:
    """The requests of the authorization table's rows (the applier's own Events included)."""
    base = dashboard_base_url(_SAMPLE_DASHBOARD, use_proxy=True, api_host="", cluster_domain="")
    for kind, verb in sorted(pairs):
        command = sample_command(kind, verb)
        if isinstance(command, SubmitRayJob | StopRayJob | PutServeConfig):
            dashboard = plan_dashboard_call(command)
            yield rule_for(dashboard.method, base + dashboard.path)
            yield rule_for("GET", secret_path(_SAMPLE_DASHBOARD))
            if isinstance(command, PutServeConfig):
                # A timed-out PUT is confirmed by reading the Serve applications (DashboardClient.apply).
                yield rule_for("GET", base + SERVE_APPLICATIONS_PATH)
            continue
        call = plan_call(command, now=_SAMPLE_TIME, generate=lambda _: "")
        yield rule_for(call.method, call.path, call.query)


def _failure_rules() -> Iterator[Rule]:
    """The failure reports' read of the key's custom resource (``failures.FailureReporter``)."""
    for kind in KEY_KINDS:
        yield rule_for("GET", owner_path(kind, _SAMPLE_NS, "x"))


def _prober_rules() -> Iterator[Rule]:
    base = dashboard_base_url(_SAMPLE_DASHBOARD, use_proxy=True, api_host="", cluster_domain="")
    yield rule_for("GET", secret_path(_SAMPLE_DASHBOARD))
    yield rule_for("GET", base + "/api/jobs/j")  # the prober: Ray jobs
    yield rule_for("GET", base + SERVE_APPLICATIONS_PATH)  # the prober: Serve applications
    head = PodEndpoint(namespace=_SAMPLE_NS, name="head", uid="u", ip="10.0.0.1", port=DEFAULT_SERVE_PORT)
    yield rule_for("GET", pod_base_url(head, use_proxy=True, api_host="") + HEALTHZ_PATH)  # Serve proxy health


def _finalizer_rules(resources: Iterable[ResourceType]) -> Iterator[Rule]:
    for resource in resources:
        if resource.is_key_kind:
            yield resource.group, f"{resource.plural}/finalizers", "update"


def required_rules_by_role(resources: Sequence[ResourceType] = RESOURCES) -> dict[WatcherRole, frozenset[Rule]]:
    """Per role, every permission it uses in the namespaces it works in (see the module docstring)."""
    return {
        "watch": frozenset((*_informer_rules(resources), *_owner_rules(resources), *_refusal_rules())),
        "apply": frozenset(
            (
                *_applier_rules(allowed_pairs()),
                *_failure_rules(),
                *_finalizer_rules(resources),
                *GRANTED_RULES,
            )
        ),
        "probe": frozenset(_prober_rules()),
    }


RULES_BY_ROLE: Final[Mapping[WatcherRole, frozenset[Rule]]] = required_rules_by_role()
"""Per role, its permissions in every watched namespace (a ClusterRole, or a Role per namespace)."""

NAMESPACE_RULES_BY_ROLE: Final[Mapping[WatcherRole, frozenset[NamedRule]]] = {
    "watch": frozenset(_election_rules()),
    "apply": frozenset(),
    "probe": frozenset(),
}
"""Per role, its permissions in the watcher's own namespace only (``POD_NAMESPACE``): the watch side's Lease."""

REQUIRED_RULES: Final[frozenset[Rule]] = frozenset().union(*(RULES_BY_ROLE[role] for role in WATCHER_ROLES))
"""Every role's cluster-wide permissions: what one process running all roles holds."""


def as_named_policy_rules(rules: Iterable[NamedRule]) -> list[dict[str, list[str]]]:
    """The rules as compact Role ``rules``: one entry per group, verb set and object name (``resourceNames``)."""
    by_resource: dict[tuple[str, str, str], set[str]] = {}
    for group, resource, verb, name in rules:
        by_resource.setdefault((group, resource, name), set()).add(verb)
    merged: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
    for (group, resource, name), verbs in sorted(by_resource.items()):
        merged.setdefault((group, tuple(sorted(verbs)), name), []).append(resource)
    policy: list[dict[str, list[str]]] = []
    for (group, verb_list, name), resources in sorted(merged.items()):
        entry = {"apiGroups": [group], "resources": resources}
        if name:
            entry["resourceNames"] = [name]
        policy.append({**entry, "verbs": list(verb_list)})
    return policy


def as_policy_rules(rules: Iterable[Rule]) -> list[dict[str, list[str]]]:
    """The triples as compact ClusterRole ``rules`` (one entry per group and verb set)."""
    return as_named_policy_rules((*rule, "") for rule in rules)
