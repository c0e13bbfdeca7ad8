"""The API-server semantics the unit-test simulations share: timestamps, patches and an object store.

``ApiServer`` keeps the objects of one namespace by (kind, name) and applies the API writes of a
Decision with the applier's idempotency rules: AlreadyExists on create is done, a stale
resourceVersion, a failed json-patch ``test`` or a UID mismatch drops the command (recorded in
``dropped``), finalizers hold a deletion until they are removed, and removing an object cascades to
what it owns. Each simulation subclasses it, adds its own actors and overrides ``apply_command`` for
the commands that are not API writes (dashboard calls). The RayCluster simulation uses only the
helpers, since it models terminating pods instead of finalizers. Nothing sleeps or does I/O; the
clock moves only when a test says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Decision
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CreateObject,
    DeleteObject,
    EmitEvent,
    PatchObject,
    PatchStatus,
    command_target,
    command_verb,
)
from services.edge.apply.authorize import Allowed, Denied, authorize
from services.edge.apply.provenance import ContentCheck

NAMESPACE = "default"


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


class SimFacts:
    """A simulation's objects as the applier's authorization facts (an absent object counts as deleted)."""

    def __init__(self, objects: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the object of that kind and name, if it is in ``namespace``: a simulation edits its
        objects in place, and the real facts hold a new object for each write (the checks remember what
        they derive by the identity of the object)."""
        obj = self.objects.get((kind, name))
        if obj is None or obj["metadata"].get("namespace", NAMESPACE) != namespace:
            return None
        return copy.deepcopy(obj)

    def recently_deleted(self, kind: str, namespace: str, name: str) -> bool:
        """Always: a simulation has no projection lag, an absent object is one that is gone."""
        return True

    async def caught_up(self, revision: int) -> None:
        """At once: a simulation's objects are always its latest."""


def check_authorized(
    key: ReconcileKey,
    command: Command,
    objects: Mapping[tuple[str, str], dict[str, Any]],
    *,
    config: OperatorConfig,
    decision: Sequence[Command] = (),
) -> None:
    """Fail unless the applier lets ``key`` run ``command`` on these objects: its authorization, and its
    content check with the operator ``config`` (``decision``: the command's batch, whose status patches
    the check folds in).

    Every simulation checks every command it applies, so every unit and property test of a reconcile also
    checks that its commands are within the authorization table and ownership rules, and that their
    content is what the custom resource implies (no false refusal).
    """
    facts = SimFacts(objects)
    verdict = authorize(key, command, facts)
    assert not isinstance(verdict, Denied), f"{key} was denied {command!r}: {verdict.reason}"
    if isinstance(verdict, Allowed):
        problem = ContentCheck(key, facts, config, decision).problem(command)
        assert not problem, f"{key}'s {command_verb(command)} {command_target(command)} was refused: {problem}"


class PatchConflict(Exception):
    """A json-patch ``test`` failed or a path is missing."""


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 implementation (add / remove / replace / test)."""
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].lstrip("/").split("/")]
        parent: Any = out
        try:
            for token in tokens[:-1]:
                parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        except (KeyError, IndexError, ValueError) as exc:
            raise PatchConflict(op["path"]) from exc
        last = tokens[-1]
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


class ApiServer:
    """Objects of one namespace, a clock, the Event log, the decisions applied and the commands dropped."""

    def __init__(self, *, now: datetime) -> None:
        self.now = now
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[EmitEvent] = []
        self.decisions: list[Decision] = []
        self.dropped: list[Command] = []
        self._rv = 100
        self._uid = 0
        self.config = OperatorConfig()

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

    def existing(self, kind: str, name: str) -> dict[str, Any]:
        """An object by kind and name that the test expects to exist (KeyError when it does not)."""
        return self.objects[(kind, name)]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Every object of a kind, by name."""
        return [obj for (k, _), obj in sorted(self.objects.items()) if k == kind]

    def update(
        self, kind: str, name: str, mutate: Callable[[dict[str, Any]], object], *, spec: bool = False
    ) -> dict[str, Any]:
        """Change an object (another actor), bumping resourceVersion (and generation for spec edits)."""
        obj = self.objects[(kind, name)]
        mutate(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        if spec:
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        return obj

    def remove(self, kind: str, name: str) -> None:
        """Make an object disappear (finalizers done), cascading to what it owns."""
        obj = self.objects.pop((kind, name), None)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        for (k, n), child in list(self.objects.items()):
            if any(o.get("uid") == uid for o in child["metadata"].get("ownerReferences") or []):
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

    # -- applying commands, as the applier does --------------------------------------------------------

    def apply(self, decision: Decision, key: ReconcileKey | None = None) -> None:
        """Apply each command in order, as the applier does (idempotent; conflicts are dropped); with the
        decision's ``key``, each command must first pass the applier's authorization."""
        self.decisions.append(decision)
        for command in decision.commands:
            if key is not None:
                check_authorized(key, command, self.objects, config=self.config, decision=decision.commands)
            self.apply_command(command)

    def apply_command(self, command: Command) -> None:
        """Apply one API write; a simulation overrides this for the commands it plays and defers the rest here.

        Raises:
            AssertionError: the command is not an API write (no simulation of this key expects it).
        """
        match command:
            case CreateObject():
                self.apply_create(command)
            case PatchObject():
                self.apply_patch(command)
            case DeleteObject():
                self.apply_delete(command)
            case PatchStatus():
                self.apply_patch_status(command)
            case EmitEvent():
                self.events.append(command)
            case _:
                raise AssertionError(f"unexpected command {command!r}")

    def apply_create(self, command: CreateObject) -> None:
        """Create the body unless the object exists (AlreadyExists counts as done)."""
        if (command.target.kind, command.target.name) not in self.objects:
            self.add(command.body)

    def apply_patch(self, command: PatchObject) -> None:
        """Merge or json-patch an object; bump generation on a spec change, remove it once unfinalized."""
        obj = self.get(command.target.kind, command.target.name)
        if obj is None or (command.resource_version and command.resource_version != obj["metadata"]["resourceVersion"]):
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

    def apply_delete(self, command: DeleteObject) -> None:
        """Delete an object unless its UID precondition fails (NotFound counts as done)."""
        obj = self.get(command.target.kind, command.target.name)
        if obj is None:
            return
        if command.target.uid and command.target.uid != obj["metadata"]["uid"]:
            self.dropped.append(command)
            return
        self.delete(command.target.kind, command.target.name)

    def apply_patch_status(self, command: PatchStatus) -> bool:
        """Merge into the status subresource.

        Returns:
            Whether the write was applied (False: the object is gone or its resourceVersion moved on).
        """
        obj = self.get(command.target.kind, command.target.name)
        if obj is None or (command.resource_version and command.resource_version != obj["metadata"]["resourceVersion"]):
            self.dropped.append(command)
            return False
        obj["status"] = merge_patch(obj.get("status") or {}, command.status)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        return True

    # -- the clock -----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the clock."""
        self.now = self.now + timedelta(seconds=seconds)

    def advance_to(self, moment: datetime) -> None:
        """Move the clock to ``moment``."""
        assert moment >= self.now, (moment, self.now)
        self.now = moment
