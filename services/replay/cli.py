"""``raybus replay``: replay a key's recorded history through today's reconcile and show where it differs.

Usage::

    raybus replay KIND NAMESPACE/NAME [--uid UID] [--since TIME] [--until TIME] [--nats-url URL]
                  [--step N | --at TIME | --batch-seq SEQ] [--divergences-only] [--fail-fast]
    raybus replay --from-file FILE [same options]
    raybus replay --all [--since 24h] [--until TIME] [--fail-fast]
    raybus replay export KIND NAMESPACE/NAME -o FILE [--format json|yaml]

TIME is RFC 3339 (``2025-03-01T12:00:00Z``) or an age (``90s``, ``30m``, ``24h``, ``7d``). ``NAME`` alone
means namespace ``default``.

Operator configuration: replay assumes the operator ran with the configuration given here. Live replays
use the current settings (``RAYBUS_FEATURE_GATES``, KubeRay's switch variables, ``RAYBUS_OPERATOR_CONFIG``)
with ``--feature-gates`` / ``--operator-config`` on top; a file replays with the configuration recorded
in it unless ``--config current``. A history recorded under other gates diverges for that reason alone.

Exit codes: 0 every decision reproduced (unverifiable steps included), 1 a divergence, 2 usage error,
unreachable NATS, or nothing recorded for the key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

import nats.errors
import nats.js.errors

from schema import times
from schema.config import OperatorConfig
from schema.decision import ReconcileFn
from schema.keys import KEY_KINDS, KeyKind, ReconcileKey
from services.replay.archive import FileFormat, read_history_file, to_file, write_history
from services.replay.history import KeyHistory
from services.replay.render import render_rehearsal, render_step_detail, render_timeline
from services.replay.replayer import Replayer, ReplayStep, StepFilter
from services.runtime import bus, endpoints
from services.runtime.endpoints import stack_endpoint
from services.runtime.errors import PermanentError, RaybusError, ReplayDivergence, RetryableError
from services.runtime.settings import NatsSettings, load_pod_defaults, load_settings, parse_feature_gates

EXIT_OK = 0
EXIT_DIVERGED = 1
EXIT_ERROR = 2

NATS_URL_ENV = "RAYBUS_NATS_URL"
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_time(text: str, *, now: datetime) -> datetime:
    """RFC 3339, or an age (``24h``) counted back from ``now``.

    Raises:
        PermanentError: neither.
    """
    match = _AGE.match(text.strip())
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    moment = times.parse_time(text)
    if moment is None:
        raise PermanentError(f"{text!r}: expected RFC 3339 or an age such as 30m, 24h, 7d")
    return moment


def parse_kind(text: str) -> KeyKind:
    """``RayCluster``, ``raycluster`` or ``rayclusters``.

    Raises:
        PermanentError: not a custom resource raybus reconciles.
    """
    wanted = text.lower().removesuffix("s")
    for kind in KEY_KINDS:
        if kind.lower() == wanted:
            return kind
    raise PermanentError(f"unknown kind {text!r} (one of {', '.join(KEY_KINDS)})")


def parse_key(kind: str, ref: str) -> ReconcileKey:
    """``KIND`` and ``NAMESPACE/NAME`` (or ``NAME`` in ``default``).

    Raises:
        PermanentError: malformed.
    """
    namespace, _, name = ref.partition("/") if "/" in ref else ("default", "/", ref)
    if not namespace or not name or "/" in name:
        raise PermanentError(f"{ref!r}: expected NAMESPACE/NAME")
    return ReconcileKey(kind=parse_kind(kind), namespace=namespace, name=name)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nats-url", help="NATS server URL(s) [RAYBUS_NATS_URL, else the stack of `raybus up`]")
    parser.add_argument("--state-dir", help="where `raybus up` keeps endpoints.json [RAYBUS_STATE_DIR, .raybus]")
    parser.add_argument("--nats-creds", help="NATS credentials file [RAYBUS_NATS_CREDS]")
    parser.add_argument(
        "--connect-timeout", type=float, default=5.0, help="seconds to reach NATS before giving up (default 5)"
    )
    parser.add_argument("--feature-gates", help="KubeRay feature gates replay assumes, e.g. RayCronJob=true")
    parser.add_argument("--operator-config", help="KubeRay Configuration file replay assumes")


def replay_parser() -> argparse.ArgumentParser:
    """Flags of ``raybus replay`` (the export form has its own parser)."""
    parser = argparse.ArgumentParser(
        prog="raybus replay",
        description="Replay a key's recorded inputs through today's reconcile and compare with the recorded "
        "decisions. `raybus replay export KIND NS/NAME -o FILE` writes a history file.",
    )
    parser.add_argument("kind", nargs="?", help="RayCluster, RayJob, RayService or RayCronJob")
    parser.add_argument("ref", nargs="?", metavar="NAMESPACE/NAME", help="the custom resource")
    parser.add_argument("--uid", help="only the incarnation with this uid (a re-created name is a new uid)")
    parser.add_argument("--since", help="only decisions at or after TIME (RFC 3339 or an age: 24h)")
    parser.add_argument("--until", help="only decisions at or before TIME")
    parser.add_argument("--from-file", type=Path, help="replay an exported history (no NATS needed)")
    parser.add_argument("--all", action="store_true", help="every key with recent activity (default --since 24h)")
    show = parser.add_mutually_exclusive_group()
    show.add_argument("--step", type=int, help="show step N in full (snapshot, decision, rules)")
    show.add_argument("--at", help="show in full the last step at or before TIME")
    show.add_argument(
        "--batch-seq", type=int, help="show in full the step of the batch stored at this RAYBUS_COMMANDS sequence"
    )
    parser.add_argument("--divergences-only", action="store_true", help="print only steps that do not match")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first divergence")
    parser.add_argument(
        "--config",
        choices=("recorded", "current"),
        help="operator config for --from-file: the one recorded in the file (default) or the current one",
    )
    _add_common(parser)
    return parser


def export_parser() -> argparse.ArgumentParser:
    """Flags of ``raybus replay export``."""
    parser = argparse.ArgumentParser(prog="raybus replay export", description="Write a key's history to a file.")
    parser.add_argument("kind", help="RayCluster, RayJob, RayService or RayCronJob")
    parser.add_argument("ref", metavar="NAMESPACE/NAME", help="the custom resource")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the file (.json or .yaml)")
    parser.add_argument("--format", choices=("json", "yaml"), help="default: from the file name (JSON)")
    parser.add_argument("--note", default="", help="free text stored in the file (what the history shows)")
    _add_common(parser)
    return parser


@dataclass(frozen=True)
class Environment:
    """What the CLI reads from outside: variables, the clock, the output streams, and the code replayed.

    ``reconcilers`` None means this build's (``default_reconcilers``); tests pass altered ones.
    """

    env: Mapping[str, str]
    now: datetime
    out: TextIO
    err: TextIO
    reconcilers: Mapping[KeyKind, ReconcileFn] | None = None

    def replayer(self, config: OperatorConfig, only: StepFilter, *, keep_snapshots: bool = False) -> Replayer:
        """A replayer of this environment's code."""
        if self.reconcilers is None:
            return Replayer(config=config, only=only, keep_snapshots=keep_snapshots)
        return Replayer(config=config, reconcilers=self.reconcilers, only=only, keep_snapshots=keep_snapshots)


