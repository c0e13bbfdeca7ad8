"""A tiny pure simulation of the API server around one reconcile key, for unit tests.

It applies a Decision's commands to an in-memory object dict (resourceVersion checks, finalizers and
deletionTimestamp, owner-reference cascade, JSON/merge patches, the status subresource), records
Events and dashboard calls, and builds the Snapshot the watcher would project. Tests drive time
explicitly and inject dashboard observations; nothing here sleeps, threads or does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from schema.config import OperatorConfig
from schema.decision import OBS_RAY_JOB, Decision, Snapshot
from schema.keys import KeyKind, ReconcileKey
from schema.messages import (
    Command,
    CreateObject,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    PatchObject,
    PatchStatus,
    PutServeConfig,
    StopRayJob,
    SubmitRayJob,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "default"

ReconcileFn = Callable[[Snapshot, datetime, OperatorConfig], Decision]


def stamp(moment: datetime) -> str:
    """RFC3339 as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class PatchConflict(Exception):
    """A json-patch ``test`` failed or a path is missing."""


def _walk(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        token = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 implementation (add / remove / replace / test)."""
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = op["path"].lstrip("/").split("/")
        try:
            parent = _walk(out, tokens[:-1])
        except (KeyError, IndexError, ValueError) as exc:
            raise PatchConflict(op["path"]) from exc
        last = tokens[-1].replace("~1", "/").replace("~0", "~")
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise PatchConflict(f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(copy.deepcopy(op["value"]))
                elif kind == "add":
                    parent.insert(int(last), copy.deepcopy(op["value"]))
                else:
                    parent[int(last)] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
    return out


class World:
    """Objects of one namespace, plus the dashboard and the Event log."""

    def __init__(self, *, config: OperatorConfig | None = None, now: datetime = NOW) -> None:
        self.config = config or OperatorConfig()
        self.now = now
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.observations: dict[str, dict[str, Any]] = {}
        self.events: list[EmitEvent] = []
        self.submissions: list[SubmitRayJob] = []
        self.stops: list[StopRayJob] = []
        self.dropped: list[Command] = []
        self.decisions: list[Decision] = []
        self._rv = 100
        self._uid = 0

    # -- object store ------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as the API server would (uid, resourceVersion, generation, timestamps)."""
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("namespace", NAMESPACE)
        self._uid += 1
        metadata.setdefault("uid", f"uid-{obj['kind'].lower()}-{metadata['name']}-{self._uid}")
        metadata["resourceVersion"] = self._next_rv()
        metadata.setdefault("generation", 1)
        metadata.setdefault("creationTimestamp", stamp(self.now))
        self.objects[(obj["kind"], metadata["name"])] = obj
        return obj

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """An object by kind and name."""
        return self.objects.get((kind, name))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every object of a kind, by name."""
        return [obj for (k, _), obj in sorted(self.objects.items()) if k == kind]

    def update(self, kind: str, name: str, mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Change an object in place (as another actor would) and bump its resourceVersion."""
        obj = self.objects[(kind, name)]
        mutate(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        return obj

    def set_status(self, kind: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge ``status`` into an object's status (another controller's status write)."""
        return self.update(kind, name, lambda o: o.__setitem__("status", merge_patch(o.get("status") or {}, status)))

    def remove(self, kind: str, name: str) -> None:
        """Make an object disappear (finalizers done), cascading to what it owns."""
        obj = self.objects.pop((kind, name), None)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        for (k, n), child in list(self.objects.items()):
            owners = child["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                self.delete(k, n)

    def delete(self, kind: str, name: str) -> None:
        """Delete: set deletionTimestamp when finalizers remain, else remove."""
        obj = self.objects.get((kind, name))
        if obj is None:
            return
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", stamp(self.now))
            obj["metadata"]["resourceVersion"] = self._next_rv()
        else:
            self.remove(kind, name)

    # -- applying commands -------------------------------------------------------------------------

    def apply(self, decision: Decision) -> None:
        """Apply each command in order, as the applier does (idempotent; conflicts are dropped)."""
        self.decisions.append(decision)
        for command in decision.commands:
            self.apply_command(command)

    def apply_command(self, command: Command) -> None:
        """Apply one command."""
        match command:
            case CreateObject():
                if (command.target.kind, command.target.name) not in self.objects:
                    self.add(command.body)
            case PatchObject():
                obj = self.get(command.target.kind, command.target.name)
                if obj is None or (
                    command.resource_version and command.resource_version != obj["metadata"]["resourceVersion"]
                ):
                    self.dropped.append(command)
                    return
                try:
                    if command.patch_type == "json":
                        assert isinstance(command.patch, list)
                        new = json_patch(obj, command.patch)
                    else:
                        new = merge_patch(obj, command.patch)
                except PatchConflict:
                    self.dropped.append(command)
                    return
                if new.get("spec") != obj.get("spec"):
                    new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
                new["metadata"]["resourceVersion"] = self._next_rv()
                self.objects[(command.target.kind, command.target.name)] = new
                if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                    self.remove(command.target.kind, command.target.name)
            case DeleteObject():
                obj = self.get(command.target.kind, command.target.name)
                if obj is None:
                    return
                if command.target.uid and command.target.uid != obj["metadata"]["uid"]:
                    self.dropped.append(command)
                    return
                self.delete(command.target.kind, command.target.name)
            case PatchStatus():
                obj = self.get(command.target.kind, command.target.name)
                if obj is None or (
                    command.resource_version and command.resource_version != obj["metadata"]["resourceVersion"]
                ):
                    self.dropped.append(command)
                    return
                obj["status"] = merge_patch(obj.get("status") or {}, command.status)
                obj["metadata"]["resourceVersion"] = self._next_rv()
            case EmitEvent():
                self.events.append(command)
            case SubmitRayJob():
                self.submissions.append(command)
            case StopRayJob():
                self.stops.append(command)
            case DeleteCollection() | PutServeConfig():
                raise AssertionError(f"unexpected command {command!r}")

    # -- snapshots and driving -----------------------------------------------------------------------

    def snapshot(self, kind: KeyKind, name: str) -> Snapshot:
        """What the watcher would project under the key: every object here, plus observations."""
        entries: dict[str, dict[str, dict[str, Any]]] = {}
        for (k, n), obj in self.objects.items():
            entries.setdefault(k, {})[n] = copy.deepcopy(obj)
        for job_id, data in self.observations.items():
            entries.setdefault(OBS_RAY_JOB, {})[job_id] = copy.deepcopy(data)
        return Snapshot(key=ReconcileKey(kind=kind, namespace=NAMESPACE, name=name), entries=entries)

    def reconcile(self, fn: ReconcileFn, kind: KeyKind, name: str) -> Decision:
        """One pass at ``self.now``, applied."""
        decision = fn(self.snapshot(kind, name), self.now, self.config)
        self.apply(decision)
        return decision

    def settle(self, fn: ReconcileFn, kind: KeyKind, name: str, *, limit: int = 30) -> Decision:
        """Reconcile until a pass issues no command (each applied command is a watch event)."""
        for _ in range(limit):
            decision = self.reconcile(fn, kind, name)
            if not decision.commands:
                return decision
        raise AssertionError(f"no quiescence after {limit} passes: {self.decisions[-1]}")

    def advance(self, seconds: float) -> None:
        """Move the clock."""
        self.now = self.now + timedelta(seconds=seconds)

    def advance_to(self, moment: datetime) -> None:
        """Move the clock to ``moment``."""
        assert moment >= self.now, (moment, self.now)
        self.now = moment
