"""``raybus history KIND NAMESPACE/NAME [--uid UID] [--json]``: a custom resource's recorded timeline.

It reads the status service's HTTP API, never Kubernetes, so it works after the resource is deleted.
Without ``--uid`` it shows the latest incarnation of that name (a re-created RayJob is a new uid; pass
an older uid from ``/v1/resources`` to see a previous life). ``NAME`` alone means namespace ``default``.

Where the API is: ``--status-url``, else ``RAYBUS_STATUS_URL``, else the ``status_url`` that ``raybus up``
wrote to ``<state dir>/endpoints.json`` (``--state-dir``, else ``RAYBUS_STATE_DIR``, else ``.raybus``).

Output: a header (kind, namespace/name, uid, created, deleted, status; for a RayService also its view:
active, pending and serving clusters, traffic, upgrades, rollbacks) and one row per transition (time,
field, from → to, reason, message, short trace id); for a RayCronJob, then its latest scheduled runs, each
with the RayJob it created and that RayJob's current status (``raybus history rayjob NS/RAYJOB`` shows a
run's own timeline). ``--json`` prints the API's ``History`` document (a RayCronJob's runs as JSON:
``GET /v1/raycronjobs/NS/NAME/runs``).
Exit codes: 0 found, 1 not in the history, 2 usage error or API unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TextIO
from urllib.parse import quote, urlencode

import msgspec

from kubeaccess.asynchttp import AsyncHttp, HttpError
from schema.times import format_time_ms
from services.runtime import endpoints
from services.runtime.endpoints import stack_endpoint
from services.runtime.errors import PermanentError, RetryableError
from services.status.api import MAX_LIMIT
from services.status.kinds import KINDS, parse_kind
from services.status.responses import ErrorOut, History, RayServiceOut, RunOut, RunsOut

STATUS_URL_ENV = "RAYBUS_STATUS_URL"
REQUEST_TIMEOUT = 10.0
"""Seconds for the whole API call."""
_MESSAGE_WIDTH = 60
_history_decoder: msgspec.json.Decoder[History] = msgspec.json.Decoder(History)
_runs_decoder: msgspec.json.Decoder[RunsOut] = msgspec.json.Decoder(RunsOut)
_error_decoder: msgspec.json.Decoder[ErrorOut] = msgspec.json.Decoder(ErrorOut)


class NotInHistory(Exception):
    """The API answered 404."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``raybus history``."""
    parser.add_argument("kind", help="RayJob, RayService, RayCluster or RayCronJob (any case, or plural)")
    parser.add_argument("ref", metavar="NAMESPACE/NAME", help="the custom resource (NAME alone: namespace default)")
    parser.add_argument("--uid", help="a specific incarnation (default: the latest of that name)")
    parser.add_argument("--json", action="store_true", help="print the History document as JSON")
    parser.add_argument("--status-url", help="base URL of the status API [RAYBUS_STATUS_URL]")
    parser.add_argument("--state-dir", help="where `raybus up` keeps endpoints.json [RAYBUS_STATE_DIR, .raybus]")


def resolve_status_url(*, flag: str | None, state_dir: str | None, env: Mapping[str, str]) -> str:
    """The status API's base URL (see the module docstring for the order).

    Raises:
        PermanentError: none of the sources names one.
    """
    url = stack_endpoint(endpoints.STATUS_URL, flag=flag, env_var=STATUS_URL_ENV, state_dir_flag=state_dir, env=env)
    if not url:
        where = endpoints.state_dir(state_dir, env) / endpoints.ENDPOINTS_FILE
        raise PermanentError(f"no status API: pass --status-url, set {STATUS_URL_ENV}, or run `raybus up` (no {where})")
    return url.rstrip("/")


def split_ref(ref: str) -> tuple[str, str]:
    """``ns/name`` → ``(ns, name)``; ``name`` → ``("default", name)``.

    Raises:
        PermanentError: more than one slash or an empty part.
    """
    namespace, _, name = ref.partition("/") if "/" in ref else ("default", "/", ref)
    if not namespace or not name or "/" in name:
        raise PermanentError(f"{ref!r}: expected NAMESPACE/NAME")
    return namespace, name