def current_config(
    args: argparse.Namespace, env: Mapping[str, str], base: OperatorConfig | None = None
) -> OperatorConfig:
    """The operator configuration replay assumes: ``base`` (or the current settings), flags on top.

    Raises:
        PermanentError: a gate or config file that does not parse.
    """
    config = base if base is not None else load_settings(env).operator
    if args.feature_gates:
        config = OperatorConfig(
            gates=parse_feature_gates(args.feature_gates, config.gates),
            switches=config.switches,
            pod_defaults=config.pod_defaults,
            version=config.version,
        )
    if args.operator_config:
        config = OperatorConfig(
            gates=config.gates,
            switches=config.switches,
            pod_defaults=load_pod_defaults(args.operator_config),
            version=config.version,
        )
    return config


def _nats_settings(args: argparse.Namespace, env: Mapping[str, str]) -> NatsSettings:
    nats = load_settings(env).nats
    url = stack_endpoint(
        endpoints.NATS_URL, flag=args.nats_url, env_var=NATS_URL_ENV, state_dir_flag=args.state_dir, env=env
    )
    return NatsSettings(
        url=url or nats.url,
        creds_file=args.nats_creds or nats.creds_file,
        user=nats.user,
        password=nats.password,
        connect_timeout=min(nats.connect_timeout, args.connect_timeout),
    )


