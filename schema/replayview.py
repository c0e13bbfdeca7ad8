"""The replay request/reply contract between the status service's console and the reconcilers.

The console asks on ``subjects.REPLAY_SUBJECT`` with a :class:`ReplayRequest`; a reconciler (it has
today's reconcile code) reads the key's recorded history from the bus, replays it and answers with a
:class:`ReplayView`: every recorded decision with its verdict, and for ``step`` that step in full (inputs,
snapshot, today's decision and the rules that fired, the recorded one) as text. Evolution follows the bus
rules: a new field gets a default, a field never changes type.
"""

from __future__ import annotations

from datetime import datetime

import msgspec


class ReplayRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Replay one key; ``step`` (1-based) also asks for that step in full; ``uid`` one incarnation."""

    kind: str
    namespace: str
    name: str
    step: int | None = None
    uid: str | None = None


class ReplayStepView(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded decision and what today's code decides for it."""

    index: int
    batch_seq: int
    issued_at: datetime
    uid: str
    verdict: str
    """``match``, ``diverged`` or ``unverifiable``."""
    inputs: int
    recorded: list[str]
    """The recorded commands, ``verb target`` each."""
    replayed: list[str]
    """Today's commands (empty when today's reconcile raised: see ``error``)."""
    rules: list[str]
    """The rules that fired today."""
    recorded_rules: list[str]
    diff: list[str]
    error: str = ""


class ReplayView(msgspec.Struct, frozen=True, kw_only=True):
    """A key's replay; ``error`` set (and nothing else) when it could not be done."""

    kind: str
    namespace: str
    name: str
    steps: list[ReplayStepView] = msgspec.field(default_factory=list)
    detail: str = ""
    """The requested step in full, as ``raybus replay --step N`` prints it."""
    logic_version: int = 0
    """The reconcile logic version of the code that answered."""
    error: str = ""
