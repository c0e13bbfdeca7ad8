"""The replayer: a recorded history through today's ``decide`` (the production code path).

Per recorded decision (a ``CommandBatch``, in commands-stream order) it rebuilds the snapshot the
reconciler read (``rebuild``), calls ``services.reconciler.worker.decide.draft`` with the recorded
``now`` (``issued_at``) and input sequences, and compares: the commands (ids and contents) in order
and ``wake_at``. The worker may have withheld some of the decision's commands as still in flight
(the batch's ``suppressed`` names their in-flight twins): today's decision is split the same way, the
published ones are compared in full and the withheld ones with their twins' content. A difference is a
divergence (``ReplayDivergence``); a decision whose snapshot cannot be rebuilt because older inputs aged
out of the stream is ``unverifiable``, never a divergence. Rules that changed are shown but do not
count: they explain, they are not effects.

Command ids are compared only for a decision recorded under today's ``LOGIC_VERSION``: the version is
bumped when the logic changes what it decides, ids included, so under an older one other ids are that
logic change (``ReplayStep.logic_change``), not a divergence; the commands' contents are still compared.

Entry points, after temporal's ``Replayer``: :meth:`Replayer.replay_history` (one history; raises the
first divergence unless told not to), :meth:`Replayer.replay_histories` (many; fail fast, or collect),
:meth:`Replayer.replay_iterator` (streams one result per history) and :meth:`Replayer.iter_steps`
(streams the steps of one history).

Replay assumes the operator configuration (feature gates, switches, config file) the decisions were
made with: it is an argument here, and the CLI defaults it to the current settings.

Not here: I/O of any kind (``source``, ``archive``, ``cli``), printing (``render``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import msgspec

from schema.config import OperatorConfig
from schema.decision import Decision, ReconcileFn, Snapshot
from schema.keys import KeyKind, ReconcileKey
from schema.messages import Command, CommandBatch, is_backstop, unrecorded_when_unchanged
from schema.times import format_time_ms
from services.reconciler.registry import default_reconcilers
from services.reconciler.worker.decide import LOGIC_VERSION, draft
from services.replay.compare import Published, command_diff, describe, split_withheld, wake_diff
from services.replay.history import HistoryWindow, KeyHistory, RecordedInput, collector_paused, incarnations
from services.replay.rebuild import SnapshotTimeline
from services.runtime.errors import ReplayDivergence

Verdict = Literal["match", "diverged", "unverifiable"]


class ReplayStep(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded decision and what today's code decides for it.

    Attributes:
        index: 1-based position among the history's decisions (``--step N``).
        batch_seq: the recorded batch's sequence in the commands stream.
        uid: the incarnation of the custom resource the decision was about.
        inputs: the recorded inputs coalesced into the decision; ``missing_inputs`` the sequences that
            are no longer in the stream.
        recorded: the batch as recorded; ``replayed`` the batch today's code builds (None if it raised),
            with all its commands, those withheld without ids (the worker names only what it publishes).
        verdict: ``match``, ``diverged`` or ``unverifiable`` (snapshot needs inputs that aged out).
        diff: the divergence in readable lines (empty on a match).
        withheld: positions in ``replayed.commands`` of those the recording shows withheld by the worker
            because an identical command of the key was still in flight (``CommandBatch.suppressed``).
        logic_change: set when the decision was recorded under an older ``LOGIC_VERSION`` and today's
            ids differ from the recorded ones: that version change, in words (ids are not compared then).
        error: the exception today's reconcile raised, if any (a divergence).
        snapshot: the rebuilt snapshot, kept only when asked (``keep_snapshots``).
    """

    index: int
    batch_seq: int
    issued_at: datetime
    snapshot_revision: int
    uid: str
    inputs: tuple[RecordedInput, ...]
    missing_inputs: tuple[int, ...]
    recorded: CommandBatch
    replayed: CommandBatch | None
    decision: Decision | None
    verdict: Verdict
    diff: tuple[str, ...] = ()
    withheld: tuple[int, ...] = ()
    logic_change: str = ""
    error: str = ""
    snapshot: Snapshot | None = None

    @property
    def diverged(self) -> bool:
        """Whether today's decision differs from the recorded one."""
        return self.verdict == "diverged"

    def withheld_commands(self) -> tuple[Command, ...]:
        """Today's commands the recording shows withheld, in order."""
        commands = self.replayed.commands if self.replayed is not None else ()
        return tuple(commands[i] for i in self.withheld)

    def kept_commands(self) -> tuple[Command, ...]:
        """Today's commands the recording shows published, in order."""
        commands = self.replayed.commands if self.replayed is not None else ()
        withheld = set(self.withheld)
        return tuple(c for i, c in enumerate(commands) if i not in withheld)

    @property
    def rules_changed(self) -> bool:
        """Whether today's reconcile reports other rules than the recorded ones."""
        return self.replayed is not None and self.replayed.rules != self.recorded.rules