async def _fetch(status_url: str, path: str, params: dict[str, str]) -> bytes:
    """GET ``path`` from the status API; the body of a 200 answer.

    Raises:
        NotInHistory: the API answered 404 (its message explains).
        RetryableError: the API is unreachable or answered with another error.
    """
    client = AsyncHttp(keep_alive=False)
    url = f"{status_url}{path}?{urlencode(params)}" if params else status_url + path
    try:
        response = await client.request("GET", url, timeout=REQUEST_TIMEOUT)
    except (HttpError, TimeoutError) as exc:
        raise RetryableError(f"cannot reach the status API at {status_url}: {exc or type(exc).__name__}") from exc
    finally:
        await client.close()
    body, status = response.body, response.status
    if status == 200:
        return body
    try:
        message = _error_decoder.decode(body).message
    except msgspec.DecodeError:
        message = body[:200].decode(errors="replace")
    if status == 404:
        raise NotInHistory(message)
    raise RetryableError(f"status API answered {status}: {message}")


async def fetch_history(status_url: str, *, kind: str, namespace: str, name: str, uid: str | None = None) -> History:
    """GET the resource's timeline from the status API.

    Raises:
        NotInHistory: the API has no such resource (its message explains).
        RetryableError: the API is unreachable or answered with an error.
    """
    path = f"/v1/resources/{quote(kind)}/{quote(namespace)}/{quote(name)}/transitions"
    params = {"limit": str(MAX_LIMIT), **({"uid": uid} if uid else {})}
    history = _history_decoder.decode(await _fetch(status_url, path, params))
    transitions = list(history.transitions)
    while history.next_after is not None:
        # The later pages of the same incarnation, whatever is recorded meanwhile.
        after = {"after": str(history.next_after), "uid": history.resource.uid}
        history = _history_decoder.decode(await _fetch(status_url, path, {**params, **after}))
        transitions += history.transitions
    return msgspec.structs.replace(history, transitions=transitions)


async def fetch_runs(status_url: str, *, namespace: str, name: str, uid: str) -> RunsOut:
    """GET a RayCronJob incarnation's latest scheduled runs, each linked to its RayJob.

    Raises:
        NotInHistory: the API has no such RayCronJob.
        RetryableError: the API is unreachable or answered with an error.
    """
    path = f"/v1/raycronjobs/{quote(namespace)}/{quote(name)}/runs"
    return _runs_decoder.decode(await _fetch(status_url, path, {"uid": uid}))