async def _with_nats(
    args: argparse.Namespace, env: Mapping[str, str], keys: list[ReconcileKey] | None, since: datetime | None
) -> list[KeyHistory]:
    from services.replay.source import active_keys, read_history, read_window
    from services.runtime.bus import connect, redact_url

    settings = _nats_settings(args, env)
    try:
        # The services' connect retries forever (they must outlive a NATS restart); a tool gives up.
        nc = await asyncio.wait_for(connect(settings, name="raybus-replay"), args.connect_timeout)
    except TimeoutError as exc:
        raise RetryableError(
            f"cannot connect to NATS at {redact_url(settings.url)} within {args.connect_timeout:g}s"
        ) from exc
    try:
        window = await read_window(nc)
        if keys is None:
            keys = await active_keys(nc, since=since)
        return [await read_history(nc, key, window=window) for key in keys]
    except nats.js.errors.NotFoundError as exc:
        raise PermanentError(
            f"NATS at {redact_url(settings.url)} has no raybus streams ({exc.description or exc}): not raybus's bus? "
            "pass --nats-url, or --state-dir of `raybus up`"
        ) from exc
    except nats.errors.Error as exc:
        raise RetryableError(f"NATS at {redact_url(settings.url)}: {exc or type(exc).__name__}") from exc
    finally:
        await nc.close()


def _pick_step(steps: Sequence[ReplayStep], args: argparse.Namespace, now: datetime) -> ReplayStep:
    if args.batch_seq is not None:
        for step in steps:
            if step.batch_seq == args.batch_seq:
                return step
        raise PermanentError(f"no recorded decision at commands-stream sequence {args.batch_seq}")
    if args.step is not None:
        for step in steps:
            if step.index == args.step:
                return step
        raise PermanentError(
            f"no step {args.step} (the history has steps {steps[0].index}..{steps[-1].index})" if steps else "no steps"
        )
    at = parse_time(args.at, now=now)
    chosen = [step for step in steps if step.issued_at <= at]
    if not chosen:
        raise PermanentError(f"no decision at or before {args.at}")
    return chosen[-1]


