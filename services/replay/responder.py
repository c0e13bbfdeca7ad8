"""Answering replay requests on the bus: a reconciler replays a key's history with the code it runs.

The status service's console has no reconcile code (services meet on the bus), so it asks on
``subjects.REPLAY_SUBJECT``; one reconciler of the queue group reads the key's recorded history with
direct gets (no consumer, nothing changes on the bus), replays it off the event loop and answers with a
``schema.replayview.ReplayView``. A request that cannot be served gets a view carrying ``error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from schema import subjects
from schema.config import OperatorConfig
from schema.decision import ReconcileFn
from schema.keys import KEY_KINDS, KeyKind, ReconcileKey
from schema.replayview import ReplayRequest, ReplayStepView, ReplayView
from services.reconciler.worker.decide import LOGIC_VERSION
from services.replay.compare import describe
from services.replay.history import KeyHistory
from services.replay.render import render_step_detail
from services.replay.replayer import Replayer, ReplayStep, StepFilter
from services.replay.source import read_history
from services.runtime.bus import flush_sent
from services.runtime.errors import RaybusError
from services.runtime.topology import when_answered

log = logging.getLogger(__name__)

_request: msgspec.json.Decoder[ReplayRequest] = msgspec.json.Decoder(ReplayRequest)


def step_view(step: ReplayStep) -> ReplayStepView:
    """The contract's view of one replayed step."""
    replayed = step.replayed
    return ReplayStepView(
        index=step.index,
        batch_seq=step.batch_seq,
        issued_at=step.issued_at,
        uid=step.uid,
        verdict=step.verdict,
        inputs=len(step.inputs),
        recorded=[describe(c) for c in step.recorded.commands],
        replayed=[describe(c) for c in replayed.commands] if replayed is not None else [],
        rules=list(step.decision.rules) if step.decision is not None else [],
        recorded_rules=list(step.recorded.rules),
        diff=list(step.diff),
        error=step.error,
    )


def replay_view(
    history: KeyHistory,
    request: ReplayRequest,
    *,
    config: OperatorConfig,
    reconcilers: Mapping[KeyKind, ReconcileFn],
) -> ReplayView:
    """Replay ``history`` as ``request`` asks (pure CPU: callers run it off the event loop)."""
    detail_wanted = request.step is not None
    replayer = Replayer(
        config=config, reconcilers=reconcilers, only=StepFilter(uid=request.uid), keep_snapshots=detail_wanted
    )
    steps = list(replayer.iter_steps(history))
    detail = ""
    if detail_wanted:
        chosen = next((s for s in steps if s.index == request.step), None)
        if chosen is None:
            return _failed(request, f"no step {request.step} (the history has {len(history.decisions)})")
        detail = render_step_detail(chosen, history, total=len(history.decisions))
    return ReplayView(
        kind=request.kind,
        namespace=request.namespace,
        name=request.name,
        steps=[step_view(s) for s in steps],
        detail=detail,
        logic_version=LOGIC_VERSION,
    )


def _failed(request: ReplayRequest, error: str) -> ReplayView:
    return ReplayView(kind=request.kind, namespace=request.namespace, name=request.name, error=error)


def _key(request: ReplayRequest) -> ReconcileKey:
    kind = next((k for k in KEY_KINDS if k == request.kind), None)
    if kind is None:
        raise ValueError(f"unknown kind {request.kind!r} (one of {', '.join(KEY_KINDS)})")
    return ReconcileKey(kind=kind, namespace=request.namespace, name=request.name)


async def serve_replays(
    nc: Client, *, config: OperatorConfig, reconcilers: Mapping[KeyKind, ReconcileFn]
) -> Subscription:
    """Answer replay requests until the subscription is drained (with the connection)."""

    async def handle(msg: Msg) -> None:
        try:
            request = _request.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            await msg.respond(msgspec.json.encode(ReplayView(kind="", namespace="", name="", error=str(exc))))
            return
        try:
            history = await read_history(nc, _key(request))
            view = await asyncio.to_thread(replay_view, history, request, config=config, reconcilers=reconcilers)
        except (RaybusError, ValueError) as exc:
            view = _failed(request, str(exc))
        except Exception as exc:  # a replay that crashes must answer, not leave the console waiting
            log.exception("replay of %s/%s/%s failed", request.kind, request.namespace, request.name)
            view = _failed(request, f"replay failed: {type(exc).__name__}: {exc}")
        await msg.respond(msgspec.json.encode(view))

    subscription = await nc.subscribe(subjects.REPLAY_SUBJECT, queue=subjects.REPLAY_QUEUE, cb=handle)
    # answering from now on, not from whenever the server sees the subscription; a nats-server restarting
    # meanwhile delays the start instead of ending the process
    await when_answered(lambda: flush_sent(nc), "replay responder")
    return subscription
