"""Comparing decisions and objects: readable command diffs and short field diffs.

A divergence is decided on command fingerprints (a digest of the whole command, in order) and
``wake_at``; this module also explains one in words. The id is part of the command when the decision was
recorded under today's logic version; under an older one the ids followed an older rule
(``decide.LOGIC_VERSION``), so commands are compared without them (``ids=False``). Commands that differ
are paired by verb and target, and a pair is shown as the fields that changed (the id among them); the
rest are shown as recorded-only or replay-only. Field diffs walk plain JSON data (dicts by key, lists by
index) and clip long values.

Not here: deciding what to compare (``replayer``) or printing (``render``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

import msgspec

from schema.messages import Command, command_target, command_verb
from schema.times import format_time_exact
from services.reconciler.worker.decide import Ids
from services.reconciler.worker.inflight import in_flight_key, target_key

VALUE_WIDTH: Final = 48
"""Characters of a value shown in a field diff before it is clipped."""
_IGNORED_PATHS: Final = frozenset({"metadata.resourceVersion", "metadata.managedFields"})
_MISSING: Final = object()
_deterministic: Final = msgspec.json.Encoder(order="deterministic")


def short_value(value: object, width: int = VALUE_WIDTH) -> str:
    """A value as compact JSON, clipped to ``width`` characters (``∅`` for an absent field)."""
    if value is _MISSING:
        return "∅"
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _walk(old: Any, new: Any, path: str, out: list[tuple[str, Any, Any]], ignored: frozenset[str]) -> None:
    if path in ignored or old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for name in dict.fromkeys([*old, *new]):
            child = f"{path}.{name}" if path else str(name)
            _walk(old.get(name, _MISSING), new.get(name, _MISSING), child, out, ignored)
        return
    if isinstance(old, list) and isinstance(new, list) and old and new:
        for index in range(max(len(old), len(new))):
            _walk(
                old[index] if index < len(old) else _MISSING,
                new[index] if index < len(new) else _MISSING,
                f"{path}[{index}]",
                out,
                ignored,
            )
        return
    out.append((path or ".", old, new))


def field_changes(old: Any, new: Any, *, ignored: Iterable[str] = _IGNORED_PATHS) -> list[tuple[str, Any, Any]]:
    """Leaf changes from ``old`` to ``new``: ``(path, old value, new value)``; absent is ``∅``."""
    out: list[tuple[str, Any, Any]] = []
    _walk(old, new, "", out, frozenset(ignored))
    return out


def field_diff(old: Any, new: Any, *, limit: int = 4, ignored: Iterable[str] = _IGNORED_PATHS) -> list[str]:
    """At most ``limit`` lines ``path: old → new``, then ``(+N more)``."""
    changes = field_changes(old, new, ignored=ignored)
    lines = [f"{path}: {short_value(a)} → {short_value(b)}" for path, a, b in changes[:limit]]
    if len(changes) > limit:
        lines.append(f"(+{len(changes) - limit} more)")
    return lines


def describe(command: Command) -> str:
    """``verb target`` of a command."""
    return f"{command_verb(command)} {command_target(command)}"


def _plain(command: Command) -> Any:
    return msgspec.to_builtins(command)


def fingerprint(command: Command) -> str:
    """Digest of the whole command, id included (two commands are equal iff their fingerprints are)."""
    return hashlib.blake2b(_deterministic.encode(command), digest_size=16).hexdigest()


def without_id(command: Command) -> Command:
    """``command`` with an empty id (its content alone)."""
    return msgspec.structs.replace(command, id="") if command.id else command


def same_command(expected: Command, actual: Command, *, ids: bool = True) -> bool:
    """Whether two commands are equal (their ids too, unless ``ids`` is False): struct equality first,
    which needs no encoding; their fingerprints only when it says no (a tuple where the record has a list).

    Struct equality is Python's: ``1``, ``1.0`` and ``True`` inside a body compare equal, so a change
    between those alone is not reported (a command whose encoding differs in nothing else)."""
    if not ids:
        expected, actual = without_id(expected), without_id(actual)
    return expected == actual or (expected.id == actual.id and fingerprint(expected) == fingerprint(actual))


def commands_equal(expected: Sequence[Command], actual: Sequence[Command], *, ids: bool = True) -> bool:
    """Equal command lists: the same commands (contents, and ids unless ``ids`` is False) in the same order."""
    return len(expected) == len(actual) and all(
        same_command(a, b, ids=ids) for a, b in zip(expected, actual, strict=True)
    )


@dataclass
class Published:
    """What a key's recorded decisions published so far: each command's in-flight key, by its id. A
    withheld command is recorded by the id of its in-flight twin, which this resolves to content."""

    keys: dict[str, str] = field(default_factory=dict)

    def add(self, commands: Iterable[Command]) -> None:
        """Remember the commands of one recorded batch."""
        for command in commands:
            self.keys[command.id] = in_flight_key(command)


class Split(NamedTuple):
    """Today's decision split as the worker split the recorded one (:func:`split_withheld`)."""

    commands: tuple[Command, ...]
    """Today's commands in order: those kept with their ids, those withheld as reconcile left them (the
    worker gives ids only to what it publishes)."""
    kept: tuple[Command, ...]
    """Today's kept commands, in order."""
    withheld: tuple[int, ...]
    """Positions in ``commands`` of today's withheld ones."""
    lacking: tuple[str, ...]
    """The suppressed ids today's decision lacks."""


