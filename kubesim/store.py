"""The object store: every kind's objects, their metadata rules, and the one resourceVersion counter.

This is the API server minus HTTP. Writes go through create/update/patch (here) or delete (in
:mod:`kubesim.deletion`), which enforce the real server's rules — names and generateName, namespace
existence, resourceVersion preconditions, generation bumps, status-subresource separation, CRD
schema pruning/defaulting/validation, built-in defaulting — and commit exactly one event per write,
numbered by a single global resourceVersion. No-op updates commit nothing, like the real server.

Stored objects are never mutated after commit: an update builds a new dict (sharing unchanged
parts), so the event history and in-flight watch lines stay valid without copying. Everything that
leaves the store for code outside kubesim goes through :func:`kubesim.codec.clone`.

Not emulated: dry-run, managedFields, resourceVersionMatch and list snapshots at an older revision
(lists always show the latest state).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any

import yaml

from kubesim import codec, crds
from kubesim import schema as crd_schema
from kubesim.defaults import ClusterIPAllocator, apply_builtin_defaults
from kubesim.deletion import DeleteOptions, Deletion
from kubesim.errors import (
    ApiError,
    Cause,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    not_found,
    unsupported_media_type,
)
from kubesim.hooks import BINDINGS, GVR, EventType, StoreEvent
from kubesim.patches import json_patch, merge_patch
from kubesim.resources import CRD_KEY, NAMESPACE_KEY, POD_KEY, Registry, ResourceInfo, StorageKey
from kubesim.selectors import Matcher, Selector, parse_label_selector
from kubesim.strategic import strategic_merge_patch
from kubesim.validation import validate_metadata
from kubesim.watchhub import Change, Subscription, WatchHub

Obj = dict[str, Any]
ObjKey = tuple[StorageKey, str, str]

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_STATUS_BODY = frozenset(("apiVersion", "kind", "metadata", "status"))
"""What a status update reads of the body it is given."""
_IMMUTABLE_META = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def rfc3339(epoch: float) -> str:
    """Kubernetes' timestamp format (UTC, second precision)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def present(info: ResourceInfo, obj: Obj) -> Obj:
    """``obj`` as served at ``info``'s version (CRD versions share storage, strategy None)."""
    if obj.get("apiVersion") == info.api_version:
        return obj
    return {**obj, "apiVersion": info.api_version}


def _spec_part(obj: Obj, *, has_status: bool) -> Obj:
    skip = ("metadata", "status", "apiVersion", "kind") if has_status else ("metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


_POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)"
)


def _check_pod_node_unchanged(old: Obj, new: Obj) -> None:
    """A Pod's node is set by a Binding only: an update that changes ``spec.nodeName`` is refused as by the
    real server (the rest of its Pod spec rules is not emulated)."""
    before = (old.get("spec") or {}).get("nodeName")
    after = (new.get("spec") or {}).get("nodeName") if isinstance(new.get("spec"), dict) else None
    if (before or None) != (after or None):
        name = str(old["metadata"]["name"])
        raise invalid("Pod", "", name, [Cause("FieldValueForbidden", "spec", _POD_UPDATE_FORBIDDEN)])