def run_replay(args: argparse.Namespace, io: Environment) -> int:
    """``raybus replay`` with parsed arguments; returns the exit code.

    Raises:
        RaybusError: bad arguments, unreachable NATS, unreadable file.
    """
    since = parse_time(args.since, now=io.now) if args.since else None
    until = parse_time(args.until, now=io.now) if args.until else None
    if args.all:
        if args.kind or args.from_file or args.step is not None or args.at or args.batch_seq is not None:
            raise PermanentError("--all takes no KIND NAME, --from-file, --step, --at or --batch-seq")
        since = since or io.now - timedelta(hours=24)
        config = current_config(args, io.env)
        histories = asyncio.run(_with_nats(args, io.env, None, since))
        replayer = io.replayer(config, StepFilter(since=since, until=until))
        try:
            results = list(replayer.replay_iterator(histories, raise_on_divergence=args.fail_fast))
        except ReplayDivergence as exc:
            io.out.write(f"{exc}\n")
            return EXIT_DIVERGED
        io.out.write(render_rehearsal(results, since=since))
        return EXIT_DIVERGED if any(r.divergences for r in results) else EXIT_OK
    if args.from_file is not None:
        if args.kind:
            raise PermanentError("--from-file takes no KIND NAME")
        document = read_history_file(args.from_file)
        history = document.history()
        use_recorded = args.config != "current" and document.operator_config is not None
        config = current_config(args, io.env, document.operator_config if use_recorded else None)
        config_note = f"recorded in {args.from_file.name}" if use_recorded else "current settings (env and flags)"
    else:
        if not args.kind or not args.ref:
            raise PermanentError("give KIND NAMESPACE/NAME, --from-file FILE or --all")
        key = parse_key(args.kind, args.ref)
        config = current_config(args, io.env)
        config_note = "current settings (env and flags)"
        history = asyncio.run(_with_nats(args, io.env, [key], None))[0]
    config_note += "; replay assumes the operator ran with the same configuration"
    if not history.decisions:
        io.err.write(f"raybus replay: no recorded decision for {history.key} ({len(history.inputs)} input(s))\n")
        return EXIT_ERROR
    detail = args.step is not None or args.at is not None or args.batch_seq is not None
    replayer = io.replayer(config, StepFilter(uid=args.uid, since=since, until=until), keep_snapshots=detail)
    if detail:
        steps = list(replayer.iter_steps(history))
        if not steps:
            raise PermanentError("no recorded decision matches --uid/--since/--until")
        step = _pick_step(steps, args, io.now)
        io.out.write(render_step_detail(step, history, total=len(history.decisions)))
        return EXIT_DIVERGED if step.diverged else EXIT_OK
    try:
        result = replayer.replay_history(history, raise_on_divergence=args.fail_fast)
    except ReplayDivergence as exc:
        io.out.write(f"{exc}\n")
        return EXIT_DIVERGED
    if not result.steps:
        raise PermanentError(
            f"no recorded decision of {history.key} matches --uid/--since/--until "
            f"(uids: {', '.join(result.incarnations) or 'none'})"
        )
    io.out.write(render_timeline(result, history, config_note=config_note, only_divergences=args.divergences_only))
    return EXIT_DIVERGED if result.divergences else EXIT_OK


def run_export(args: argparse.Namespace, io: Environment) -> int:
    """``raybus replay export`` with parsed arguments.

    Raises:
        RaybusError: bad arguments, unreachable NATS, unwritable file.
    """
    from services.runtime.bus import redact_url

    key = parse_key(args.kind, args.ref)
    config = current_config(args, io.env)
    history = asyncio.run(_with_nats(args, io.env, [key], None))[0]
    if not history.inputs and not history.decisions:
        io.err.write(f"raybus replay export: nothing recorded for {key}\n")
        return EXIT_ERROR
    document = to_file(
        history,
        exported_at=io.now,
        operator_config=config,
        source=redact_url(_nats_settings(args, io.env).url),
        note=args.note,
    )
    fmt: FileFormat | None = args.format
    try:
        write_history(args.output, document, fmt)
    except OSError as exc:
        raise PermanentError(f"{args.output}: {exc}") from exc
    io.out.write(f"wrote {args.output}: {key}, {len(history.inputs)} input(s), {len(history.decisions)} decision(s)\n")
    return EXIT_OK


def run(argv: Sequence[str], io: Environment) -> int:
    """Parse and run; every raybus error becomes a message and exit code 2."""
    exporting = bool(argv) and argv[0] == "export"
    parser = export_parser() if exporting else replay_parser()
    args = parser.parse_args(list(argv[1:] if exporting else argv))
    try:
        return run_export(args, io) if exporting else run_replay(args, io)
    except (PermanentError, RetryableError, RaybusError) as exc:
        io.err.write(f"raybus replay: {exc}\n")
        return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """``raybus replay ...`` (the CLI dispatches here with the arguments after ``replay``)."""
    logging.basicConfig(format="raybus replay: %(message)s", level=logging.WARNING)
    # The connection's own retries end in one clear error; their warnings would only repeat it.
    bus.log.setLevel(logging.ERROR)
    io = Environment(env=dict(os.environ), now=datetime.now(UTC), out=sys.stdout, err=sys.stderr)
    return run(list(sys.argv[1:] if argv is None else argv), io)


if __name__ == "__main__":
    raise SystemExit(main())
