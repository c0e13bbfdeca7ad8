"""Builders of command results and transitions, shared by the status unit and component tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schema.keys import KeyKind, ReconcileKey
from schema.messages import CommandResult, Outcome, Transition

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def transition(
    field: str,
    from_value: str,
    to_value: str,
    *,
    uid: str = "uid-1",
    kind: KeyKind = "RayJob",
    namespace: str = "default",
    name: str = "demo",
    seconds: float = 0,
    rv: str = "1",
    reason: str = "",
    message: str = "",
    attributes: dict[str, str] | None = None,
) -> Transition:
    """One transition of ``kind namespace/name`` (uid ``uid``) at ``T0 + seconds``."""
    return Transition(
        kind=kind,
        uid=uid,
        namespace=namespace,
        name=name,
        field=field,
        from_value=from_value,
        to_value=to_value,
        at=at(seconds),
        reason=reason,
        message=message,
        resource_version=rv,
        attributes=attributes or {},
    )


def result(
    *transitions: Transition,
    batch_id: str = "batch-1",
    command_id: str = "0",
    kind: KeyKind = "RayJob",
    namespace: str = "default",
    name: str = "demo",
    verb: str = "patch_status",
    outcome: Outcome = "applied",
    seconds: float = 0,
    **extra: Any,
) -> CommandResult:
    """A command result for ``kind namespace/name`` carrying ``transitions``."""
    first = transitions[0] if transitions else None
    key = ReconcileKey(
        kind=first.kind if first else kind,
        namespace=first.namespace if first else namespace,
        name=first.name if first else name,
    )
    return CommandResult(
        batch_id=batch_id,
        command_id=command_id,
        key=key,
        verb=verb,
        target=f"{key.kind} {key.namespace}/{key.name}",
        outcome=outcome,
        at=at(seconds),
        transitions=transitions,
        **extra,
    )


def lifecycle(
    to_value: str,
    *,
    uid: str,
    kind: KeyKind = "RayJob",
    namespace: str = "default",
    name: str = "demo",
    seconds: float = 0,
    rv: str = "1",
) -> CommandResult:
    """The watcher's lifecycle fact (``verb="observe"``): ``"" → created`` or ``created → deleted``."""
    from_value = "" if to_value == "created" else "created"
    t = transition(
        "lifecycle", from_value, to_value, uid=uid, kind=kind, namespace=namespace, name=name, seconds=seconds, rv=rv
    )
    return result(t, batch_id=f"observe/{uid}/{to_value}", verb="observe", seconds=seconds)
