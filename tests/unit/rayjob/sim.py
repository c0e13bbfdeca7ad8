"""A tiny pure simulation of the API server around one reconcile key, for unit tests.

It applies a Decision's commands to an in-memory object dict (``tests.unit.apiserver``: resourceVersion
checks, finalizers and deletionTimestamp, owner-reference cascade, JSON/merge patches, the status
subresource), records Events and dashboard calls, and builds the Snapshot the watcher would project. Tests drive time
explicitly and inject dashboard observations; nothing here sleeps, threads or does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import OBS_RAY_JOB, Decision, Snapshot
from schema.keys import KeyKind, ReconcileKey
from schema.messages import (
    Command,
    StopRayJob,
    SubmitRayJob,
)
from tests.unit.apiserver import NAMESPACE, ApiServer, merge_patch
from tests.unit.apiserver import stamp as stamp  # the tests take it from here

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

ReconcileFn = Callable[[Snapshot, datetime, OperatorConfig], Decision]


class World(ApiServer):
    """Objects of one namespace, plus the dashboard and the Event log."""

    def __init__(self, *, config: OperatorConfig | None = None, now: datetime = NOW) -> None:
        super().__init__(now=now)
        self.config = config or OperatorConfig()
        self.observations: dict[str, dict[str, Any]] = {}
        self.submissions: list[SubmitRayJob] = []
        self.stops: list[StopRayJob] = []

    def set_status(self, kind: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge ``status`` into an object's status (another controller's status write)."""
        return self.update(kind, name, lambda o: o.__setitem__("status", merge_patch(o.get("status") or {}, status)))

    def apply_command(self, command: Command) -> None:
        """Apply one command: the dashboard calls are recorded, API writes go to the store."""
        match command:
            case SubmitRayJob():
                self.submissions.append(command)
            case StopRayJob():
                self.stops.append(command)
            case _:
                super().apply_command(command)

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
        self.apply(decision, ReconcileKey(kind=kind, namespace=NAMESPACE, name=name))
        return decision

    def settle(self, fn: ReconcileFn, kind: KeyKind, name: str, *, limit: int = 30) -> Decision:
        """Reconcile until a pass issues no command (each applied command is a watch event)."""
        for _ in range(limit):
            decision = self.reconcile(fn, kind, name)
            if not decision.commands:
                return decision
        raise AssertionError(f"no quiescence after {limit} passes: {self.decisions[-1]}")