class ObjectStore:
    """All objects, indexed by resource bucket, namespace and name; implements ``kubesim.hooks.Store``.

    A committed object is never changed in place: every write commits a new one (sharing unchanged parts
    with the old). The watch history encodes committed objects only when a watcher asks, and ``view``
    hands them out without a copy; both rely on it."""

    def __init__(
        self,
        *,
        registry: Registry,
        hub: WatchHub,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.registry = registry
        self.hub = hub
        self.clock = clock
        self._rng = rng or random.Random()
        self._buckets: dict[StorageKey, dict[str, dict[str, Obj]]] = {}
        self._storage: dict[StorageKey, ResourceInfo] = {info.storage_key: info for info in registry.all()}
        self._uids: dict[str, ObjKey] = {}
        self._dependents: dict[str, set[ObjKey]] = {}
        """The objects whose ownerReferences name a uid, by that uid."""
        self._ns_count: dict[str, int] = {}
        self._by_label: dict[tuple[StorageKey, str, str, str], set[str]] = {}
        """Names of the objects of a bucket and namespace carrying a label value (for ``k=v`` selectors)."""
        self._ips = ClusterIPAllocator()
        self.rv = 0
        self.handles_pod_termination = False
        """True when a simulator (the kubelet) finishes graceful Pod deletion; else Pods go at once."""
        self.deletion = Deletion(self)

    # -- reading -------------------------------------------------------------------------------

    def storage_info(self, key: StorageKey) -> ResourceInfo:
        """The resource version objects of ``key`` are stored at."""
        return self._storage[key]

    def find(self, key: StorageKey, namespace: str, name: str) -> Obj | None:
        """The stored object (not a copy: never mutate it)."""
        return self._buckets.get(key, {}).get(namespace, {}).get(name)

    def by_uid(self, uid: str) -> tuple[StorageKey, Obj] | None:
        """The stored object with ``uid`` and where it is stored (not a copy: never mutate it), or None."""
        where = self._uids.get(uid)
        obj = None if where is None else self.find(*where)
        return None if where is None or obj is None else (where[0], obj)

    def dependents_of(self, owner_uid: str) -> list[ObjKey]:
        """Where the objects whose ownerReferences name ``owner_uid`` are stored, sorted."""
        return sorted(self._dependents.get(owner_uid, ()))

    def require(self, info: ResourceInfo, namespace: str, name: str) -> Obj:
        """The stored object or a 404."""
        obj = self.find(info.storage_key, namespace if info.namespaced else "", name)
        if obj is None:
            raise not_found(info.group, info.plural, name)
        return obj

    def select(self, key: StorageKey, namespace: str | None, matcher: Matcher | None = None) -> list[Obj]:
        """Stored objects of one bucket, sorted by namespace and name (etcd key order).

        A label selector with a ``k=v`` requirement reads its candidates from the label index: the
        simulators select a few Pods among thousands on every reconcile.
        """
        bucket = self._buckets.get(key, {})
        spaces = [namespace] if namespace is not None else sorted(bucket)
        equalities = matcher.equalities if isinstance(matcher, Selector) else ()
        out: list[Obj] = []
        for ns in spaces:
            names = bucket.get(ns, {})
            # The rarest label value's objects, e.g. a cluster's name rather than app=kuberay.
            indexed = [self._by_label.get((key, ns, k, v), set()) for k, v in equalities]
            for name in sorted(min(indexed, key=len) if indexed else names):
                obj = names[name]
                if matcher is None or matcher(obj):
                    out.append(obj)
        return out

    def namespace_count(self, namespace: str) -> int:
        """How many namespaced objects live in ``namespace``."""
        return self._ns_count.get(namespace, 0)

    def buckets_in(self, namespace: str) -> list[StorageKey]:
        """Buckets holding objects in ``namespace``."""
        return [key for key, bucket in self._buckets.items() if bucket.get(namespace)]

    # -- committing ----------------------------------------------------------------------------

    def next_rv(self) -> str:
        """Allocate the next global resourceVersion."""
        self.rv += 1
        return str(self.rv)

    def now(self, offset: float = 0.0) -> str:
        """The current time (plus ``offset`` seconds) in Kubernetes format."""
        return rfc3339(self.clock() + offset)

    def _index(self, key: StorageKey, obj: Obj | None, old: Obj | None) -> None:
        target = obj if obj is not None else old
        assert target is not None
        meta = target["metadata"]
        ident: ObjKey = (key, meta.get("namespace", ""), meta["name"])
        self._index_labels(ident, obj, old)
        old_owners = {r.get("uid") for r in (old or {}).get("metadata", {}).get("ownerReferences") or ()}
        new_owners = {r.get("uid") for r in (obj or {}).get("metadata", {}).get("ownerReferences") or ()}
        for uid in old_owners - new_owners:
            deps = self._dependents.get(str(uid))
            if deps is not None:
                deps.discard(ident)
                if not deps:
                    del self._dependents[str(uid)]
        for uid in new_owners - old_owners:
            self._dependents.setdefault(str(uid), set()).add(ident)
        if obj is None:
            self._uids.pop(meta["uid"], None)
        elif old is None:
            self._uids[meta["uid"]] = ident

    def _index_labels(self, ident: ObjKey, obj: Obj | None, old: Obj | None) -> None:
        key, ns, name = ident
        before = ((old or {}).get("metadata") or {}).get("labels") or {}
        after = ((obj or {}).get("metadata") or {}).get("labels") or {}
        if before == after:
            return
        for label, value in before.items():
            if after.get(label) != value:
                names = self._by_label.get((key, ns, label, value))
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self._by_label[(key, ns, label, value)]
        for label, value in after.items():
            if before.get(label) != value:
                self._by_label.setdefault((key, ns, label, value), set()).add(name)

    def commit(self, key: StorageKey, type_: EventType, obj: Obj, old: Obj | None) -> None:
        """Store (or drop, for DELETED) ``obj`` and publish the event; obj carries its new RV."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        bucket = self._buckets.setdefault(key, {})
        if type_ == "DELETED":
            names = bucket.get(ns, {})
            stored = names.pop(meta["name"], obj)
            if not names:
                bucket.pop(ns, None)
            self._index(key, None, stored)
            if ns:
                self._ns_count[ns] -= 1
            if key == ("", "services"):
                self._ips.release(str((obj.get("spec") or {}).get("clusterIP", "")))
        else:
            bucket.setdefault(ns, {})[meta["name"]] = obj
            self._index(key, obj, old)
            if old is None and ns:
                self._ns_count[ns] = self._ns_count.get(ns, 0) + 1
        info = self._storage[key]
        gvr = GVR(info.group, info.version, info.plural)
        self.hub.publish(Change(rv=int(meta["resourceVersion"]), type=type_, key=key, gvr=gvr, obj=obj, old=old))

    # -- CRD registration ----------------------------------------------------------------------

    def _serve_crd(self, crd: Obj) -> None:
        infos = crds.resource_infos(crd)
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        self.registry.remove_storage(key)
        for info in infos:
            self.registry.add(info)
        storage_version = crds.storage_version(crd)
        self._storage[key] = next((i for i in infos if i.version == storage_version), infos[0])

    def unserve_crd(self, crd: Obj) -> None:
        """Stop serving a deleted CRD's resource."""
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        self.registry.remove_storage(key)
        self._buckets.pop(key, None)

    # -- admission -----------------------------------------------------------------------------

    def _admit_custom(self, info: ResourceInfo, obj: Obj) -> list[Cause]:
        schema = info.schema
        if schema is None:
            return []
        crd_schema.prune(schema, obj, root=True)
        crd_schema.apply_defaults(schema, obj)
        return crd_schema.validate(schema, obj, root=True)

    def _check_namespace(self, info: ResourceInfo, namespace: str, name: str) -> None:
        ns = self.find(NAMESPACE_KEY, "", namespace)
        if ns is None:
            raise not_found("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise forbidden(
                info.group,
                info.plural,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    # -- create --------------------------------------------------------------------------------

    def create_object(self, info: ResourceInfo, namespace: str | None, body: Obj) -> Obj:
        """Create ``body`` (owned by the store from now on) and return the stored object.

        Raises:
            ApiError: 400/403/404/409/422 as the real server would.
        """
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._check_kind(info, body)
        storage = self._storage[info.storage_key]
        body["apiVersion"] = storage.api_version
        body["kind"] = info.kind
        if info.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            ns = namespace or meta.get("namespace") or ""
            if not ns:
                raise bad_request("the namespace of the object must be set")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
            ns = ""
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(info.storage_key, ns, str(meta["generateName"]))
        name = str(meta.get("name") or "")
        causes = validate_metadata(info, meta)
        if info.status:
            body.pop("status", None)
        if info.custom:
            causes += self._admit_custom(info, body)
        if info.storage_key == CRD_KEY:
            causes += crds.validate_crd(body)
        if causes:
            raise invalid(info.kind, info.group, name, causes)
        if ns:
            self._check_namespace(info, ns, name)
        if self.find(info.storage_key, ns, name) is not None:
            raise already_exists(info.group, info.plural, name)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        meta["generation"] = 1
        apply_builtin_defaults(info, body, ips=self._ips, old=None)
        meta["resourceVersion"] = self.next_rv()
        self.commit(info.storage_key, "ADDED", body, None)
        if info.storage_key == CRD_KEY:
            self._serve_crd(body)
            status = crds.established_status(body, meta["creationTimestamp"])
            body = self.write(info, body, {**body, "status": status}, subresource="status")
        self.deletion.collect_dangling(info.storage_key, body)
        return body

    def _check_kind(self, info: ResourceInfo, body: Obj) -> None:
        kind = body.get("kind")
        if kind and kind != info.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({info.kind})")
        api_version = body.get("apiVersion")
        # Any served version of a custom resource may be sent (they share one storage).
        expected_group = info.group if info.custom else None
        if api_version and api_version != info.api_version and api_version.rpartition("/")[0] != expected_group:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match "
                f"the expected API version ({info.api_version})"
            )

    def _generate_name(self, key: StorageKey, namespace: str, prefix: str) -> str:
        for _ in range(16):
            candidate = prefix + "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))
            if self.find(key, namespace, candidate) is None:
                return candidate
        raise ApiError(409, "AlreadyExists", f"could not find a free name for generateName {prefix!r}")

    # -- update and patch ----------------------------------------------------------------------

    def update_object(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        require_rv: bool = False,
    ) -> Obj:
        """Replace an object (PUT); ``body`` is owned by the store from now on.

        Raises:
            ApiError: 400/404/409/422 as the real server would.
        """
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        # The body is checked against the URL before the object is looked up, as the real server does.
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if info.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        old = self.require(info, namespace or "", name)
        self._check_kind(info, body)
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old["metadata"]["resourceVersion"]:
                raise conflict(info.group, info.plural, name)
        elif require_rv:
            # The custom-resource handler names the resource by its plural here, as kube-apiserver does.
            cause = Cause(
                "FieldValueInvalid", "metadata.resourceVersion", "Invalid value: 0: must be specified for an update"
            )
            raise invalid(info.plural, info.group, name, [cause])
        return self.write(info, old, body, subresource=subresource)

    def patch_object(
        self,
        info: ResourceInfo,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        *,
        subresource: str | None = None,
    ) -> tuple[Obj, bool]:
        """Apply a patch; returns the object and whether it was created (server-side apply only).

        Raises:
            ApiError: 400/404/409/415/422 as the real server would.
        """
        media = content_type.split(";")[0].strip().lower()
        ns = namespace or ""
        if media == "application/apply-patch+yaml":
            return self._apply(info, ns, name, raw, subresource=subresource)
        if media not in (
            "application/merge-patch+json",
            "application/json-patch+json",
            "application/strategic-merge-patch+json",
        ) or (media == "application/strategic-merge-patch+json" and info.custom):
            raise unsupported_media_type(media)
        old = self.require(info, ns, name)
        try:
            patch = codec.decode(raw)
        except codec.DecodeError as exc:
            raise bad_request(f"error decoding patch: {exc}") from exc
        doc = codec.clone(present(info, old))
        if media == "application/json-patch+json":
            new = json_patch(doc, patch)
        elif not isinstance(patch, dict):
            raise bad_request("patch must be a JSON object")
        elif media == "application/merge-patch+json":
            new = merge_patch(doc, patch)
        else:
            new = strategic_merge_patch(doc, patch)
        if not isinstance(new, dict):
            raise bad_request("patched object must be a JSON object")
        new_meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        rv = new_meta.get("resourceVersion") if isinstance(new_meta, dict) else None
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(info.group, info.plural, name)
        return self.write(info, old, new, subresource=subresource), False

    def _apply(
        self, info: ResourceInfo, namespace: str, name: str, raw: bytes, *, subresource: str | None
    ) -> tuple[Obj, bool]:
        # Server-side apply without field ownership: create, or merge the applied config in.
        try:
            applied = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise bad_request(f"error decoding YAML: {exc}") from exc
        if not isinstance(applied, dict):
            raise bad_request("apply patch must be an object")
        old = self.find(info.storage_key, namespace if info.namespaced else "", name)
        if old is None:
            applied.setdefault("metadata", {})["name"] = name
            return self.create_object(info, namespace or None, applied), True
        new = merge_patch(codec.clone(present(info, old)), applied)
        return self.write(info, old, new, subresource=subresource), False

    def write(self, info: ResourceInfo, old: Obj, new: Obj, *, subresource: str | None = None) -> Obj:
        """Commit ``new`` over ``old`` with update semantics (no precondition checks here); ``subresource``
        "status" changes only the status, "binding" (a Pod's binding) the spec and status together.

        ``new`` is owned by the store from now on. Returns what is stored afterwards (``old`` itself
        for a no-op; the final state when the update let a pending deletion finish).
        """
        key = info.storage_key
        old_meta = old["metadata"]
        if subresource == "status":
            result: Obj = {**old, "metadata": dict(old_meta)}
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        else:
            result = new
            meta = result.get("metadata")
            if not isinstance(meta, dict):
                meta = result["metadata"] = {}
            for field in _IMMUTABLE_META:
                if field in old_meta:
                    meta[field] = old_meta[field]
                else:
                    meta.pop(field, None)
            meta["generation"] = old_meta.get("generation", 1)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
                if added:
                    # The real message ends with the added finalizers in Go's %#v form.
                    found = ", ".join(f'"{f}"' for f in sorted(added))
                    cause = Cause(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        "Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers []string{{{found}}}",
                    )
                    raise invalid(info.kind, info.group, old_meta["name"], [cause])
            if key == POD_KEY and subresource != "binding":
                _check_pod_node_unchanged(old, result)
            if info.status and subresource != "binding":
                if "status" in old:
                    result["status"] = old["status"]
                else:
                    result.pop("status", None)
            apply_builtin_defaults(info, result, ips=self._ips, old=old)
        result["apiVersion"] = self._storage[key].api_version
        result["kind"] = info.kind
        causes = validate_metadata(info, result["metadata"]) if subresource != "status" else []
        if info.custom:
            causes += self._admit_custom(info, result)
        if key == CRD_KEY and subresource != "status":
            causes += crds.validate_crd(result)
        if causes:
            raise invalid(info.kind, info.group, old_meta["name"], causes)
        meta = result["metadata"]
        if subresource != "status" and _spec_part(result, has_status=info.status) != _spec_part(
            old, has_status=info.status
        ):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if result == old:
            return old
        meta["resourceVersion"] = self.next_rv()
        if meta.get("deletionTimestamp") and self.deletion.may_finish(key, result):
            self.deletion.remove(key, result, old)
            return result
        self.commit(key, "MODIFIED", result, old)
        if key == CRD_KEY and subresource != "status":
            self._serve_crd(result)
        if meta.get("ownerReferences") != old_meta.get("ownerReferences"):
            self.deletion.collect_dangling(key, result)
            return self.find(key, meta.get("namespace", ""), meta["name"]) or result
        return result

    # -- binding -------------------------------------------------------------------------------

    def bind_pod(self, namespace: str, body: Obj, *, pod_name: str | None = None) -> Obj:
        """Assign a Pod to a node, as kube-apiserver's Binding does (there is no scheduler).

        ``body`` is a ``Binding`` (``metadata.name`` names the Pod, ``target`` the Node); ``pod_name`` is the
        Pod of a ``pods/<name>/binding`` URL. Sets ``spec.nodeName``, copies the Binding's annotations to the
        Pod and sets its ``PodScheduled`` condition; returns the ``Success`` Status the real server sends.

        Raises:
            ApiError: 400 for a name mismatch, 404 for a missing Pod, 409 when it is already bound or being
                deleted (or its uid is not the one in the Binding), 422 for a target that is not a Node name.
        """
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        name = str(meta.get("name") or pod_name or "")
        if pod_name is not None and meta.get("name") and meta["name"] != pod_name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({pod_name})"
            )
        target = body.get("target") if isinstance(body.get("target"), dict) else {}
        assert isinstance(target, dict)
        node = str(target.get("name") or "")
        if not node or target.get("kind", "Node") not in ("Node", ""):
            cause = (
                Cause("FieldValueRequired", "target.name", "Required value")
                if not node
                else Cause("FieldValueNotSupported", "target.kind", f'Unsupported value: "{target.get("kind")}"')
            )
            raise invalid("Binding", "", name, [cause])
        info = self.storage_info(POD_KEY)
        pod = self.require(info, namespace, name)
        pod_meta = pod["metadata"]
        if meta.get("uid") and meta["uid"] != pod_meta["uid"]:
            raise conflict("", "pods", name, f"Precondition failed: UID in precondition: {meta['uid']}")
        if pod_meta.get("deletionTimestamp"):
            raise conflict("", "pods", name, f"pod {name} is being deleted, cannot be assigned to a host")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise conflict("", "pods", name, f'pod {name} is already assigned to node "{bound}"')
        new = codec.clone(pod)
        new["spec"]["nodeName"] = node
        if meta.get("annotations"):
            new["metadata"]["annotations"] = {**(pod_meta.get("annotations") or {}), **meta["annotations"]}
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": self.now()}
        )
        status["conditions"] = conditions
        # One commit for spec and status, as the real server's binding is one storage update.
        self.write(info, pod, new, subresource="binding")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- kubesim.hooks.Store -------------------------------------------------------------------

    def _info(self, gvr: GVR) -> ResourceInfo:
        info = self.registry.lookup(gvr.group, gvr.version, gvr.plural)
        if info is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({gvr.plural}.{gvr.group})"
            )
        return info

    def get(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        """A copy of the object, or None."""
        info = self._info(gvr)
        obj = self.find(info.storage_key, namespace or "" if info.namespaced else "", name)
        return None if obj is None else codec.clone(present(info, obj))

    def view(self, gvr: GVR, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The stored object itself (``kubesim.hooks.Store.view``), or None."""
        info = self._info(gvr)
        obj = self.find(info.storage_key, namespace or "" if info.namespaced else "", name)
        return None if obj is None else present(info, obj)

    def list(self, gvr: GVR, namespace: str | None = None, label_selector: str | None = None) -> list[Obj]:
        """Copies of matching objects (namespace None = all namespaces)."""
        info = self._info(gvr)
        matcher = parse_label_selector(label_selector)
        objs = self.select(info.storage_key, namespace if info.namespaced else None, matcher)
        return [codec.clone(present(info, o)) for o in objs]

    def create(self, gvr: GVR, obj: Obj) -> Obj:
        """Create a copy of ``obj``; returns a copy of what was stored (a Status for a Binding)."""
        body = codec.clone(obj)
        namespace = body.get("metadata", {}).get("namespace")
        if gvr == BINDINGS:
            return self.bind_pod(str(namespace or ""), body)
        info = self._info(gvr)
        return codec.clone(present(info, self.create_object(info, namespace, body)))

    def update(self, gvr: GVR, obj: Obj, *, subresource: str | None = None) -> None:
        """Replace (or, with ``subresource="status"``, update the status of) an object."""
        info = self._info(gvr)
        # A status update reads nothing else of the body: the spec, most of a Pod, is not copied.
        body = codec.clone(obj if subresource != "status" else {k: v for k, v in obj.items() if k in _STATUS_BODY})
        meta = body.get("metadata", {})
        self.update_object(info, meta.get("namespace"), str(meta.get("name", "")), body, subresource=subresource)

    def delete(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> None:
        """Delete as a client would; ``grace_period_seconds=0`` finishes a terminating Pod."""
        info = self._info(gvr)
        options = DeleteOptions(grace_period_seconds=grace_period_seconds, propagation_policy=propagation_policy)
        self.deletion.delete_object(info, namespace or "", name, options)

    def subscribe(self, resources: Collection[GVR] | None = None) -> AsyncIterator[StoreEvent]:
        """Every change (of ``resources``, when given) from this call on, in order, never dropped."""
        return Subscription(self.hub, resources)
