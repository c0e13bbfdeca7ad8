"""The watcher's pipeline metrics on its ``/metrics``: the applier, the informers and the dashboard prober.

- ``raybus_applier_queue_depth``: command batches accepted and waiting behind their key's running batch;
- ``raybus_applier_calls_total{verb, outcome}``: commands executed (API writes, dashboard calls), by verb
  and outcome (``applied``, ``failed``, ``denied``, ...);
- ``raybus_applier_rate_limit_wait_seconds``: how long a request waited for a token of ``--qps``/``--burst``;
- ``raybus_informer_events_total{resource, type}``: watch events received (ADDED, MODIFIED, DELETED);
- ``raybus_informer_relists_total{resource}``: complete lists (at start and after a 410);
- ``raybus_projection_repairs_total{kind, reason}``: objects a drift check found wrong in the projection
  and wrote again (``missing``, ``stale``, ``vanished``, ``lost``, ``orphaned``; ``overwritten``: a
  replayed write found its entry gone back to an older version; see ``projection``);
- ``raybus_projection_folded_total{kind}``: versions of an object left to a later version queued behind
  them, never written (``projection``);
- ``raybus_informer_lag_seconds{resource}``: from receiving a batch of watch events to its projection on
  the bus (KV written, events published);
- ``raybus_prober_polls_total{probe}``, ``raybus_prober_changes_total{probe}`` (answers that changed
  what is projected), ``raybus_prober_errors_total{probe}`` (dashboards that did not answer usefully).

Every module of the watcher records through these functions, so each name is spelled here only.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Protocol

from opentelemetry.metrics import CallbackOptions, Observation

from services.runtime.metrics import Tally, meter

_meter = meter(__name__)


class Queued(Protocol):
    """Something with batches waiting (the applier)."""

    def queued(self) -> int:
        """Batches waiting."""
        ...


_queues: weakref.WeakSet[Queued] = weakref.WeakSet()


def _queue_depth(_: CallbackOptions) -> Iterable[Observation]:
    yield Observation(sum(q.queued() for q in list(_queues)))


_meter.create_observable_gauge(
    "raybus_applier_queue_depth", callbacks=[_queue_depth], description="command batches waiting in the applier"
)
_calls = Tally(_meter, "raybus_applier_calls_total", description="commands executed, by verb and outcome")
_limiter_wait = _meter.create_histogram(
    "raybus_applier_rate_limit_wait_seconds", unit="s", description="wait for an API request token (--qps, --burst)"
)
_events = Tally(_meter, "raybus_informer_events_total", description="watch events received")
_relists = Tally(_meter, "raybus_informer_relists_total", description="complete lists of a resource")
_repairs = Tally(
    _meter,
    "raybus_projection_repairs_total",
    description="objects a drift check found wrong in the projection, repaired",
)
_folded = Tally(
    _meter, "raybus_projection_folded_total", description="object versions left to a later one queued behind them"
)
_informer_lag = _meter.create_histogram(
    "raybus_informer_lag_seconds", unit="s", description="from receiving watch events to their projection on the bus"
)
_polls = Tally(_meter, "raybus_prober_polls_total", description="dashboard polls")
_changes = Tally(_meter, "raybus_prober_changes_total", description="dashboard answers that changed")
_probe_errors = Tally(_meter, "raybus_prober_errors_total", description="dashboards without a useful answer")


def track_queue(owner: Queued) -> None:
    """Report ``owner.queued()`` in the queue depth while ``owner`` lives."""
    _queues.add(owner)


def command_executed(verb: str, outcome: str) -> None:
    """One command ran (or was refused) with ``outcome``."""
    _calls.add(1, {"verb": verb, "outcome": outcome})


def rate_limited(seconds: float) -> None:
    """A request waited ``seconds`` for a token (0 when one was there)."""
    _limiter_wait.record(seconds)


def watch_event(resource: str, event_type: str) -> None:
    """An informer received a watch event."""
    _events.add(1, {"resource": resource, "type": event_type})


def relisted(resource: str) -> None:
    """An informer listed its resource completely."""
    _relists.add(1, {"resource": resource})


def repaired(kind: str, reason: str) -> None:
    """A drift check found one object wrong in the projection (``reason``) and wrote it again."""
    _repairs.add(1, {"kind": kind, "reason": reason})


def folded(kind: str) -> None:
    """A version of an object was left to a later version queued behind it, never written."""
    _folded.add(1, {"kind": kind})


def projected(resource: str, seconds: float) -> None:
    """A batch of an informer's events reached the bus ``seconds`` after it was received."""
    _informer_lag.record(seconds, {"resource": resource})


def polled(probe: str, *, changed: bool, error: bool) -> None:
    """The prober polled one target."""
    labels = {"probe": probe}
    _polls.add(1, labels)
    # Adding 0 keeps a probe's series present from its first poll on, so a rate over it is 0, not absent.
    _changes.add(1 if changed else 0, labels)
    _probe_errors.add(1 if error else 0, labels)
