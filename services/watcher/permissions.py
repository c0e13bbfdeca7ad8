"""The Kubernetes permissions the watcher needs: every ``(apiGroup, resource, verb)`` it uses, derived.

Role: :data:`REQUIRED_RULES` is computed from the same code that makes the requests, so it cannot drift
from them: the informers' list and watch queries (the ``resources`` table with ``informer.WatchDriver``), the
applier's planned calls for exactly the (kind, verb) rows of the authorization table
(``authorize.ALLOWED``, through ``calls.plan_call`` and the dashboard client's token read and service-proxy
calls), and the prober's GETs (Ray jobs and Serve applications through the service proxy, the head's Serve
health through the pod proxy). A command the table does not allow is never sent, so its permission is
never granted either (e.g. Secrets: create, and get/list/watch, never patch or delete). Each planned
request is turned into an RBAC triple by :func:`rule_for` (method + path + query → verb, the way the
API server's authorizer does it). ``deploy/`` must grant exactly this set (``tests/deploy/test_rbac.py``).

Two additions are not requests but API-server rules, so they are listed with their reason:
- ``<plural>/finalizers`` update on the four custom resources: creating a child whose controller
  ownerReference has ``blockOwnerDeletion: true`` needs it (OwnerReferencesPermissionEnforcement).
- ``authorize.GRANTED_RULES``: the autoscaler Role the RayCluster reconcile creates; Kubernetes only
  lets the watcher create a Role granting what the watcher itself holds (RBAC escalation check).
  ``tests/unit/watcher/test_permissions.py`` checks the reconciler's Role against it.

Deliberately absent: ``update`` (the applier only patches), configmaps, endpoints, nodes, leases (HA is
message de-duplication, not leader election).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Final

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
from services.watcher.authorize import ALLOWED, GRANTED_RULES, Rule
from services.watcher.calls import plan_call
from services.watcher.dashboard import (
    dashboard_base_url,
    plan_dashboard_call,
    pod_base_url,
    secret_path,
)
from services.watcher.informer import Scope, WatchDriver
from services.watcher.resources import RESOURCES, ResourceType, by_kind

_SAMPLE_NS: Final = "ns"
_SAMPLE_TIME: Final = datetime(2000, 1, 1, tzinfo=UTC)
_SAMPLE_DASHBOARD: Final = DashboardRef(
    namespace=_SAMPLE_NS, service="svc", port=DEFAULT_DASHBOARD_PORT, cluster="c", auth_secret="c"
)

_METHOD_VERBS: Final = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "GET": "get"}


def rule_for(method: str, path: str, query: Sequence[tuple[str, str]] = ()) -> Rule:
    """The RBAC triple the API server's authorizer checks for one request.

    Raises:
        ValueError: not a resource path.
    """
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


def _applier_rules(pairs: Iterable[tuple[str, str]]) -> Iterator[Rule]:
    """The requests of the authorization table's rows (the applier's own Events included)."""
    base = dashboard_base_url(_SAMPLE_DASHBOARD, use_proxy=True, api_host="", cluster_domain="")
    for kind, verb in sorted(pairs):
        command = sample_command(kind, verb)
        if isinstance(command, SubmitRayJob | StopRayJob | PutServeConfig):
            dashboard = plan_dashboard_call(command)
            yield rule_for(dashboard.method, base + dashboard.path)
            yield rule_for("GET", secret_path(_SAMPLE_DASHBOARD))
            continue
        call = plan_call(command, now=_SAMPLE_TIME, generate=lambda _: "")
        yield rule_for(call.method, call.path, call.query)


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


def required_rules(resources: Sequence[ResourceType] = RESOURCES) -> frozenset[Rule]:
    """Every permission the watcher uses (see the module docstring)."""
    return frozenset(
        (
            *_informer_rules(resources),
            *_applier_rules(allowed_pairs()),
            *_prober_rules(),
            *_finalizer_rules(resources),
            *GRANTED_RULES,
        )
    )


REQUIRED_RULES: Final[frozenset[Rule]] = required_rules()


def as_policy_rules(rules: Iterable[Rule] = REQUIRED_RULES) -> list[dict[str, list[str]]]:
    """The triples as compact ClusterRole ``rules`` (one entry per group and verb set)."""
    by_resource: dict[tuple[str, str], set[str]] = {}
    for group, resource, verb in rules:
        by_resource.setdefault((group, resource), set()).add(verb)
    merged: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), verbs in sorted(by_resource.items()):
        merged.setdefault((group, tuple(sorted(verbs))), []).append(resource)
    return [
        {"apiGroups": [group], "resources": resources, "verbs": list(verbs)}
        for (group, verbs), resources in sorted(merged.items())
    ]
