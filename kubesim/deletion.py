"""Deletion: finalizers, graceful Pod termination, ownerReference garbage collection, namespaces and CRDs.

What the real control plane spreads over the API server, the garbage collector, the namespace
controller and the CRD finalizer happens here synchronously, inside the delete (or the update that
empties the last finalizer), so results are deterministic while watchers still see the same event
sequence: MODIFIED with ``deletionTimestamp`` while something blocks, then DELETED.

- Finalizers: a delete of an object with finalizers only sets ``deletionTimestamp``; the update that
  removes the last finalizer removes the object.
- Pods: graceful deletion is finished by a kubelet: the in-process simulator (``handles_pod_termination``)
  or one attached over HTTP, which registers the Node its Pods are bound to. A bound Pod whose Node object
  exists therefore terminates gracefully, as on a real server; unscheduled or already finished Pods, and
  Pods bound to a node nobody registered while no kubelet simulator runs, go at once.
- Propagation: Background (dependents deleted after the owner), Foreground (owner waits with the
  ``foregroundDeletion`` finalizer until dependents with ``blockOwnerDeletion`` are gone), Orphan
  (owner references to it are removed). batch/v1 Jobs default to Orphan, like the real server.
- Dangling owners: an object whose ownerReferences name no existing object (by uid), also one created
  or updated after its owner was gone, is deleted (Background); one with some owners alive loses only
  the references to the missing ones (the real garbage collector's ``attemptToDeleteItem``).
- Namespaces terminate (phase ``Terminating``) until their content is gone; CRDs delete their custom
  objects first and stop being served when removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from kubesim.errors import ApiError, conflict, forbidden
from kubesim.resources import CRD_KEY, NAMESPACE_KEY, NODE_KEY, POD_KEY, ResourceInfo, StorageKey

if TYPE_CHECKING:
    from kubesim.store import ObjectStore

Obj = dict[str, Any]

FOREGROUND = "foregroundDeletion"
_UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


class DeleteOptions(NamedTuple):
    """The parts of ``DeleteOptions`` kubesim honours."""

    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None


def _default_policy(key: StorageKey) -> str:
    # batch/v1 Jobs keep their Pods unless asked otherwise (kube-apiserver's legacy default).
    return "Orphan" if key == ("batch", "jobs") else "Background"


class Deletion:
    """Deletion semantics over one :class:`~kubesim.store.ObjectStore`."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    # -- entry points --------------------------------------------------------------------------

    def delete_object(self, info: ResourceInfo, namespace: str, name: str, options: DeleteOptions) -> tuple[Obj, bool]:
        """Delete one object; returns its latest state and whether it is gone already.

        Raises:
            ApiError: 404 when absent, 409 when a precondition fails.
        """
        store = self._store
        ns = namespace if info.namespaced else ""
        obj = store.require(info, ns, name)
        meta = obj["metadata"]
        if options.precondition_uid and options.precondition_uid != meta["uid"]:
            # kube-apiserver words this one so, and names the resource by its kind.
            why = (
                f"the UID in the precondition ({options.precondition_uid}) does not match the UID in record "
                f"({meta['uid']}). The object might have been deleted and then recreated"
            )
            raise conflict(info.group, info.kind, name, why)
        if options.precondition_rv and options.precondition_rv != meta["resourceVersion"]:
            why = (
                f"the ResourceVersion in the precondition ({options.precondition_rv}) does not match the "
                f"ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified"
            )
            raise conflict(info.group, info.kind, name, why)
        key = info.storage_key
        if key == NAMESPACE_KEY:
            if name in _UNDELETABLE_NAMESPACES:
                raise forbidden("", "namespaces", name, "this namespace may not be deleted")
            return self._delete_namespace(obj)
        if key == CRD_KEY:
            return self._delete_crd(obj)
        if meta.get("deletionTimestamp"):
            if key == POD_KEY and options.grace_period_seconds == 0 and meta.get("deletionGracePeriodSeconds"):
                return self._finish_pod(obj)
            return obj, False
        policy = options.propagation_policy or _default_policy(key)
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        grace = self._pod_grace(obj, options) if key == POD_KEY else 0
        finalizers = list(meta.get("finalizers") or ())
        foreground = policy == "Foreground" and bool(store.dependents_of(meta["uid"]))
        if foreground:
            finalizers.append(FOREGROUND)
        if not finalizers and grace == 0:
            final = {**obj, "metadata": {**meta, "resourceVersion": store.next_rv()}}
            self.remove(key, final, obj)
            return final, True
        new_meta = {
            **meta,
            "deletionTimestamp": store.now(grace),
            "deletionGracePeriodSeconds": grace,
            "generation": int(meta.get("generation", 1)) + 1,
            "resourceVersion": store.next_rv(),
        }
        if finalizers:
            new_meta["finalizers"] = finalizers
        new = {**obj, "metadata": new_meta}
        store.commit(key, "MODIFIED", new, obj)
        if foreground:
            self._delete_dependents(meta["uid"], "Foreground")
            self._check_foreground(meta["uid"])
        current = store.find(key, ns, name)
        return (current, False) if current is not None else (new, True)

    def delete_collection(
        self, info: ResourceInfo, namespace: str | None, objs: list[Obj], options: DeleteOptions
    ) -> list[Obj]:
        """Delete each of ``objs`` (already selected); returns their latest states."""
        out: list[Obj] = []
        for obj in objs:
            meta = obj["metadata"]
            try:
                out.append(self.delete_object(info, meta.get("namespace", namespace or ""), meta["name"], options)[0])
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return out

    def may_finish(self, key: StorageKey, obj: Obj) -> bool:
        """Whether a terminating object can be removed now."""
        meta = obj["metadata"]
        if meta.get("finalizers"):
            return False
        if key == POD_KEY:
            return not meta.get("deletionGracePeriodSeconds")
        return key not in (NAMESPACE_KEY, CRD_KEY)

    def remove(self, key: StorageKey, final: Obj, old: Obj) -> None:
        """Drop an object for good (``final`` carries the deletion's resourceVersion) and collect."""
        store = self._store
        store.commit(key, "DELETED", final, old)
        meta = final["metadata"]
        uid = meta["uid"]
        if store.dependents_of(uid):
            self._delete_dependents(uid, "Background")
        for ref in meta.get("ownerReferences") or ():
            self._check_foreground(str(ref.get("uid")))
        ns = meta.get("namespace")
        if ns:
            self._maybe_finalize_namespace(ns)
        info = store.storage_info(key)
        if info.custom:
            self._maybe_finalize_crd(key)

    # -- pods ----------------------------------------------------------------------------------

    def _pod_grace(self, pod: Obj, options: DeleteOptions) -> int:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        node = spec.get("nodeName")
        if not node or phase in ("Succeeded", "Failed"):
            return 0
        if not self._store.handles_pod_termination and self._store.find(NODE_KEY, "", str(node)) is None:
            return 0
        if options.grace_period_seconds is not None:
            return max(0, options.grace_period_seconds)
        return int(spec.get("terminationGracePeriodSeconds", 30))

    def _finish_pod(self, pod: Obj) -> tuple[Obj, bool]:
        store = self._store
        new = {
            **pod,
            "metadata": {**pod["metadata"], "deletionGracePeriodSeconds": 0, "resourceVersion": store.next_rv()},
        }
        if self.may_finish(POD_KEY, new):
            self.remove(POD_KEY, new, pod)
            return new, True
        store.commit(POD_KEY, "MODIFIED", new, pod)
        return new, False

    # -- garbage collection --------------------------------------------------------------------

    def _live(self, uid: str) -> Obj | None:
        found = self._store.by_uid(uid)
        return None if found is None else found[1]

    def _delete_dependents(self, owner_uid: str, policy: str) -> None:
        store = self._store
        for key, ns, name in store.dependents_of(owner_uid):
            dep = store.find(key, ns, name)
            if dep is None or dep["metadata"].get("deletionTimestamp"):
                continue
            owners = [str(r.get("uid")) for r in dep["metadata"].get("ownerReferences") or ()]
            if policy == "Background" and any(u != owner_uid and self._live(u) is not None for u in owners):
                continue
            try:
                self.delete_object(store.storage_info(key), ns, name, DeleteOptions(propagation_policy=policy))
            except ApiError as exc:
                if exc.code != 404:
                    raise

    def collect_dangling(self, key: StorageKey, obj: Obj) -> None:
        """Delete ``obj`` when none of its owners exists (by uid), or drop the references to the missing
        ones when some do: what the real garbage collector does, at once instead of on its next pass."""
        store = self._store
        meta = obj["metadata"]
        refs = list(meta.get("ownerReferences") or ())
        if not refs or meta.get("deletionTimestamp"):
            return
        dangling = [ref for ref in refs if self._live(str(ref.get("uid"))) is None]
        if not dangling:
            return
        if len(dangling) == len(refs):
            options = DeleteOptions(propagation_policy="Background")
            self.delete_object(store.storage_info(key), meta.get("namespace", ""), meta["name"], options)
            return
        kept = [ref for ref in refs if ref not in dangling]
        new_meta = {**meta, "ownerReferences": kept, "resourceVersion": store.next_rv()}
        store.commit(key, "MODIFIED", {**obj, "metadata": new_meta}, obj)

    def _orphan_dependents(self, owner_uid: str) -> None:
        store = self._store
        for key, ns, name in store.dependents_of(owner_uid):
            dep = store.find(key, ns, name)
            if dep is None:
                continue
            refs = [r for r in dep["metadata"].get("ownerReferences") or () if r.get("uid") != owner_uid]
            new_meta = {**dep["metadata"], "ownerReferences": refs, "resourceVersion": store.next_rv()}
            if not refs:
                del new_meta["ownerReferences"]
            store.commit(key, "MODIFIED", {**dep, "metadata": new_meta}, dep)

    def _check_foreground(self, owner_uid: str) -> None:
        store = self._store
        found = store.by_uid(owner_uid)
        if found is None:
            return
        owner_key, owner = found
        meta = owner["metadata"]
        if FOREGROUND not in (meta.get("finalizers") or ()):
            return
        for dep_key in store.dependents_of(owner_uid):
            dep = store.find(*dep_key)
            if dep is None:
                continue
            for ref in dep["metadata"].get("ownerReferences") or ():
                if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                    return
        finalizers = [f for f in meta["finalizers"] if f != FOREGROUND]
        new_meta = {**meta, "finalizers": finalizers, "resourceVersion": store.next_rv()}
        if not finalizers:
            del new_meta["finalizers"]
        new = {**owner, "metadata": new_meta}
        if self.may_finish(owner_key, new):
            self.remove(owner_key, new, owner)
        else:
            store.commit(owner_key, "MODIFIED", new, owner)

    # -- namespaces and CRDs -------------------------------------------------------------------

    def _delete_namespace(self, ns_obj: Obj) -> tuple[Obj, bool]:
        store = self._store
        name = ns_obj["metadata"]["name"]
        if not ns_obj["metadata"].get("deletionTimestamp"):
            new = {
                **ns_obj,
                "metadata": {
                    **ns_obj["metadata"],
                    "deletionTimestamp": store.now(),
                    "resourceVersion": store.next_rv(),
                },
                "status": {**(ns_obj.get("status") or {}), "phase": "Terminating"},
            }
            store.commit(NAMESPACE_KEY, "MODIFIED", new, ns_obj)
            for key in store.buckets_in(name):
                info = store.storage_info(key)
                self.delete_collection(
                    info, name, store.select(key, name), DeleteOptions(propagation_policy="Background")
                )
            self._maybe_finalize_namespace(name)
        current = store.find(NAMESPACE_KEY, "", name)
        return (current, False) if current is not None else (ns_obj, True)

    def _maybe_finalize_namespace(self, name: str) -> None:
        store = self._store
        ns_obj = store.find(NAMESPACE_KEY, "", name)
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp") or store.namespace_count(name):
            return
        final = {
            **ns_obj,
            "metadata": {**ns_obj["metadata"], "resourceVersion": store.next_rv()},
            "spec": {**(ns_obj.get("spec") or {}), "finalizers": []},
        }
        store.commit(NAMESPACE_KEY, "DELETED", final, ns_obj)

    def _delete_crd(self, crd: Obj) -> tuple[Obj, bool]:
        store = self._store
        key = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        if not crd["metadata"].get("deletionTimestamp"):
            new = {
                **crd,
                "metadata": {**crd["metadata"], "deletionTimestamp": store.now(), "resourceVersion": store.next_rv()},
            }
            store.commit(CRD_KEY, "MODIFIED", new, crd)
            info = store.storage_info(key)
            self.delete_collection(info, None, store.select(key, None), DeleteOptions(propagation_policy="Background"))
            self._maybe_finalize_crd(key)
        current = store.find(CRD_KEY, "", crd["metadata"]["name"])
        return (current, False) if current is not None else (crd, True)

    def _maybe_finalize_crd(self, key: StorageKey) -> None:
        store = self._store
        crd = store.find(CRD_KEY, "", f"{key[1]}.{key[0]}")
        if crd is None or not crd["metadata"].get("deletionTimestamp") or store.select(key, None):
            return
        store.unserve_crd(crd)
        final = {**crd, "metadata": {**crd["metadata"], "resourceVersion": store.next_rv()}}
        store.commit(CRD_KEY, "DELETED", final, crd)
