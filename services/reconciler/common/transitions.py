"""The state-machine steps of one reconcile pass and the Transitions they become, for every kind.

Role: a kind's status draft records a :class:`Step` for each fact the pass decides (a deployment
status moved, a condition changed, traffic shifted); when the pass writes the status,
:func:`build_transitions` turns the steps into the Transitions its PatchStatus carries, each tied to
the object's uid and to the resourceVersion the decision was made on (the key that keeps a
redelivered result from duplicating a history row).

Invariants: pure; the transitions keep the order of the steps; each transition gets its own
attributes dict, never one a step or another transition holds.

Not here: which steps a kind records, or whether its status is written at all (``<kind>.status``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from schema.keys import KeyKind
from schema.messages import ObjectRef, Transition


class Step:
    """One state-machine step decided in a pass (becomes a Transition when the status is written)."""

    __slots__ = ("attributes", "field", "from_value", "message", "reason", "to_value")

    def __init__(
        self,
        *,
        field: str,
        from_value: str,
        to_value: str,
        reason: str,
        message: str,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self.field = field
        self.from_value = from_value
        self.to_value = to_value
        self.reason = reason
        self.message = message
        self.attributes: dict[str, str] = dict(attributes or {})


def build_transitions(
    steps: Iterable[Step],
    *,
    kind: KeyKind,
    target: ObjectRef,
    resource_version: str,
    at: datetime,
    attributes: Mapping[str, str] | None = None,
) -> tuple[Transition, ...]:
    """The Transitions a status write carries, one per step.

    Args:
        steps: the steps of the pass, in the order they were decided.
        kind: the custom resource's kind.
        target: the custom resource (namespace, name, uid).
        resource_version: the custom resource's resourceVersion the pass decided on.
        at: the pass's ``now``.
        attributes: details every transition carries (e.g. a RayJob's cluster and job id); a step's own
            attributes are added to them, and win on the same key.

    Returns:
        The transitions, in the order of ``steps``.
    """
    shared = dict(attributes or {})
    return tuple(
        Transition(
            kind=kind,
            uid=target.uid,
            namespace=target.namespace,
            name=target.name,
            field=step.field,
            from_value=step.from_value,
            to_value=step.to_value,
            at=at,
            reason=step.reason,
            message=step.message,
            resource_version=resource_version,
            attributes={**shared, **step.attributes},
        )
        for step in steps
    )