def _time(value: datetime | None) -> str:
    return "-" if value is None else format_time_ms(value)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _aligned(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """``header`` and ``rows`` as left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]


def _rayservice_lines(view: RayServiceOut | None) -> list[str]:
    """The RayService view under the header: clusters, traffic, upgrades and rollbacks."""
    if view is None:
        return []
    pending = view.pending_cluster or "-"
    if view.pending_cluster and view.pending_traffic_percent is not None:
        pending += f" ({view.pending_traffic_percent}% of the traffic)"
    last = f", the last took {view.last_upgrade_seconds:.1f}s" if view.last_upgrade_seconds is not None else ""
    rollback = f" (last: {view.rollback_status})" if view.rollback_status else ""
    return [
        f"  ready    {view.ready_reason or '-'} (first ready {_time(view.ready_at)})",
        f"  active   {view.active_cluster or '-'}",
        f"  pending  {pending}",
        f"  serving  {view.serving_cluster or '-'}",
        f"  clusters {view.clusters_created} created, {view.clusters_deleted} deleted",
        f"  upgrades {view.upgrades} completed{last}; {view.rollbacks} rollback(s){rollback}",
    ]


def render_table(history: History) -> str:
    """The human-readable timeline: a header, then one aligned row per transition."""
    r = history.resource
    lines = [
        f"{r.kind} {r.namespace}/{r.name}",
        f"  uid      {r.uid}",
        f"  created  {_time(r.first_seen)}",
        f"  deleted  {_time(r.deleted_at)}",
        f"  status   {r.status or '-'}",
        *_rayservice_lines(r.rayservice),
        "",
    ]
    header = ("AT", "FIELD", "FROM → TO", "REASON", "MESSAGE", "TRACE")
    rows = [
        (
            _time(t.at),
            t.field,
            f"{t.from_value or '-'} → {t.to_value or '-'}",
            t.reason or "-",
            _clip(t.message, _MESSAGE_WIDTH) or "-",
            t.trace_id[:8] or "-",
        )
        for t in history.transitions
    ]
    lines += _aligned(header, rows)
    if not rows:
        lines.append("(no transitions recorded)")
    else:
        lines += ["", replay_hint(history)]
    return "\n".join(lines)


def replay_hint(history: History) -> str:
    """How to replay the decision behind a row: a transition's ``at`` is its decision's ``now``."""
    r = history.resource
    last = _time(history.transitions[-1].at)
    return (
        f"replay from a row: raybus replay {r.kind} {r.namespace}/{r.name} --uid {r.uid} --at <AT>"
        f"   (the last: --at {last})"
    )


def _run_status(run: RunOut) -> str:
    if not run.rayjob_name:
        return "-"
    if run.rayjob_uid is None:
        return "(not in the history yet)"
    status = "/".join(s for s in (run.deployment_status, run.job_status) if s) or "-"
    return f"{status} (deleted)" if run.rayjob_deleted_at is not None else status


def render_runs(runs: RunsOut) -> str:
    """A RayCronJob's scheduled runs: one row per tick with its RayJob and that RayJob's status."""
    shown = f"the latest {len(runs.runs)} of {runs.total}" if runs.total > len(runs.runs) else str(runs.total)
    lines = [f"Runs ({shown})"]
    header = ("SCHEDULED", "OUTCOME", "RAYJOB", "UID", "STATUS")
    rows = [
        (
            _time(run.scheduled_at),
            run.outcome or "-",
            run.rayjob_name or "-",
            (run.rayjob_uid or "-")[:8],
            _run_status(run),
        )
        for run in runs.runs
    ]
    if rows:
        lines += _aligned(header, rows)
        namespace = runs.resource.namespace
        lines.append(f"(a run's own timeline: raybus history rayjob {namespace}/RAYJOB)")
    else:
        lines.append("(no runs recorded)")
    return "\n".join(lines)


async def run(args: argparse.Namespace, *, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    """Execute ``raybus history`` with parsed ``args``; returns the exit code."""
    info = parse_kind(args.kind)
    if info is None:
        print(f"raybus history: unknown kind {args.kind!r} (one of {', '.join(k.kind for k in KINDS)})", file=err)
        return 2
    try:
        namespace, name = split_ref(args.ref)
        url = resolve_status_url(flag=args.status_url, state_dir=args.state_dir, env=env)
        history = await fetch_history(url, kind=info.kind, namespace=namespace, name=name, uid=args.uid)
    except NotInHistory as exc:
        print(f"raybus history: {exc}", file=err)
        return 1
    except (PermanentError, RetryableError) as exc:
        print(f"raybus history: {exc}", file=err)
        return 2
    if args.json:
        out.write(msgspec.json.format(msgspec.json.encode(history), indent=2).decode() + "\n")
        return 0
    text = render_table(history)
    if info.kind == "RayCronJob":
        try:
            runs = await fetch_runs(url, namespace=namespace, name=name, uid=history.resource.uid)
        except (NotInHistory, RetryableError) as exc:
            print(f"raybus history: {exc}", file=err)
            return 2
        text += "\n\n" + render_runs(runs)
    out.write(text + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``raybus history ...`` (the CLI dispatches here with the arguments after ``history``)."""
    parser = argparse.ArgumentParser(
        prog="raybus history", description="Print a custom resource's recorded state transitions."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return asyncio.run(run(args, env=os.environ, out=sys.stdout, err=sys.stderr))
