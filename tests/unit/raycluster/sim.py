"""A pure in-memory API server + kubelet around one RayCluster key, for convergence tests.

``World`` holds objects by (kind, name), applies a Decision's commands with the applier's idempotency
rules (AlreadyExists on create = done, NotFound on delete = done, UID preconditions, stale
resourceVersion on status = dropped), keeps pods terminating until ``settle`` removes them, and can
mark pods Running/Ready like the kubelet. Nothing sleeps or does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from schema.config import OperatorConfig
from schema.decision import Decision, Snapshot
from schema.keys import ReconcileKey
from schema.messages import (
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    PatchObject,
    PatchStatus,
)
from services.reconciler.raycluster import reconcile
from tests.unit.apiserver import NAMESPACE, check_authorized, merge_patch, stamp

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selector ``k=v,k2=v2``."""
    for part in selector.split(","):
        key, _, value = part.partition("=")
        if labels.get(key) != value:
            return False
    return True


class World:
    """Objects of one RayCluster key, a clock and an event log."""

    def __init__(self, cluster: dict[str, Any], *, now: datetime = NOW, config: OperatorConfig | None = None) -> None:
        self.now = now
        self.config = config or OperatorConfig()
        self.rv = 100
        self.uid_seq = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[EmitEvent] = []
        self.decisions: list[Decision] = []
        self.created: list[str] = []
        self.deleted: list[str] = []
        cluster = copy.deepcopy(cluster)
        meta = cluster.setdefault("metadata", {})
        meta.setdefault("namespace", NAMESPACE)
        meta.setdefault("uid", "11111111-2222-3333-4444-555555555555")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_rv()
        self.name = meta["name"]
        self.key = ReconcileKey(kind="RayCluster", namespace=meta["namespace"], name=self.name)
        self.objects[("RayCluster", self.name)] = cluster

    # -- plumbing ------------------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    @property
    def cluster(self) -> dict[str, Any]:
        return self.objects[("RayCluster", self.name)]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _), o in sorted(self.objects.items()) if k == kind]

    def pods(self) -> list[dict[str, Any]]:
        return self.of_kind("Pod")

    def snapshot(self) -> Snapshot:
        entries: dict[str, dict[str, dict[str, Any]]] = {}
        for (kind, name), obj in self.objects.items():
            entries.setdefault(kind, {})[name] = copy.deepcopy(obj)
        return Snapshot(
            key=ReconcileKey(kind="RayCluster", namespace=NAMESPACE, name=self.name), entries=entries, revision=self.rv
        )

    def update_spec(self, mutate: Callable[[dict[str, Any]], None]) -> None:
        mutate(self.cluster["spec"])
        self.cluster["metadata"]["generation"] += 1
        self.cluster["metadata"]["resourceVersion"] = self._next_rv()

    # -- reconcile + apply ---------------------------------------------------------------------------
    def step(self, *, apply: bool = True) -> Decision:
        decision = reconcile(self.snapshot(), self.now, self.config)
        self.decisions.append(decision)
        if apply:
            self.apply(decision)
        return decision

    def apply(self, decision: Decision) -> None:
        # What the applier sends is JSON: tuples become lists, exactly as on the wire.
        sent: Decision = msgspec.json.decode(msgspec.json.encode(decision), type=Decision)
        for command in sent.commands:
            check_authorized(self.key, command, self.objects, config=self.config, decision=sent.commands)
            match command:
                case CreateObject():
                    self._create(command)
                case DeleteObject():
                    self._delete(command.target.kind, command.target.name, uid=command.target.uid)
                case DeleteCollection():
                    for obj in list(self.of_kind(command.kind)):
                        if matches(obj["metadata"].get("labels", {}), command.label_selector):
                            self._delete(command.kind, obj["metadata"]["name"], uid="")
                case PatchObject():
                    key = (command.target.kind, command.target.name)
                    if key not in self.objects:
                        continue
                    obj = self.objects[key]
                    if command.resource_version and command.resource_version != obj["metadata"]["resourceVersion"]:
                        continue
                    patched = merge_patch(obj, command.patch)
                    patched["metadata"]["resourceVersion"] = self._next_rv()
                    self.objects[key] = patched
                    if not patched["metadata"].get("finalizers") and patched["metadata"].get("deletionTimestamp"):
                        del self.objects[key]
                case PatchStatus():
                    if (
                        command.resource_version
                        and command.resource_version != self.cluster["metadata"]["resourceVersion"]
                    ):
                        continue
                    self.cluster["status"] = merge_patch(self.cluster.get("status") or {}, command.status)
                    self.cluster["metadata"]["resourceVersion"] = self._next_rv()
                case EmitEvent():
                    self.events.append(command)
                case _:
                    raise AssertionError(f"unexpected command {command!r}")

    def _create(self, command: CreateObject) -> None:
        body = copy.deepcopy(command.body)
        kind, name = command.target.kind, body["metadata"]["name"]
        if (kind, name) in self.objects:
            return  # AlreadyExists = done
        self.uid_seq += 1
        meta = body["metadata"]
        meta["uid"] = f"uid-{kind.lower()}-{self.uid_seq}"
        meta["resourceVersion"] = self._next_rv()
        meta["creationTimestamp"] = stamp(self.now)
        if kind == "Pod":
            body["status"] = {"phase": "Pending"}
            self.created.append(name)
        if kind == "Service":
            spec = body.setdefault("spec", {})
            spec.setdefault("clusterIP", "10.0.0.10")
            for port in spec.get("ports", []):
                port.setdefault("targetPort", port["port"])
        self.objects[(kind, name)] = body

    def _delete(self, kind: str, name: str, *, uid: str) -> None:
        obj = self.objects.get((kind, name))
        if obj is None:
            return
        if uid and obj["metadata"].get("uid") != uid:
            return
        if kind == "Pod":
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = stamp(self.now)
                obj["metadata"]["resourceVersion"] = self._next_rv()
                self.deleted.append(name)
            return
        del self.objects[(kind, name)]

    # -- kubelet -------------------------------------------------------------------------------------
    def settle(self) -> None:
        """Terminating pods disappear; pending pods become Running and Ready."""
        for obj in self.pods():
            if obj["metadata"].get("deletionTimestamp"):
                del self.objects[("Pod", obj["metadata"]["name"])]
        for obj in self.pods():
            self.set_pod(obj["metadata"]["name"], phase="Running", ready=True)

    def set_pod(self, name: str, *, phase: str, ready: bool, extra: dict[str, Any] | None = None) -> None:
        obj = self.objects[("Pod", name)]
        status: dict[str, Any] = {
            "phase": phase,
            "podIP": f"10.1.0.{len(name) % 200 + 1}",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        status.update(extra or {})
        obj["status"] = status
        obj["metadata"]["resourceVersion"] = self._next_rv()

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def converge(self, *, max_steps: int = 30) -> int:
        """Reconcile, apply, settle until a decision has no commands. Returns the steps taken."""
        for step in range(1, max_steps + 1):
            decision = self.step()
            self.settle()
            if not decision.commands:
                return step
        raise AssertionError(f"no convergence after {max_steps} steps: last rules {self.decisions[-1].rules}")