class ReplayResult(msgspec.Struct, frozen=True, kw_only=True):
    """The replay of one key's history.

    Attributes:
        steps: the replayed decisions (after the uid/time filters), in order.
        divergences: one ``ReplayDivergence`` per diverged step.
        window: where the retained data starts; ``complete_from`` the first KV revision whose snapshot
            can be rebuilt entirely (0: all of them).
        unconsumed: inputs no recorded decision names (not reconciled yet, dead-lettered, or their
            decision aged out of the commands stream); backstop and resync ticks are not counted.
        incarnations: uids of the custom resource seen, in order.
    """

    key: ReconcileKey
    steps: tuple[ReplayStep, ...]
    divergences: tuple[ReplayDivergence, ...]
    window: HistoryWindow = HistoryWindow()
    complete_from: int = 0
    unconsumed: tuple[RecordedInput, ...] = ()
    incarnations: tuple[str, ...] = ()
    inputs_total: int = 0

    @property
    def unverifiable(self) -> int:
        """Steps that could not be checked."""
        return sum(1 for step in self.steps if step.verdict == "unverifiable")


class ReplayResults(msgspec.Struct, frozen=True, kw_only=True):
    """Results of several histories, by key (temporal's ``WorkflowReplayResults``)."""

    results: dict[str, ReplayResult]

    @property
    def divergences(self) -> tuple[ReplayDivergence, ...]:
        """Every divergence of every history."""
        return tuple(d for result in self.results.values() for d in result.divergences)


class StepFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which decisions to replay: one incarnation (uid), a time window on ``issued_at``."""

    uid: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def accepts(self, *, uid: str, issued_at: datetime) -> bool:
        """Whether a decision passes the filter."""
        if self.uid is not None and uid != self.uid:
            return False
        if self.since is not None and issued_at < self.since:
            return False
        return not (self.until is not None and issued_at > self.until)


def _divergence(key: ReconcileKey, step: ReplayStep) -> ReplayDivergence:
    actual = step.replayed.commands if step.replayed is not None else ()
    head = f"{key} step {step.index} (batch seq {step.batch_seq}, {format_time_ms(step.issued_at)}) diverged"
    return ReplayDivergence(
        "\n".join([head, *step.diff]), step=step.index, expected=step.recorded.commands, actual=actual
    )


@dataclass(frozen=True)
class Replayer:
    """Replays histories through ``decide`` with the given reconcilers and operator configuration."""

    config: OperatorConfig = field(default_factory=OperatorConfig)
    reconcilers: Mapping[KeyKind, ReconcileFn] = field(default_factory=default_reconcilers)
    only: StepFilter = field(default_factory=StepFilter)
    keep_snapshots: bool = False

    def iter_steps(self, history: KeyHistory, *, timeline: SnapshotTimeline | None = None) -> Iterator[ReplayStep]:
        """Replay one history decision by decision (a generator: stop early at will)."""
        timeline = timeline or SnapshotTimeline(history)
        by_seq = history.input_by_seq()
        published = Published()
        for index, recorded in enumerate(history.decisions, start=1):
            batch = recorded.batch
            published.add(batch.commands)
            snapshot = timeline.snapshot(batch.snapshot_revision)
            uid = timeline.owner_uid
            if not self.only.accepts(uid=uid, issued_at=batch.issued_at):
                continue
            inputs = tuple(by_seq[seq] for seq in batch.inputs if seq in by_seq)
            missing = tuple(seq for seq in batch.inputs if seq not in by_seq)
            yield self._step(
                index=index,
                recorded_seq=recorded.seq,
                batch=batch,
                snapshot=snapshot,
                uid=uid,
                inputs=inputs,
                missing=missing,
                complete=timeline.complete_at(batch.snapshot_revision),
                published=published,
            )

    def _step(
        self,
        *,
        index: int,
        recorded_seq: int,
        batch: CommandBatch,
        snapshot: Snapshot,
        uid: str,
        inputs: tuple[RecordedInput, ...],
        missing: tuple[int, ...],
        complete: bool,
        published: Published,
    ) -> ReplayStep:
        replayed: CommandBatch | None = None
        decision: Decision | None = None
        error = ""
        try:
            drafted = draft(
                reconcilers=self.reconcilers,
                snapshot=snapshot,
                now=batch.issued_at,
                config=self.config,
                sequences=batch.inputs,
            )
        except Exception as exc:  # a crash of today's reconcile is a finding, not the replayer's failure
            error = f"{type(exc).__name__}: {exc}"
        diff: list[str] = []
        withheld: tuple[int, ...] = ()
        logic_change = ""
        ids = batch.logic_version == LOGIC_VERSION
        if error:
            diff = [f"! reconcile raised {error}", *(f"- {describe(c)}" for c in batch.commands)]
        else:
            split = split_withheld(
                drafted.decision.commands,
                batch.commands,
                batch.suppressed,
                published,
                rule=drafted.ids(),
                ids=ids,
            )
            withheld = split.withheld
            decision = msgspec.structs.replace(drafted.decision, commands=split.commands)
            replayed = msgspec.structs.replace(drafted.batch, commands=split.commands)
            diff = command_diff(batch.commands, split.kept, ids=ids)
            diff += [f"- withheld command {i} (recorded as in flight, not decided now)" for i in split.lacking]
            diff += wake_diff(batch.wake_at, replayed.wake_at)
            if not ids and [c.id for c in split.kept] != [c.id for c in batch.commands]:
                logic_change = (
                    f"command ids differ, not compared: recorded with logic_version {batch.logic_version}, "
                    f"today's is {LOGIC_VERSION}"
                )
        verdict: Verdict = "match"
        if diff:
            verdict = "diverged" if complete else "unverifiable"
            if not ids:
                diff.append(f"(recorded with logic_version {batch.logic_version}, today's is {LOGIC_VERSION})")
        elif not complete:
            verdict = "unverifiable"
        return ReplayStep(
            index=index,
            batch_seq=recorded_seq,
            issued_at=batch.issued_at,
            snapshot_revision=batch.snapshot_revision,
            uid=uid,
            inputs=inputs,
            missing_inputs=missing,
            recorded=batch,
            replayed=replayed,
            decision=decision,
            verdict=verdict,
            diff=tuple(diff),
            withheld=withheld,
            logic_change=logic_change,
            error=error,
            snapshot=snapshot if self.keep_snapshots else None,
        )

    def replay_history(self, history: KeyHistory, *, raise_on_divergence: bool = True) -> ReplayResult:
        """Replay one history.

        Raises:
            ReplayDivergence: the first diverged step, when ``raise_on_divergence``.
        """
        steps: list[ReplayStep] = []
        divergences: list[ReplayDivergence] = []
        timeline = SnapshotTimeline(history)
        with collector_paused():
            for step in self.iter_steps(history, timeline=timeline):
                steps.append(step)
                if step.diverged:
                    divergence = _divergence(history.key, step)
                    if raise_on_divergence:
                        raise divergence
                    divergences.append(divergence)
        consumed = {seq for recorded in history.decisions for seq in recorded.batch.inputs}
        return ReplayResult(
            key=history.key,
            steps=tuple(steps),
            divergences=tuple(divergences),
            window=history.window,
            complete_from=timeline.complete_from,
            # A backstop tick is reconciled only by a worker that lost what it stands behind, and a resync
            # tick or a change of the key's own status alone that found nothing to do is not recorded: no
            # decision names those, and they are no gap in the history.
            unconsumed=tuple(
                r
                for r in history.inputs
                if r.seq not in consumed and not is_backstop(r.message) and not unrecorded_when_unchanged(r.message)
            ),
            incarnations=incarnations(history),
            inputs_total=len(history.inputs),
        )

    def replay_iterator(
        self, histories: Iterable[KeyHistory], *, raise_on_divergence: bool = False
    ) -> Iterator[ReplayResult]:
        """Stream one result per history, as each is replayed.

        Raises:
            ReplayDivergence: the first divergence, when ``raise_on_divergence`` (fail fast).
        """
        for history in histories:
            yield self.replay_history(history, raise_on_divergence=raise_on_divergence)

    def replay_histories(self, histories: Iterable[KeyHistory], *, raise_on_divergence: bool = True) -> ReplayResults:
        """Replay many histories; fail fast on the first divergence, or collect every result.

        Raises:
            ReplayDivergence: the first divergence, when ``raise_on_divergence``.
        """
        results = {
            str(result.key): result
            for result in self.replay_iterator(histories, raise_on_divergence=raise_on_divergence)
        }
        return ReplayResults(results=results)
