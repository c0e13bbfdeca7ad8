"""The pure reconcile contract: ``reconcile(snapshot, now, config) -> Decision``.

A :class:`Snapshot` is every projected entry under one reconcile key (the custom resource itself, its
children, related objects and dashboard observations), exactly as one KV prefix read returned it. A
:class:`Decision` is data only: commands to apply, the earliest wake-up wanted, and the rules that fired
(why), which ``raybus replay`` shows. Neither side does I/O, reads a clock or draws randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from schema.config import OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import Command, Transition

# Entry kinds of observations (published by the dashboard prober, not read from the API server).
OBS_RAY_JOB = "obs-rayjob"
OBS_SERVE = "obs-serve"
OBS_SERVE_HEALTH = "obs-servehealth"


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """All entries of one key: ``entries[entry_kind][name] -> object`` plus the KV revision read."""

    key: ReconcileKey
    entries: Mapping[str, Mapping[str, dict[str, Any]]]
    revision: int = 0

    def owner(self) -> dict[str, Any] | None:
        """The custom resource the key names, or None once it is gone."""
        return self.entries.get(self.key.kind, {}).get(self.key.name)

    def of_kind(self, entry_kind: str) -> list[dict[str, Any]]:
        """Entries of one kind, sorted by name (a stable order, so decisions are deterministic)."""
        found = self.entries.get(entry_kind, {})
        return [found[name] for name in sorted(found)]

    def get(self, entry_kind: str, name: str) -> dict[str, Any] | None:
        """One entry by kind and name."""
        return self.entries.get(entry_kind, {}).get(name)


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What ``reconcile`` wants done.

    Attributes:
        commands: applied in order by one applier.
        wake_at: the earliest time this key wants to be reconciled again even if nothing changes
            (a bus timer; a newer decision's wake-up replaces an older one). None: no timer.
        rules: ids of the behaviour rules that fired (docs/behaviour.md), in order (``"4.2/create-head"``, ...).
    """

    commands: tuple[Command, ...] = ()
    wake_at: datetime | None = None
    rules: tuple[str, ...] = ()

    def transitions(self) -> tuple[Transition, ...]:
        """Every transition carried by the decision's status patches."""
        found: list[Transition] = []
        for command in self.commands:
            found.extend(getattr(command, "transitions", ()))
        return tuple(found)


ReconcileFn = Callable[[Snapshot, datetime, OperatorConfig], Decision]
"""A kind's pure reconcile: ``(snapshot, now, config) -> Decision``.

Args:
    snapshot: every entry of the key (the custom resource and what it owns or observes).
    now: the time of the event being handled (never read from a clock).
    config: operator gates and switches.

Returns:
    The commands to apply in order, the earliest wake-up, and the ids of the rules that fired (docs/behaviour.md).
"""
