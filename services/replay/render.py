"""Printing replays: the timeline, one step in full, and the summary of many keys.

The timeline shows per step: its inputs (event type, kind/name, resourceVersion, and what changed in the
object as a short field diff against the previous version of that entry), today's decision (commands as
verb + target, the transitions they carry, the wake-up, the rules), and the recorded decision (``same``
when it matches, else in full with the divergence explained). ``--step`` shows one step with the whole
snapshot as YAML. Text only: no colours, so the output pastes into a bug report.

Not here: deciding anything (``replayer``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
import yaml

from schema.decision import Snapshot
from schema.messages import Command, Observation, PatchStatus, TimerTick, WatchEvent
from schema.times import format_time_ms
from services.reconciler.worker.decide import LOGIC_VERSION
from services.replay.compare import describe, field_diff
from services.replay.history import KeyHistory, RecordedInput, entry_of
from services.replay.replayer import ReplayResult, ReplayStep

_MARK = {"match": "match", "diverged": "DIVERGED", "unverifiable": "unverifiable (inputs aged out)"}


def stamp(moment: datetime | None) -> str:
    """UTC, milliseconds, ``Z``."""
    return "-" if moment is None else format_time_ms(moment)


def _short_uid(uid: str) -> str:
    return uid[:8] if uid else "-"


@dataclass
class InputDescriber:
    """Describes inputs of one history, each against the previous version of the same entry."""

    history: KeyHistory
    _previous: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        last: dict[tuple[str, str], Any] = {}
        for recorded in self.history.inputs:
            entry = entry_of(recorded.message)
            if entry is None:
                continue
            self._previous[recorded.seq] = last.get(entry)
            message = recorded.message
            if isinstance(message, WatchEvent):
                last[entry] = None if message.event_type == "DELETED" else message.object
            elif isinstance(message, Observation):
                last[entry] = message.data

    def headline(self, recorded: RecordedInput) -> str:
        """``seq N  TYPE  Kind name  rv X``."""
        message = recorded.message
        match message:
            case WatchEvent():
                entry = entry_of(message) or ("?", "?")
                return (
                    f"seq {recorded.seq}  {message.event_type:<8} {entry[0]} {entry[1]}  rv {message.resource_version}"
                )
            case Observation():
                return f"seq {recorded.seq}  OBSERVED {message.source} {message.entry_name}"
            case TimerTick():
                reason = f" ({message.reason})" if message.reason else ""
                return f"seq {recorded.seq}  TIMER    due {stamp(message.due_at)}{reason}"

    def changes(self, recorded: RecordedInput, *, limit: int = 4) -> list[str]:
        """What changed in the entry (empty for timers and deletions)."""
        message = recorded.message
        previous = self._previous.get(recorded.seq)
        if isinstance(message, WatchEvent):
            if message.event_type == "DELETED":
                return []
            if previous is None:
                return ["(new entry)"] if message.event_type == "ADDED" else []
            return field_diff(previous, message.object, limit=limit)
        if isinstance(message, Observation):
            return field_diff(previous or {}, message.data, limit=limit)
        return []


def _transitions(command: Command) -> list[str]:
    if not isinstance(command, PatchStatus):
        return []
    return [
        f"transition {t.field}: {t.from_value or '-'} → {t.to_value or '-'}" + (f" ({t.reason})" if t.reason else "")
        for t in command.transitions
    ]


def _decision_lines(
    commands: Sequence[Command], wake_at: datetime | None, now: datetime, indent: str, withheld: Sequence[int] = ()
) -> list[str]:
    lines = []
    for index, command in enumerate(commands):
        note = "  (withheld: in flight)" if index in withheld else ""
        lines.append(f"{indent}→ {describe(command)}{note}")
        lines.extend(f"{indent}    {t}" for t in _transitions(command))
    if not commands:
        lines.append(f"{indent}→ (no commands)")
    if wake_at is not None:
        lines.append(f"{indent}wake {stamp(wake_at)} (+{(wake_at - now).total_seconds():g}s)")
    return lines


def render_step(step: ReplayStep, describer: InputDescriber) -> list[str]:
    """The timeline lines of one step."""
    batch = step.recorded
    lines = [
        f"#{step.index}  {stamp(step.issued_at)}  rev {step.snapshot_revision}  uid {_short_uid(step.uid)}"
        f"  {_MARK[step.verdict]}"
    ]
    for recorded in step.inputs:
        lines.append(f"    ← {describer.headline(recorded)}")
        lines.extend(f"          {change}" for change in describer.changes(recorded))
    if step.missing_inputs:
        lines.append(f"    ← seq {', '.join(map(str, step.missing_inputs))}: no longer in the stream")
    if step.replayed is not None:
        lines.extend(
            _decision_lines(step.replayed.commands, step.replayed.wake_at, step.issued_at, "    ", step.withheld)
        )
        if step.replayed.rules:
            lines.append(f"    rules {', '.join(step.replayed.rules)}")
    else:
        lines.append(f"    ! reconcile raised {step.error}")
    if step.verdict == "match":
        withheld = f" + {len(batch.suppressed)} withheld" if batch.suppressed else ""
        lines.append(f"    recorded: same ({len(batch.commands)} command(s){withheld}, same wake-up)")
        if step.logic_change:
            lines.append(f"    ({step.logic_change})")
    else:
        lines.append("    recorded:")
        lines.extend(_decision_lines(batch.commands, batch.wake_at, step.issued_at, "      "))
        if batch.suppressed:
            lines.append(f"      withheld (in flight): {', '.join(batch.suppressed)}")
        if batch.rules:
            lines.append(f"      rules {', '.join(batch.rules)}")
        lines.append("    diff:")
        lines.extend(f"      {line}" for line in step.diff)
    if step.rules_changed and step.verdict == "match":
        lines.append(f"    (recorded rules: {', '.join(step.recorded.rules) or '-'})")
    return lines


def render_header(result: ReplayResult, history: KeyHistory, *, config_note: str) -> list[str]:
    """Key, data window and configuration."""
    w = result.window
    lines = [
        f"{result.key.kind} {result.key.namespace}/{result.key.name}: {len(result.steps)} decision(s) replayed "
        f"with logic_version {LOGIC_VERSION}, {result.inputs_total} input(s) recorded",
    ]
    if history.inputs:
        first, last = history.inputs[0], history.inputs[-1]
        lines.append(
            f"  inputs  seq {first.seq} ({stamp(first.time)}) to seq {last.seq} ({stamp(last.time)}); "
            f"decisions seq {history.decisions[0].seq} to {history.decisions[-1].seq}"
            if history.decisions
            else f"  inputs  seq {first.seq} ({stamp(first.time)}) to seq {last.seq} ({stamp(last.time)})"
        )
    lines.append(
        f"  streams events from seq {w.events_first_seq} ({stamp(w.events_first_time)}), "
        f"commands from seq {w.commands_first_seq} ({stamp(w.commands_first_time)})"
    )
    if w.truncated:
        lines.append(
            "  history TRUNCATED: older messages aged out of the events stream; snapshots are complete from KV "
            f"revision {result.complete_from} on, decisions that read an earlier revision are unverifiable"
        )
    else:
        lines.append("  history complete: the events stream has dropped nothing")
    if result.incarnations:
        lines.append(f"  uids    {', '.join(result.incarnations)}")
    lines.append(f"  config  {config_note}")
    return lines


def render_summary(result: ReplayResult) -> list[str]:
    """Counts per verdict, and the inputs no decision names."""
    counts = Counter(step.verdict for step in result.steps)
    lines = [
        f"{len(result.steps)} decision(s): {counts['match']} match, {counts['diverged']} diverged, "
        f"{counts['unverifiable']} unverifiable"
    ]
    if result.divergences:
        lines.append(f"diverged at step(s) {', '.join(str(d.step) for d in result.divergences)}")
    changed = [step for step in result.steps if step.logic_change]
    if changed:
        versions = ", ".join(sorted({str(step.recorded.logic_version) for step in changed}))
        lines.append(
            f"{len(changed)} decision(s) recorded with logic_version {versions} have other command ids today "
            f"(logic_version {LOGIC_VERSION}): a logic change, not a divergence"
        )
    if result.unconsumed:
        seqs = ", ".join(str(r.seq) for r in result.unconsumed[:10])
        more = f" (+{len(result.unconsumed) - 10} more)" if len(result.unconsumed) > 10 else ""
        lines.append(f"{len(result.unconsumed)} input(s) no recorded decision names: seq {seqs}{more}")
    return lines


def render_timeline(
    result: ReplayResult, history: KeyHistory, *, config_note: str, only_divergences: bool = False
) -> str:
    """The whole replay as text."""
    describer = InputDescriber(history)
    lines = [*render_header(result, history, config_note=config_note), ""]
    for step in result.steps:
        if only_divergences and step.verdict == "match":
            continue
        lines.extend(render_step(step, describer))
    lines.append("")
    lines.extend(render_summary(result))
    return "\n".join(lines) + "\n"


def _yaml(data: Any) -> str:
    return yaml.safe_dump(msgspec.to_builtins(data), sort_keys=False, allow_unicode=True, width=120)


def _indent(text: str, prefix: str = "  ") -> str:
    return "".join(prefix + line + "\n" for line in text.splitlines())


def _decision_block(
    title: str, commands: Sequence[Command], decision_rules: Sequence[str], wake: datetime | None
) -> str:
    body = {"commands": list(commands), "wake_at": wake, "rules": list(decision_rules)}
    return f"{title}:\n" + _indent(_yaml(body))


def render_step_detail(step: ReplayStep, history: KeyHistory, *, total: int) -> str:
    """One step in full: inputs, the snapshot as YAML, today's decision and why, the recorded one."""
    describer = InputDescriber(history)
    out = [
        f"step {step.index} of {total}: {history.key.kind} {history.key.namespace}/{history.key.name}",
        f"  issued_at          {stamp(step.issued_at)}",
        f"  batch              seq {step.batch_seq}, id {step.recorded.id}",
        f"  logic_version      {step.recorded.logic_version} recorded, {LOGIC_VERSION} today",
        f"  snapshot revision  {step.snapshot_revision}",
        f"  uid                {step.uid or '-'}",
        f"  verdict            {_MARK[step.verdict]}",
        "",
        "inputs:",
    ]
    for recorded in step.inputs:
        out.append(f"  {describer.headline(recorded)}")
        out.extend(f"      {change}" for change in describer.changes(recorded, limit=50))
    if step.missing_inputs:
        out.append(f"  seq {', '.join(map(str, step.missing_inputs))}: no longer in the stream")
    text = "\n".join(out) + "\n\n"
    if step.snapshot is not None:
        text += snapshot_yaml(step.snapshot)
    if step.decision is not None and step.replayed is not None:
        text += _decision_block(
            "decision (today's code)", step.replayed.commands, step.decision.rules, step.decision.wake_at
        )
        text += "why (rules that fired, in order):\n" + "".join(
            f"  - {r}\n" for r in step.decision.rules or ("(none)",)
        )
        if step.withheld:
            text += "withheld by the worker (an identical command was in flight):\n" + "".join(
                f"  - {describe(c)}\n" for c in step.withheld_commands()
            )
    else:
        text += f"decision: reconcile raised {step.error}\n"
    if step.verdict != "match":
        text += _decision_block("recorded decision", step.recorded.commands, step.recorded.rules, step.recorded.wake_at)
        text += "diff:\n" + "".join(f"  {line}\n" for line in step.diff)
    else:
        text += "recorded decision: the same" + (f" ({step.logic_change})" if step.logic_change else "") + "\n"
    return text


