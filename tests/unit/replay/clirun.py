"""Running ``raybus replay`` in-process with captured output, a fixed clock and injected code."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from schema.decision import ReconcileFn
from schema.keys import KeyKind
from services.replay.cli import Environment, run

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class CliRun:
    code: int
    out: str
    err: str


def replay_cli(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    reconcilers: Mapping[KeyKind, ReconcileFn] | None = None,
    now: datetime = NOW,
) -> CliRun:
    """``raybus replay <argv>`` with an empty environment unless given."""
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Environment(env=dict(env or {}), now=now, out=out, err=err, reconcilers=reconcilers))
    return CliRun(code=code, out=out.getvalue(), err=err.getvalue())


async def replay_cli_async(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    reconcilers: Mapping[KeyKind, ReconcileFn] | None = None,
    now: datetime = NOW,
) -> CliRun:
    """:func:`replay_cli` from async tests (the CLI runs its own event loop, so in a thread)."""
    return await asyncio.to_thread(lambda: replay_cli(argv, env=env, reconcilers=reconcilers, now=now))
