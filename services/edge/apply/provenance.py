"""Whether a command's content follows from its key's custom resource: the applier's second check.

Role: ``authorize`` bounds what a key may touch (namespace, verb table, ownership, labels); this module
bounds what it may put there. A command that passes ``authorize`` is executed only if its content is what
the user's custom resource implies, so that whoever publishes on the commands subjects (a compromised
reconciler) can run nothing the user did not ask for. The expected content is re-derived here with the
same pure builders the reconcile code used (``services.reconciler.<kind>``), from the custom resource as
the applier's facts hold it, and the fields that decide what runs are compared:

- a Pod of a RayCluster: its whole ``spec`` (containers, images, commands, args, env, volumes,
  securityContext, serviceAccountName, host namespaces, the autoscaler sidecar, probes, ports) is the one
  ``pod_bodies`` builds from the head template or the worker group its labels name;
- a Service and an Ingress (what is exposed, and how): a RayCluster's head, headless and serve Services
  and its Ingress as ``services`` and ``ingress`` build them, a RayJob's head Service
  (``rayjob.cluster``), a RayService's head and serve Services pointing at one of its clusters
  (``kube_services``), and the patches that re-point them;
- a Job: the Redis cleanup Job of a RayCluster (``gcsft``) or a RayJob's submitter Job
  (``submitter``), whose job id and dashboard address are the RayJob's (``_submitter_job``);
- a RayCluster a RayJob or a RayService creates, or a RayService's in-place update of one: its spec is
  the ``rayClusterSpec`` / ``rayClusterConfig`` through the reconcile's cluster builder;
- a RayJob a RayCronJob creates: its spec is the ``jobTemplate``;
- the autoscaler Role and RoleBinding: the Role's rules, and the RoleBinding's Role and its only subject,
  the ServiceAccount the cluster's head Pod runs as (``autoscaler_rbac``); the autoscaler's
  ServiceAccount, with nothing but its name, labels and owner;
- a PersistentVolumeClaim: the RocksDB claim of GCS fault tolerance (``gcsft.gcs_pvc``);
- a RayService's Gateway and HTTPRoute of an incremental upgrade (``incremental``): the Gateway's spec,
  and a route to the per-cluster serve Services of the RayService's own clusters, weights adding up to 100;
- the auth Secret: it carries no data of its own (the applier generates the token);
- a patch changes only fields raybus patches (:data:`POD_PATCHED`, :data:`RAYSERVICE_CLUSTER_PATCHED`,
  :data:`OWN_FINALIZER`): a Pod's serve label and recreate annotations, the key's own finalizer, a
  RayJob's workers' ``suspend``, a RayService's serve-config record (which must be the digest of its
  ``serveConfigV2``) and deletion schedule;
- a job submission is ``build_submit_request`` of the RayJob (entrypoint, runtime env, metadata,
  entrypoint resources); a Serve config is the RayService's ``serveConfigV2``, only its
  ``target_capacity`` chosen by raybus.

The key's custom resource is read with the status patches of the same batch applied (a RayJob's job id
and dashboard URL are decided in the pass that creates its cluster), after the ones this applier wrote
for the key lately (``freshness.WrittenStatus``). The other commands of the table (Events, deletes,
status patches) start and expose nothing and are left to ``authorize``. A builder that raises on the
custom resource (a malformed one) refuses: nothing is derived from what cannot be read.

Known limit: the facts may be newer than the decision's snapshot. A command decided just before the user
changed the custom resource (a new worker image while a scale-up is applied) no longer follows from it and
is refused like a forged one (``denied``, with an Event); the next decision, on the changed resource,
issues what it now asks for.

Invariants: pure (no I/O, clock or randomness); never raises; one :class:`ContentCheck` per batch caches
what it derives, so a scale-up of a thousand Pods builds each group's Pod once. The last
:data:`PREPARED` RayClusters' decoded views and worker Pod specs are also remembered by the identity of the
facts' object (the facts replace an object on each write, never change it), and :func:`prepare` derives
them when a spec is edited: the applier's batch comes some milliseconds after its facts saw the edit (the
reconciler decides meanwhile), so on a scale-up the check finds them made, off the path of the change.

Not here: the authority table (``authorize``), freshness of a batch (``freshness``), recording a refusal
(``applier``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from schema.config import OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import Command, CreateObject, PatchObject, PatchStatus, PutServeConfig, SubmitRayJob, command_verb
from schema.objects import mapping, metadata_of, text
from schema.probes import head_service_name, serve_port
from schema.ray import WorkerGroupSpec, conventions
from schema.ray.rayjob import RayJobSpec
from services.edge.apply.authorize import command_kind
from services.reconciler.common.memo import by_identity, unremembered
from services.reconciler.common.owners import owner_reference_to
from services.reconciler.raycluster import auth, autoscaler_rbac, gcsft, ingress, names, pod_bodies, services
from services.reconciler.raycluster.model import ClusterView, autoscaling_enabled, decode_view
from services.reconciler.rayjob import cluster as rayjob_cluster
from services.reconciler.rayjob import submitter
from services.reconciler.rayjob.validation import validate_rayjob
from services.reconciler.rayservice import clusters as rayservice_clusters
from services.reconciler.rayservice import incremental, kube_services
from services.reconciler.rayservice import names as rayservice_names
from services.reconciler.rayservice.model import ServiceModel, read_model
from services.reconciler.rayservice.serve_config import TARGET_CAPACITY, config_hash, serve_config_json

_json_encoder: Final = msgspec.json.Encoder()
_json_decoder: Final[msgspec.json.Decoder[Any]] = msgspec.json.Decoder()


def _as_sent(value: Any) -> Any:
    """``value`` as the bus delivers it (tuples become lists, keys strings): what a body is compared as."""
    return _json_decoder.decode(_json_encoder.encode(value))


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def first_difference(path: str, got: Any, want: Any) -> str:
    """Where ``got`` first differs from ``want`` (a dotted path with the two values), "" when equal.

    Equal is Python's equal of the decoded JSON: ``1 == 1.0`` (one number to the API server), and
    ``True == 1``, a bool where a number belongs (or the reverse), which the API server refuses to decode."""
    if got == want:  # the common case, compared in C; the walk below only explains a difference
        return ""
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        for key in sorted(set(got) | set(want), key=str):
            if key not in want:
                return f"{path}.{key} {_short(got[key])} is not derived from the custom resource"
            if key not in got:
                return f"{path}.{key} is missing"
            found = first_difference(f"{path}.{key}", got[key], want[key])
            if found:
                return found
        return ""
    if isinstance(got, list) and isinstance(want, list):
        for index, (a, b) in enumerate(zip(got, want, strict=False)):
            found = first_difference(f"{path}[{index}]", a, b)
            if found:
                return found
        if len(got) > len(want):
            return f"{path}[{len(want)}] {_short(got[len(want)])} is not derived from the custom resource"
        if len(got) < len(want):
            return f"{path}[{len(got)}] is missing"
        return ""
    return f"{path} is {_short(got)}, not {_short(want)}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``target`` with the merge patch ``patch`` applied (neither is modified)."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class ObjectFacts(Protocol):
    """The objects the watcher knows (``authorize.Facts`` has this and more)."""

    def find(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The object of ``kind`` with that namespace and name, as last seen, or None."""
        ...

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        """Whether that object was seen deleted lately (and not seen since)."""
        ...