def split_withheld(
    today: Sequence[Command],
    kept: Sequence[Command],
    suppressed: Sequence[str],
    published: Published,
    *,
    rule: Ids,
    ids: bool = True,
) -> Split:
    """Split today's commands (as reconcile decided them, without ids) like the worker split the recorded
    decision, giving ids by ``rule`` as the worker does: to every command it publishes, counting a command
    of no target among the identical ones before it even when it is withheld (``inflight.InFlight.filter``).

    The worker publishes a decision's commands minus those identical (``in_flight_key``) to one of its
    key still in flight, and records the id of that twin in ``suppressed``. Today's commands are walked in
    order: one equal to the next recorded (kept) command is kept; else one identical to the twin of a
    suppressed id is withheld; else, while suppressed ids remain that ``published`` cannot resolve (the
    twin aged out of the stream, or an older logic version recorded other ids), it is taken as withheld;
    else it is kept (and will show as a difference). A withheld command with a target is never encoded:
    its target is all the walk needs, and creates are the bulk of a scale-up's withheld commands; one
    without a target is counted, and named only when the next recorded command has no target either.
    """
    resolved: dict[str, list[str]] = {}
    unresolved: list[str] = []
    for twin in suppressed:
        key = published.keys.get(twin)
        if key is None:
            unresolved.append(twin)
        else:
            resolved.setdefault(key, []).append(twin)
    position = 0
    upcoming, upcoming_key = _upcoming(kept, position)
    commands: list[Command] = []
    kept_today: list[Command] = []
    withheld: list[int] = []
    for index, command in enumerate(today):
        key = target_key(command)
        content = ""
        counted: int | None = None
        candidate: Command | None = None
        if key is None:
            key, counted = rule.count(command)
            if upcoming is not None and upcoming_key is None:
                candidate = rule.name(command, key, counted)
        elif upcoming is not None and upcoming_key == key:
            candidate, content = rule.tentative(command)
        if candidate is not None and upcoming is not None and same_command(upcoming, candidate, ids=ids):
            position += 1
            upcoming, upcoming_key = _upcoming(kept, position)
        elif twins := resolved.get(key):
            twins.pop()
            candidate = None
        elif unresolved:
            unresolved.pop()
            candidate = None
        elif candidate is None and counted is not None:
            candidate = rule.name(command, key, counted)
        elif candidate is None:
            candidate, content = rule.tentative(command)
        if candidate is None:
            withheld.append(index)
            commands.append(command)
            continue
        if content:
            rule.claim(content)
        commands.append(candidate)
        kept_today.append(candidate)
    missing = [twin for twins in resolved.values() for twin in twins] + unresolved
    return Split(tuple(commands), tuple(kept_today), tuple(withheld), tuple(missing))


def _upcoming(kept: Sequence[Command], position: int) -> tuple[Command | None, str | None]:
    """The recorded command at ``position`` (None past the end) and its target key (None: it has none)."""
    if position >= len(kept):
        return None, None
    return kept[position], target_key(kept[position])


def command_diff(
    expected: Sequence[Command], actual: Sequence[Command], *, limit: int = 6, ids: bool = True
) -> list[str]:
    """Why two command lists differ, in lines (empty when they are equal; ids left out unless ``ids``)."""
    if commands_equal(expected, actual, ids=ids):
        return []
    if not ids:
        expected, actual = [without_id(c) for c in expected], [without_id(c) for c in actual]
    expected_prints = [fingerprint(c) for c in expected]
    actual_prints = [fingerprint(c) for c in actual]
    if sorted(expected_prints) == sorted(actual_prints):
        return ["same commands in a different order:", *(f"  {i + 1}. {describe(c)}" for i, c in enumerate(actual))]
    lines: list[str] = []
    only_expected = [c for c, p in zip(expected, expected_prints, strict=True) if p not in set(actual_prints)]
    only_actual = [c for c, p in zip(actual, actual_prints, strict=True) if p not in set(expected_prints)]
    unpaired: list[Command] = []
    for old in only_expected:
        label = describe(old)
        partner = next((c for c in only_actual if describe(c) == label), None)
        if partner is None:
            unpaired.append(old)
            continue
        only_actual.remove(partner)
        lines.append(f"~ {label}")
        lines.extend(f"    {line}" for line in field_diff(_plain(old), _plain(partner), limit=limit))
    lines.extend(f"- {describe(c)}  (recorded, not decided now)" for c in unpaired)
    lines.extend(f"+ {describe(c)}  (decided now, not recorded)" for c in only_actual)
    return lines


def wake_diff(expected: datetime | None, actual: datetime | None) -> list[str]:
    """A line when the wake-ups differ."""
    if expected == actual:
        return []
    shown = [format_time_exact(value) if value is not None else "none" for value in (expected, actual)]
    return [f"~ wake_at: {shown[0]} → {shown[1]}"]