def snapshot_yaml(snapshot: Snapshot) -> str:
    """``snapshot (revision R):`` and the entries as YAML (kinds and names sorted)."""
    entries = {
        kind: {name: snapshot.entries[kind][name] for name in sorted(snapshot.entries[kind])}
        for kind in sorted(snapshot.entries)
    }
    return f"snapshot (revision {snapshot.revision}):\n" + _indent(_yaml(entries) if entries else "{}\n")


def divergence_rules(step: ReplayStep) -> tuple[str, ...]:
    """The rules a divergence is attributed to: those that changed, else all of today's."""
    today = step.replayed.rules if step.replayed is not None else ()
    changed = tuple(sorted(set(today) ^ set(step.recorded.rules)))
    return changed or today or ("(no rule)",)


def render_rehearsal(results: Iterable[ReplayResult], *, since: datetime | None) -> str:
    """The ``--all`` summary: divergences by kind and by rule, then the diverged keys."""
    results = list(results)
    window = f" with activity since {stamp(since)}" if since else ""
    steps = sum(len(r.steps) for r in results)
    diverged = [r for r in results if r.divergences]
    lines = [
        f"replayed {len(results)} key(s){window}: {steps} decision(s), logic_version {LOGIC_VERSION}",
        f"  {len(diverged)} key(s) diverged ({sum(len(r.divergences) for r in results)} step(s)), "
        f"{sum(r.unverifiable for r in results)} step(s) unverifiable",
        "",
        "by kind:",
    ]
    for kind_name in sorted({r.key.kind for r in results}):
        of_kind = [r for r in results if r.key.kind == kind_name]
        lines.append(
            f"  {kind_name:<11} {len(of_kind)} key(s), {sum(len(r.steps) for r in of_kind)} decision(s), "
            f"{sum(1 for r in of_kind if r.divergences)} diverged key(s), "
            f"{sum(len(r.divergences) for r in of_kind)} diverged step(s)"
        )
    by_rule: Counter[tuple[str, str]] = Counter()
    keys_by_rule: dict[tuple[str, str], set[str]] = {}
    for result in diverged:
        for step in result.steps:
            if step.diverged:
                for rule in divergence_rules(step):
                    by_rule[(result.key.kind, rule)] += 1
                    keys_by_rule.setdefault((result.key.kind, rule), set()).add(str(result.key))
    if by_rule:
        lines += ["", "by rule:"]
        for (kind, rule), count in sorted(by_rule.items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"  {kind:<11} {rule:<40} {count} step(s) in {len(keys_by_rule[(kind, rule)])} key(s)")
        lines += ["", "diverged keys:"]
        for result in diverged:
            lines.append(f"  {result.key}: step(s) {', '.join(str(d.step) for d in result.divergences)}")
    return "\n".join(lines) + "\n"