class Unreadable(Exception):
    """The custom resource the expected content derives from cannot be read (or the builder refuses it)."""


class ContentCheck:
    """The content checks of one batch of ``key``.

    Args:
        key: the batch's reconcile key.
        facts: what the watcher knows (the key's custom resource and its RayClusters, whole).
        config: the operator configuration the reconcilers run with (gates, switches, pod defaults).
        commands: the batch's commands (its status patches are folded into the custom resource).
    """

    def __init__(
        self, key: ReconcileKey, facts: ObjectFacts, config: OperatorConfig, commands: Sequence[Command] = ()
    ) -> None:
        self.key = key
        self.facts = facts
        self.config = config
        self._commands = commands
        self._own: Mapping[str, Any] | None = None
        self._derived: dict[tuple[str, ...], Any] = {}
        self._views: dict[str, ClusterView] = {}

    def problem(self, command: Command) -> str:
        """Why ``command``'s content does not follow from the key's custom resource ("" when it does).

        Called only for commands ``authorize`` allowed (the key's custom resource exists)."""
        check = _CHECKS.get((self.key.kind, command_verb(command), command_kind(command)))
        if check is None:
            return ""
        try:
            return check(self, command)
        except Unreadable as exc:
            return str(exc)
        except Exception as exc:  # a builder that fails on a hostile resource refuses, never crashes
            return f"nothing can be derived from {self.key}: {type(exc).__name__}: {exc}"[:500]

    # --- what the key's custom resource implies, derived once per batch ---------------------------

    def own(self) -> Mapping[str, Any]:
        """The key's custom resource, with the batch's status patches applied."""
        if self._own is None:
            found = self.facts.find(self.key.kind, self.key.namespace, self.key.name) or {}
            status: Any = found.get("status")
            for command in self._commands:
                if isinstance(command, PatchStatus):
                    status = merge_patch(status, command.status)
            self._own = {**found, "status": status} if status is not None else found
        return self._own

    def created(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """The body of the batch's create of the ``kind`` ``name`` (itself checked like any create), or None."""
        for command in self._commands:
            if isinstance(command, CreateObject) and (command.target.kind, command.target.name) == (kind, name):
                return command.body
        return None

    def derived(self, what: tuple[str, ...], build: Callable[[], Any]) -> Any:
        """``build()`` as the bus would carry it, computed once per batch for ``what``."""
        if what not in self._derived:
            self._derived[what] = _as_sent(build())
        return self._derived[what]

    def cluster(self, name: str) -> ClusterView:
        """The RayCluster ``name`` of the key's namespace, decoded as its reconcile decodes it (once a batch)."""
        view = self._views.get(name)
        if view is None:
            obj = self.facts.find("RayCluster", self.key.namespace, name)
            if obj is None:
                raise Unreadable(f"RayCluster {self.key.namespace}/{name} is not known to the watcher")
            try:
                view = self._views[name] = _view(obj)
            except msgspec.ValidationError as exc:
                raise Unreadable(f"RayCluster {self.key.namespace}/{name} cannot be read: {exc}") from exc
        return view

    def rayjob_spec(self) -> RayJobSpec:
        """The key's RayJob spec, validated as its reconcile validates it."""
        spec, invalid = validate_rayjob(self.own(), config=self.config)
        if spec is None:
            reason = invalid.message if invalid is not None else "it cannot be read"
            raise Unreadable(f"{self.key} is invalid, raybus runs nothing for it: {reason}")
        return spec

    def rayservice(self) -> ServiceModel:
        """The key's RayService, read as its reconcile reads it."""
        model = read_model(self.own())
        if model.spec is None:
            raise Unreadable(f"{self.key} cannot be read: {model.decode_error}")
        return model


PREPARED: Final = 32
"""RayClusters whose derivations the checks remember: more than are edited at once, and few, as the
remembered keep the facts' objects they came from (some 40 KB each, with their view)."""


@by_identity(PREPARED)
def _view(obj: Mapping[str, Any]) -> ClusterView:
    """``obj`` decoded as its reconcile decodes it, remembered among the checks' few (not in the larger
    memory of ``decode_view``)."""
    return unremembered(decode_view)(obj)


@by_identity(PREPARED)
def _worker_spec(view: ClusterView, group: WorkerGroupSpec, config: OperatorConfig) -> Any:
    """The spec of a worker Pod of ``group``, as the bus carries it (its base Pod is not held beside it)."""
    return _as_sent(unremembered(pod_bodies.worker_pod_base)(view, group, config)["spec"])


def prepare(kind: str, obj: Mapping[str, Any], config: OperatorConfig) -> None:
    """Derive what the checks of a RayCluster's next batch compare its worker Pods with, once the facts hold
    ``obj`` (``KvFacts``' ``on_edit``); a resource nothing can be derived from is left to the check that
    says why."""
    if kind != "RayCluster":
        return
    try:
        view = _view(obj)
        for group in view.spec.worker_group_specs or ():
            _worker_spec(view, group, config)
    except Exception:  # the batch's own check derives it again and refuses with the reason
        return


Check = Callable[[ContentCheck, Any], str]


# --- creates ---------------------------------------------------------------------------------------


def _pod(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    labels = mapping(metadata_of(command.body).get("labels"))
    node_type, group = labels.get(conventions.LABEL_NODE_TYPE), labels.get(conventions.LABEL_GROUP)
    if labels.get(conventions.LABEL_CLUSTER) != view.name:
        return f"the Pod's {conventions.LABEL_CLUSTER} label is not {view.name}"
    if node_type == conventions.NODE_HEAD and group == conventions.HEAD_GROUP:
        spec = check.derived(("head",), lambda: pod_bodies.head_pod(view, check.config, name="x", spec_hash="")["spec"])
        source = "head template"
    elif node_type == conventions.NODE_WORKER:
        groups = [g for g in view.spec.worker_group_specs or () if g.group_name == group]
        if not groups:
            return f"the Pod's {conventions.LABEL_GROUP} label {group!r} names no worker group of {check.key}"
        spec = _worker_spec(view, groups[0], check.config)
        source = f"worker group {group}"
    else:
        return f"the Pod's labels name no node of {check.key} ({node_type!r}, {group!r})"
    found = first_difference("spec", command.body.get("spec"), spec)
    return f"the Pod's {found}, as the {source} of {check.key} implies" if found else ""


def _role(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    rules = check.derived(("role",), lambda: autoscaler_rbac.role(view)["rules"])
    found = first_difference("rules", command.body.get("rules"), rules)
    return f"the Role's {found}, as the autoscaler of {check.key} needs" if found else ""


def _role_binding(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    binding = check.derived(("rolebinding",), lambda: autoscaler_rbac.role_binding(view))
    for field in ("roleRef", "subjects"):
        found = first_difference(field, command.body.get(field), binding[field])
        if found:
            account = autoscaler_rbac.service_account_name(view)
            return (
                f"the RoleBinding's {found}: only the autoscaler Role of {check.key}, bound to the "
                f"ServiceAccount {account} its Pods run as"
            )
    return ""


def _secret(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    if not auth.needs_auth_secret(view):
        return f"{check.key} has no operator-managed auth Secret"
    want = check.derived(("secret",), lambda: auth.auth_secret(view))
    for field in sorted(set(command.body) | set(want)):
        if field not in ("metadata", "apiVersion", "kind"):
            found = first_difference(field, command.body.get(field), want.get(field))
            if found:
                return f"the Secret's {found}: the auth token is generated by the applier"
    annotations = mapping(metadata_of(command.body).get("annotations"))
    wanted = mapping(metadata_of(want).get("annotations"))
    found = first_difference("metadata.annotations", dict(annotations), dict(wanted))
    return f"the Secret's {found}" if found else ""


def _cluster_service(check: ContentCheck, command: CreateObject) -> str:
    """A RayCluster's head, headless or serve Service, as its reconcile builds it (what it exposes, how)."""
    view = check.cluster(check.key.name)
    builders = {
        "head": lambda: services.head_service(view, check.config),
        "headless": lambda: services.headless_service(view),
        "serve": lambda: services.serve_service(view),
    }
    for which, build in builders.items():
        want = check.derived(("service", which), build)
        if metadata_of(want).get("name") == command.target.name:
            found = first_difference("spec", command.body.get("spec"), want.get("spec"))
            return f"the Service's {found}, as the {which} Service of {check.key} implies" if found else ""
    return f"{check.key} has no Service {command.target.name}"


def _cluster_ingress(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    if not view.spec.head_group_spec.enable_ingress:
        return f"{check.key} asks for no Ingress"
    want = check.derived(("ingress",), lambda: ingress.ingress(view))
    for field in ("spec", "metadata.annotations"):
        found = first_difference(field, _field(command.body, field), _field(want, field))
        if found:
            return f"the Ingress's {found}, as the head group of {check.key} implies"
    return ""


def _cluster_ingress_patch(check: ContentCheck, command: PatchObject) -> str:
    view = check.cluster(check.key.name)
    existing = check.facts.find("Ingress", check.key.namespace, command.target.name)
    action, want = ingress.plan_ingress(view, dict(existing) if existing is not None else None)
    if action != "update" or command.target.name != names.ingress_name(view.name):
        return f"{check.key} has no Ingress {command.target.name} to update"
    found = first_difference("patch", command.patch, _as_sent(want))
    return f"the Ingress update's {found}, as the head group of {check.key} implies" if found else ""


def _cluster_job(check: ContentCheck, command: CreateObject) -> str:
    view = check.cluster(check.key.name)
    if not gcsft.finalizer_applies(view, check.config):
        return f"{check.key} has no Redis storage to clean up"
    spec = check.derived(("cleanup-job",), lambda: gcsft.redis_cleanup_job(view, check.config)["spec"])
    found = first_difference("spec", command.body.get("spec"), spec)
    return f"the Job's {found}, as the Redis cleanup of {check.key} implies" if found else ""


def _submitter_job(check: ContentCheck, command: CreateObject) -> str:
    """A RayJob's K8sJobMode submitter Job, built for the job id and dashboard address the decision used.

    Those two are written to the RayJob's status by the pass that creates the Job (or the one before), so
    the facts may not show them yet, and the batch may not carry that write (a status patch still in
    flight from an earlier decision of the same resourceVersion withholds it). They are taken from the
    status (the facts, the statuses this applier wrote, the batch's own patch) and, for the address, also
    from the cluster's head Service as the facts hold it: both are what the RayJob implies, and nothing
    else is accepted. Everything else (image, command and args, env, volumes, securityContext,
    serviceAccountName, backoffLimit) is compared whole."""
    spec = check.rayjob_spec()
    rayjob = check.own()
    status = mapping(rayjob.get("status"))
    selected = (spec.cluster_selector or {}).get(conventions.LABEL_CLUSTER, "")
    cluster_name = text(status.get("rayClusterName")) or selected
    cluster = check.facts.find("RayCluster", check.key.namespace, cluster_name) if cluster_name else None
    if cluster is None:
        return f"{check.key} has no RayCluster {cluster_name!r} the watcher knows to submit to"
    service_name = head_service_name(cluster_name, cluster)
    served = rayjob_cluster.dashboard_url_of(
        check.facts.find("Service", check.key.namespace, service_name),
        service_name=service_name,
        namespace=check.key.namespace,
        config=check.config,
    )
    job_ids = _distinct(text(status.get("jobId")), spec.job_id)
    urls = _distinct(text(status.get("dashboardURL")), served or "")
    owner = owner_reference_to(rayjob, "RayJob")

    def build(job_id: str, url: str) -> Any:
        return submitter.build_submitter_job(
            rayjob,
            spec,
            raw_spec=mapping(rayjob.get("spec")),
            job_id=job_id,
            dashboard_url=url,
            cluster_name=cluster_name,
            cluster_spec=mapping(cluster.get("spec")),
            owner_reference=owner,
            config=check.config,
        )["spec"]

    wants = [
        check.derived(("submitter", job_id, url), functools.partial(build, job_id, url))
        for job_id in job_ids
        for url in urls
    ]
    found = _matches_one("spec", command.body.get("spec"), wants)
    return f"the submitter Job's {found}, as {check.key} implies" if found else ""


def _distinct(*values: str) -> list[str]:
    """The non-empty ``values`` once each, in order ([""] when there is none)."""
    return list(dict.fromkeys(v for v in values if v)) or [""]


def _service_account(check: ContentCheck, command: CreateObject) -> str:
    """The autoscaler's ServiceAccount: only when the cluster autoscales and names none of its own, and
    with nothing but its name, labels and owner (an annotation can bind a cloud identity to it)."""
    view = check.cluster(check.key.name)
    if not autoscaling_enabled(view.spec) or autoscaler_rbac.user_service_account(view):
        return f"{check.key} needs no ServiceAccount from raybus"
    want = check.derived(("serviceaccount",), lambda: autoscaler_rbac.service_account(view))
    if command.target.name != metadata_of(want).get("name"):
        return f"{check.key}'s autoscaler runs as {metadata_of(want).get('name')}, not {command.target.name}"
    return _same_object("ServiceAccount", command.body, want, f"the autoscaler of {check.key} needs")


def _same_object(kind: str, got: Mapping[str, Any], want: Mapping[str, Any], source: str) -> str:
    """``got`` has ``want``'s fields, labels and annotations (name, namespace and owner are ``authorize``'s)."""
    for field in sorted(set(got) | set(want)):
        if field not in ("metadata", "apiVersion", "kind"):
            found = first_difference(field, got.get(field), want.get(field))
            if found:
                return f"the {kind}'s {found}, as {source}"
    for field in ("metadata.labels", "metadata.annotations"):
        found = first_difference(field, _field(got, field) or {}, _field(want, field) or {})
        if found:
            return f"the {kind}'s {found}, as {source}"
    return ""


def _gcs_claim(check: ContentCheck, command: CreateObject) -> str:
    """The operator-managed RocksDB claim of GCS fault tolerance: its size, access modes and class only."""
    view = check.cluster(check.key.name)
    want = check.derived(("gcs-pvc",), lambda: gcsft.gcs_pvc(view))
    if not isinstance(want, Mapping) or command.target.name != metadata_of(want).get("name"):
        return f"{check.key} has no PersistentVolumeClaim {command.target.name} of its own"
    return _same_object("PersistentVolumeClaim", command.body, want, f"the GCS storage of {check.key} asks")


def _gateway_spec(check: ContentCheck, name: str) -> Any:
    model = check.rayservice()
    if model.upgrade_options is None or name != rayservice_names.gateway_name(model.name):
        raise Unreadable(f"{check.key} has no Gateway {name}")
    class_name = model.upgrade_options.gateway_class_name
    return check.derived(("gateway",), lambda: incremental.gateway_spec(class_name))


def _gateway(check: ContentCheck, command: CreateObject) -> str:
    """The incremental upgrade's Gateway: one HTTP listener of the RayService's gateway class."""
    found = _same_object(
        "Gateway",
        {"spec": command.body.get("spec")},
        {"spec": _gateway_spec(check, command.target.name)},
        f"the upgrade options of {check.key} ask",
    )
    return found


def _gateway_patch(check: ContentCheck, command: PatchObject) -> str:
    want = {"spec": _gateway_spec(check, command.target.name)}
    if command.patch_type != "merge" or not isinstance(command.patch, Mapping):
        return f"{check.key} updates its Gateway only with a merge patch of its spec"
    found = first_difference("patch", command.patch, want)
    return f"the Gateway update's {found}, as the upgrade options of {check.key} ask" if found else ""


def _route_spec(check: ContentCheck, name: str, spec: Any) -> str:
    """An HTTPRoute spec of the RayService: its Gateway, the prefix ``/``, weighted backends that are
    the per-cluster serve Services of its own RayClusters on their serve ports ("" when it is one)."""
    model = check.rayservice()
    if model.upgrade_options is None or name != rayservice_names.httproute_name(model.name):
        return f"{check.key} has no HTTPRoute {name}"
    rules = mapping(spec).get("rules")
    first = mapping(rules[0]) if isinstance(rules, list) and rules else {}
    refs = first.get("backendRefs")
    refs = refs if isinstance(refs, list) else []
    owner = text(metadata_of(check.own()).get("uid"))
    backends: list[tuple[str, int, int]] = []
    for raw in refs[:2]:
        ref = mapping(raw)
        service, weight = text(ref.get("name")), ref.get("weight")
        suffix = rayservice_names.serve_service_name("")
        cluster_name = service[: -len(suffix)] if service.endswith(suffix) else ""
        cluster = check.facts.find("RayCluster", check.key.namespace, cluster_name) if cluster_name else None
        owners = metadata_of(cluster or {}).get("ownerReferences")
        owned = isinstance(owners, list) and any(
            mapping(o).get("controller") is True and mapping(o).get("uid") == owner and owner for o in owners
        )
        if cluster is None and cluster_name:  # the pending cluster, created by the same decision
            cluster = check.created("RayCluster", cluster_name)
            owned = cluster is not None
        gone = (
            cluster is None
            and bool(cluster_name)
            and check.facts.recently_deleted("RayCluster", check.key.namespace, cluster_name)
        )
        if not (owned or gone):
            return f"the HTTPRoute's backend {_short(service)} is no serve Service of a RayCluster of {check.key}"
        if type(weight) is not int or not 0 <= weight <= 100:
            return f"the HTTPRoute's weight {_short(weight)} for {service} is not a percentage"
        # A route decided just before its cluster's deletion was projected names it still (as ``authorize``
        # lets such a command through as gone): its Service goes with the cluster.
        port = ref.get("port") if gone else serve_port(cluster)
        backends.append((service, port if type(port) is int else 0, weight))
    if sum(weight for _, _, weight in backends) != 100:
        return "the HTTPRoute's weights do not add up to 100"
    want = incremental.httproute_spec(rayservice=model.name, namespace=model.namespace, backends=backends)
    found = first_difference("spec", _as_sent(spec), _as_sent(want))
    return f"the HTTPRoute's {found}, as {check.key} routes" if found else ""


def _httproute(check: ContentCheck, command: CreateObject) -> str:
    return _route_spec(check, command.target.name, command.body.get("spec"))


def _httproute_patch(check: ContentCheck, command: PatchObject) -> str:
    patch = command.patch
    if command.patch_type != "merge" or not isinstance(patch, Mapping) or set(patch) != {"spec"}:
        return f"{check.key} updates its HTTPRoute only with a merge patch of its spec"
    return _route_spec(check, command.target.name, patch["spec"])


CLUSTER_FIELDS: Final = ("spec", "metadata.labels", "metadata.annotations")
"""What is compared of a RayCluster a RayJob or a RayService makes: its spec, and the labels and annotations
that change how its Pods are built (``ray.io/overwrite-container-cmd``, GCS fault tolerance, ...)."""


def _field(body: Mapping[str, Any], dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        value = mapping(value).get(part)
    return value


def _cluster_difference(body: Mapping[str, Any], wants: Sequence[Mapping[str, Any]]) -> str:
    """ "" when ``body`` agrees with one of ``wants`` on :data:`CLUSTER_FIELDS`, else where it differs."""
    differences = [
        next((d for f in CLUSTER_FIELDS if (d := first_difference(f, _field(body, f), _field(want, f)))), "")
        for want in wants
    ]
    return "" if "" in differences else differences[0]


def _rayjob_cluster(check: ContentCheck, command: CreateObject) -> str:
    spec = check.rayjob_spec()
    rayjob = check.own()
    status = mapping(rayjob.get("status"))
    name = command.target.name
    want = check.derived(
        ("rayjob-cluster", name),
        lambda: rayjob_cluster.build_cluster(
            rayjob,
            spec,
            cluster_name=name,
            job_id=text(status.get("jobId")),
            dashboard_url=text(status.get("dashboardURL")),
            config=check.config,
        ),
    )
    found = _cluster_difference(command.body, [want])
    return f"the RayCluster's {found}, as {check.key} implies" if found else ""


def _goal_clusters(
    check: ContentCheck, model: ServiceModel, name: str, keep: Mapping[str, str] | None = None
) -> list[Any]:
    """The RayClusters a RayService may make its cluster ``name``: with and without the workers' replicas."""
    rayservice = check.own()
    kept = dict(keep or {})

    def goal(clear: bool) -> dict[str, Any]:
        return rayservice_clusters.build_cluster(
            model, rayservice, name=name, clear_replicas=clear, config=check.config, keep_annotations=kept
        )

    return [
        check.derived(("rayservice-cluster", name, str(clear), *kept.values()), functools.partial(goal, clear))
        for clear in (False, True)
    ]


def _rayservice_cluster(check: ContentCheck, command: CreateObject) -> str:
    model = check.rayservice()
    found = _cluster_difference(command.body, _goal_clusters(check, model, command.target.name))
    return f"the RayCluster's {found}, as {check.key} implies" if found else ""


def _cron_rayjob(check: ContentCheck, command: CreateObject) -> str:
    template = mapping(check.own().get("spec")).get("jobTemplate")
    want = check.derived(("job-template",), lambda: dict(template) if isinstance(template, Mapping) else {})
    found = first_difference("spec", command.body.get("spec"), want)
    return f"the RayJob's {found}, as the jobTemplate of {check.key} implies" if found else ""


def _rayjob_service(check: ContentCheck, command: CreateObject) -> str:
    """A RayJob's ``<rj>-head-svc``: its cluster's head Service, as the RayJob's reconcile builds it."""
    want = _rayjob_head_service(check)
    found = first_difference("spec", command.body.get("spec"), want.get("spec"))
    return f"the Service's {found}, as the head Service of {check.key} implies" if found else ""


def _rayjob_head_service(check: ContentCheck) -> Any:
    spec = check.rayjob_spec()
    rayjob = check.own()
    cluster_name = text(mapping(rayjob.get("status")).get("rayClusterName"))
    want = check.derived(
        ("rayjob-head-service", cluster_name),
        lambda: rayjob_cluster.rayjob_head_service(rayjob, spec, cluster_name=cluster_name, config=check.config),
    )
    if not isinstance(want, Mapping):
        raise Unreadable(f"{check.key} has no head Service of its own")
    return want


def _rayjob_service_patch(check: ContentCheck, command: PatchObject) -> str:
    """A RayJob re-points its head Service at its cluster: the selector and ports of the built one."""
    spec = mapping(_rayjob_head_service(check).get("spec"))
    wanted = {"/spec/selector": spec.get("selector"), "/spec/ports": spec.get("ports", [])}
    ops = command.patch if isinstance(command.patch, list) else []
    got = {text(mapping(op).get("path")): mapping(op).get("value") for op in ops}
    if len(ops) != len(wanted) or set(got) != set(wanted) or any(mapping(op).get("op") != "replace" for op in ops):
        return f"{check.key} re-points its head Service only by replacing its selector and ports"
    found = next((d for path in sorted(wanted) if (d := first_difference(path, got[path], wanted[path]))), "")
    return f"the patch's {found}, as the head Service of {check.key} implies" if found else ""


def _rayservice_service_specs(check: ContentCheck, body: Mapping[str, Any], name: str) -> list[Any]:
    """The specs the RayService's Service ``name`` may have, pointing at the cluster ``body`` selects."""
    model = check.rayservice()
    rayservice = check.own()
    cluster_name = text(mapping(mapping(body.get("spec")).get("selector")).get(conventions.LABEL_CLUSTER))
    cluster = check.facts.find("RayCluster", check.key.namespace, cluster_name) if cluster_name else None
    if cluster is None:
        raise Unreadable(f"the Service selects no RayCluster of {check.key} the watcher knows")
    owner = owner_reference_to(rayservice, "RayService")
    builders: list[Callable[[], dict[str, Any]]] = [
        lambda: kube_services.rayservice_head_service(model, cluster, owner=owner, config=check.config),
        lambda: kube_services.rayservice_serve_service(model, cluster, owner=owner),
        lambda: kube_services.per_cluster_serve_service(
            model, cluster, owner=owner_reference_to(cluster, "RayCluster")
        ),
    ]
    specs = []
    for index, build in enumerate(builders):
        try:
            service = check.derived(("rayservice-service", cluster_name, str(index)), build)
        except kube_services.ServiceBuildError:
            continue
        if metadata_of(service).get("name") == name:
            specs.append(service.get("spec"))
    if not specs:
        raise Unreadable(f"{check.key} has no Service {name} pointing at RayCluster {cluster_name}")
    return specs


def _rayservice_service(check: ContentCheck, command: CreateObject) -> str:
    wants = _rayservice_service_specs(check, command.body, command.target.name)
    found = _matches_one("spec", command.body.get("spec"), wants)
    return f"the Service's {found}, as {check.key} implies" if found else ""


def _rayservice_service_patch(check: ContentCheck, command: PatchObject) -> str:
    """A RayService switches a Service to another of its clusters: the whole spec, its ClusterIPs kept."""
    ops = command.patch if isinstance(command.patch, list) else []
    if len(ops) != 1 or mapping(ops[0]).get("op") != "add" or mapping(ops[0]).get("path") != "/spec":
        return f"{check.key} switches a Service only by replacing its spec"
    spec = dict(mapping(mapping(ops[0]).get("value")))
    existing = mapping(mapping(check.facts.find("Service", check.key.namespace, command.target.name)).get("spec"))
    wants = []
    for want in _rayservice_service_specs(check, {"spec": spec}, command.target.name):
        kept = dict(mapping(want))
        for field in ("clusterIP", "clusterIPs"):
            if field in existing:
                kept[field] = existing[field]
        wants.append(kept)
    found = _matches_one("spec", spec, wants)
    return f"the switch's {found}, as {check.key} implies" if found else ""


def _matches_one(path: str, got: Any, wants: Sequence[Any]) -> str:
    """ "" when ``got`` equals one of ``wants``, else its difference from the first."""
    differences = [first_difference(path, got, want) for want in wants]
    return "" if "" in differences else differences[0]


# --- patches ---------------------------------------------------------------------------------------


def _merge_metadata_only(command: PatchObject, allowed: Mapping[str, frozenset[str]]) -> str:
    """A merge patch that touches only the listed keys of the listed ``metadata`` maps."""
    patch = command.patch
    if command.patch_type == "json" or not isinstance(patch, Mapping):
        return "raybus patches it only with a merge patch of its metadata"
    extra = set(patch) - {"metadata"}
    if extra:
        return f"the patch changes {sorted(extra)[0]}, which raybus never patches"
    metadata = mapping(patch.get("metadata"))
    if not isinstance(patch.get("metadata"), Mapping):
        return "the patch's metadata is not an object"
    for field, value in metadata.items():
        keys = allowed.get(field)
        if keys is None:
            return f"the patch changes metadata.{field}, which raybus never patches"
        if not isinstance(value, Mapping):
            return f"the patch's metadata.{field} is not an object"
        stray = sorted(k for k in value if k not in keys)
        if stray:
            return f"the patch changes metadata.{field}.{stray[0]}, which raybus never patches"
    return ""


POD_PATCHED: Final[Mapping[str, frozenset[str]]] = {
    "labels": frozenset({conventions.LABEL_SERVE}),
    "annotations": frozenset({conventions.ANN_RECREATE_HASH, conventions.ANN_KUBERAY_VERSION}),
}
"""The Pod fields raybus patches: a RayService head's serve label, a head's recreate-upgrade record."""

RAYSERVICE_CLUSTER_PATCHED: Final[Mapping[str, frozenset[str]]] = {
    "annotations": frozenset(rayservice_names.RAYBUS_ANNOTATIONS)
}
"""The RayCluster fields a RayService merge-patches: its serve-config record and deletion schedule."""

OWN_FINALIZER: Final[Mapping[str, str]] = {
    "RayCluster": conventions.FINALIZER_GCS_FT,
    "RayJob": conventions.FINALIZER_RAYJOB,
    "RayService": conventions.FINALIZER_RAYSERVICE,
}
"""The finalizer each kind's reconcile adds to and removes from its own object (nothing else of it)."""


def _pod_patch(check: ContentCheck, command: PatchObject) -> str:
    return _merge_metadata_only(command, POD_PATCHED)


def _own_patch(check: ContentCheck, command: PatchObject) -> str:
    """A key patches its own object only to add or remove its finalizer."""
    finalizer = OWN_FINALIZER[check.key.kind]
    refusal = f"{check.key} patches its own object only to add or remove the finalizer {finalizer}"
    patch = command.patch
    if isinstance(patch, list):
        tested: set[str] = set()
        for raw in patch:
            op = mapping(raw)
            path = text(op.get("path"))
            if not path.startswith("/metadata/finalizers") or op.get("op") not in ("add", "remove", "test"):
                return f"{refusal}; the patch touches {_short(path)}"
            if op.get("value", finalizer) not in (finalizer, [finalizer]):
                return f"{refusal}; the patch writes {_short(op.get('value'))}"
            if op.get("op") == "test":
                tested.add(path)
            elif op.get("op") == "remove" and path not in tested:
                return f"{refusal}; the patch removes {_short(path)} without testing that it is {finalizer}"
        return ""
    metadata = patch.get("metadata")
    if set(patch) != {"metadata"} or not isinstance(metadata, Mapping) or set(metadata) != {"finalizers"}:
        return refusal
    finalizers = metadata["finalizers"] or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        return f"{refusal}; the patch's finalizers are not a list of names"
    current = [f for f in metadata_of(check.own()).get("finalizers") or [] if isinstance(f, str)]
    changed = set(finalizers) ^ set(current)
    return f"{refusal}; the patch changes {sorted(changed - {finalizer})[0]}" if changed - {finalizer} else ""


def _rayjob_cluster_patch(check: ContentCheck, command: PatchObject) -> str:
    """A RayJob patches its cluster only to suspend the workers (``DeleteWorkers``)."""
    patch = command.patch
    if not isinstance(patch, list):
        return "a RayJob only suspends its cluster's worker groups"
    for raw in patch:
        op = mapping(raw)
        parts = text(op.get("path")).split("/")
        suspend = len(parts) == 5 and parts[:3] == ["", "spec", "workerGroupSpecs"] and parts[4] == "suspend"
        if not (suspend and parts[3].isdigit() and op.get("op") == "add" and op.get("value") is True):
            return f"the patch {_short(dict(op))} does not suspend a worker group"
    return ""


def _rayservice_cluster_patch(check: ContentCheck, command: PatchObject) -> str:
    """A RayService records its serve config, schedules a deletion, or updates a cluster in place."""
    model = check.rayservice()
    patch = command.patch
    if isinstance(patch, list):
        return _in_place_update(check, model, command.target.name, patch)
    found = _merge_metadata_only(command, RAYSERVICE_CLUSTER_PATCHED)
    if found:
        return found
    annotations = mapping(mapping(mapping(patch).get("metadata")).get("annotations"))
    recorded = annotations.get(rayservice_names.ANN_SERVE_CONFIG_HASH)
    assert model.spec is not None
    wanted = config_hash(model.spec.serve_config_v2)
    if rayservice_names.ANN_SERVE_CONFIG_HASH in annotations and recorded != wanted:
        digest = f"{wanted}, the digest of the serveConfigV2 of {check.key}"
        return f"the serve-config record {_short(recorded)} is not {digest}"
    return ""


def _in_place_update(check: ContentCheck, model: ServiceModel, name: str, ops: list[dict[str, Any]]) -> str:
    values = {text(mapping(op).get("path")): mapping(op).get("value") for op in ops}
    if sorted(values) != ["/metadata/annotations", "/metadata/labels", "/spec"] or len(ops) != 3:
        return "a RayService updates a cluster in place only with its spec, labels and annotations"
    if any(mapping(op).get("op") != "add" for op in ops):
        return "a RayService updates a cluster in place only with add operations"
    cluster = mapping(check.facts.find("RayCluster", check.key.namespace, name))
    current = mapping(cluster.get("spec"))
    recorded = mapping(metadata_of(cluster).get("annotations")).get(rayservice_names.ANN_SERVE_CONFIG_HASH)
    keep = {rayservice_names.ANN_SERVE_CONFIG_HASH: recorded} if isinstance(recorded, str) else {}
    wants = []
    for goal in _goal_clusters(check, model, name, keep):
        spec = {k: v for k, v in mapping(goal.get("spec")).items() if k != "suspend"}
        if "suspend" in current:
            spec["suspend"] = current["suspend"]
        wants.append({**goal, "spec": spec})
    body = {
        "spec": values["/spec"],
        "metadata": {"labels": values["/metadata/labels"], "annotations": values["/metadata/annotations"]},
    }
    found = _cluster_difference(body, wants)
    return f"the update's {found}, as {check.key} implies" if found else ""


# --- dashboard calls -------------------------------------------------------------------------------


def _submission(check: ContentCheck, command: SubmitRayJob) -> str:
    spec = check.rayjob_spec()
    job_id = command.request.get("submission_id")
    job_id = job_id if isinstance(job_id, str) else ""
    try:
        want = _as_sent(submitter.build_submit_request(spec, job_id=job_id))
    except submitter.SubmitterError as exc:
        return f"{check.key} cannot be submitted: {exc}"
    found = first_difference("request", command.request, want)
    return f"the job's {found}, as {check.key} implies" if found else ""


def _serve_config(check: ContentCheck, command: PutServeConfig) -> str:
    model = check.rayservice()
    assert model.spec is not None
    serve_config_v2 = model.spec.serve_config_v2
    want = check.derived(("serve-config",), lambda: serve_config_json(serve_config_v2))
    config = dict(command.config)
    capacity = config.pop(TARGET_CAPACITY, None)
    if capacity is not None and (type(capacity) is not int or not 0 <= capacity <= 100):
        return f"the Serve config's {TARGET_CAPACITY} {_short(capacity)} is not a percentage"
    found = first_difference("config", config, want)
    if found:
        return f"the Serve config's {found}, as the serveConfigV2 of {check.key} implies"
    return "" if command.record is None else check.problem(command.record)


_CHECKS: Final[Mapping[tuple[str, str, str], Check]] = {
    ("RayCluster", "create_object", "Pod"): _pod,
    ("RayCluster", "create_object", "Role"): _role,
    ("RayCluster", "create_object", "RoleBinding"): _role_binding,
    ("RayCluster", "create_object", "Secret"): _secret,
    ("RayCluster", "create_object", "Job"): _cluster_job,
    ("RayCluster", "create_object", "Service"): _cluster_service,
    ("RayCluster", "create_object", "ServiceAccount"): _service_account,
    ("RayCluster", "create_object", "PersistentVolumeClaim"): _gcs_claim,
    ("RayCluster", "create_object", "Ingress"): _cluster_ingress,
    ("RayCluster", "patch_object", "Ingress"): _cluster_ingress_patch,
    ("RayCluster", "patch_object", "Pod"): _pod_patch,
    ("RayCluster", "patch_object", "RayCluster"): _own_patch,
    ("RayJob", "create_object", "RayCluster"): _rayjob_cluster,
    ("RayJob", "create_object", "Job"): _submitter_job,
    ("RayJob", "patch_object", "RayJob"): _own_patch,
    ("RayJob", "patch_object", "RayCluster"): _rayjob_cluster_patch,
    ("RayJob", "submit_ray_job", "RayCluster"): _submission,
    ("RayJob", "create_object", "Service"): _rayjob_service,
    ("RayJob", "patch_object", "Service"): _rayjob_service_patch,
    ("RayService", "create_object", "RayCluster"): _rayservice_cluster,
    ("RayService", "patch_object", "RayCluster"): _rayservice_cluster_patch,
    ("RayService", "patch_object", "RayService"): _own_patch,
    ("RayService", "patch_object", "Pod"): _pod_patch,
    ("RayService", "put_serve_config", "RayCluster"): _serve_config,
    ("RayService", "create_object", "Service"): _rayservice_service,
    ("RayService", "patch_object", "Service"): _rayservice_service_patch,
    ("RayService", "create_object", "Gateway"): _gateway,
    ("RayService", "patch_object", "Gateway"): _gateway_patch,
    ("RayService", "create_object", "HTTPRoute"): _httproute,
    ("RayService", "patch_object", "HTTPRoute"): _httproute_patch,
    ("RayCronJob", "create_object", "RayJob"): _cron_rayjob,
}
"""(key kind, verb, target kind) → its content check; the rest of ``authorize.ALLOWED`` carries no code."""
