"""The dashboard prober: polls Ray dashboards of live RayJobs and publishes an Observation only on change.

Role: KubeRay re-reconciles every RayJob every 3 s to ask the dashboard for the job's status; raybus
reconciles when something happened. Every ``dashboard_poll_interval`` the prober asks each probe kind for
its targets (computed from the projection: which objects need polling), GETs the target's dashboard
path, and when the significant part of the answer differs from what is projected it writes the answer to
KV (entry kind ``OBS_RAY_JOB``, entry name = job id) and publishes an :class:`Observation` carrying that
write's revision on the key's events subject.

Probe kinds are data (``probekinds``: which projected kinds each rule reads, how to find targets,
how an answer becomes observation data, which fields matter). The rules themselves (what to poll for
which key, and what counts as a change) are the contract in ``schema.probes``, which reconcile uses too.
A target is a dashboard path or a pod's port (the RayService head's Serve proxy).

Scaling out: the prober replicas share the partitions through leases (group ``probe``,
``services.runtime.leases``); each polls the targets whose key is in a partition it holds
(``subjects.partition_of``), so N replicas poll disjoint sets and a dead replica's targets move with its
partitions.

Invariants: an unchanged answer publishes nothing; an unreachable dashboard is an observation too
(``{"http_status": N, "error": "..."}``) so reconcile can run its failure timers; the message id names the
change (:func:`observation_id`), so HA replicas publish each change once and an answer that returns to an
earlier value is published again.

Not here: dashboard URLs and tokens (``dashboard``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue
from opentelemetry.trace import Tracer

from schema import codec, subjects
from schema.messages import Observation
from schema.probes import ProbeTarget
from services.edge import pipeline_metrics
from services.edge.dashboard import DashboardAnswer, DashboardClient
from services.edge.probe.probekinds import PROBE_KINDS, ProbeKind
from services.runtime.aio import raise_if_cancelling
from services.runtime.bus import publish
from services.runtime.clock import Clock, utc_now
from services.runtime.errors import PermanentError
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.tracing import key_attributes, tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)

PROBE_CONCURRENCY: Final = 16
_json: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])


def observation_id(target: ProbeTarget, significant: Any, base: int) -> str:
    """De-duplication id of a change: the target, the KV revision ``base`` the change is made from (0: no
    entry) and a digest of what matters in the new answer. Replicas that see the same change publish it
    once; an answer that comes back to an earlier value (found, not found, found) is a new change, which
    an id of the answer alone would have JetStream drop as a duplicate within its window."""
    digest = hashlib.sha256(msgspec.json.encode(significant)).hexdigest()[:16]
    return f"obs/{target.key.token()}/{target.entry_kind}/{target.entry_name}/{base}/{digest}"


@dataclass(frozen=True)
class _Known:
    """What the prober knows of a target's KV entry: the significant part of the answer it holds and its
    revision (0: no entry)."""

    significant: Any
    revision: int


StateKey = tuple[str, str]
"""A target as the prober remembers its answers: the key's token and ``<entry kind>/<entry name>``."""


def state_key(target: ProbeTarget) -> StateKey:
    """How the prober names ``target`` in its memory of answers."""
    return (target.key.token(), f"{target.entry_kind}/{target.entry_name}")


def poll_order(
    pairs: list[tuple[ProbeKind, ProbeTarget]], answered: Mapping[StateKey, Any], unanswered: set[StateKey]
) -> list[tuple[ProbeKind, ProbeTarget]]:
    """``pairs`` with the targets that wait for a first or a good answer first (a new job, one a reconcile
    just submitted after a 404), in their order otherwise: a round over thousands of dashboards takes
    long, and what a reconcile waits for should not wait behind answers that stay the same."""

    def waiting(pair: tuple[ProbeKind, ProbeTarget]) -> bool:
        known = state_key(pair[1])
        return known not in answered or known in unanswered

    return sorted(pairs, key=lambda pair: not waiting(pair))


class ObjectSource(Protocol):
    """Where the prober reads the watched objects: the watcher's projection, or the KV it writes
    (``kvfacts``) in a process without informers."""

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """Every held object of one kind (as its probe rules read it)."""
        ...


class Prober:
    """Polls the dashboards of the projection's live jobs."""

    def __init__(
        self,
        js: JetStreamContext,
        source: ObjectSource,
        dashboard: DashboardClient,
        *,
        membership: Membership,
        interval: float,
        objects: KeyValue | None = None,
        probes: tuple[ProbeKind, ...] = PROBE_KINDS,
        clock: Clock = utc_now,
        tracer: Tracer | None = None,
    ) -> None:
        self._js = js
        self._source = source
        self._dashboard = dashboard
        self._interval = interval
        self._objects = objects
        self._probes = probes
        self._clock = clock
        self._tracer = tracer or _tracer
        self._last: dict[StateKey, _Known] = {}
        self._unanswered: set[StateKey] = set()
        self._slots = asyncio.Semaphore(PROBE_CONCURRENCY)
        self._membership = membership
        self._held: set[int] = set()
        self._leases = PartitionLeases(membership, "probe", start=self._hold, stop=self._let_go)
        self.published = 0
        self.polls = 0

    def _snapshot(self) -> dict[str, list[dict[str, Any]]]:
        kinds = dict.fromkeys(kind for probe in self._probes for kind in probe.kinds)
        return {kind: self._source.objects(kind) for kind in kinds}

    async def run(self, stop: asyncio.Event) -> None:
        """Hold a share of the partitions and poll their targets every ``interval`` seconds until ``stop``
        is set; then release the partitions."""
        leases = asyncio.create_task(self._leases.run(stop), name="prober-leases")
        try:
            while not stop.is_set():
                raise_if_cancelling()
                if leases.done():
                    leases.result()  # the lease loop ends only by stop, or by raising
                await self.poll_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._interval)
        finally:
            if not stop.is_set():
                leases.cancel()  # its own cleanup releases the partitions
            await asyncio.wait([leases])

    async def _hold(self, partition: int) -> None:
        self._held.add(partition)

    async def _let_go(self, partition: int) -> None:
        self._held.discard(partition)

    def _mine(self, target: ProbeTarget) -> bool:
        partition = subjects.partition_of(target.key, self._membership.partitions)
        return partition in self._held and self._leases.valid(partition)

    async def poll_once(self) -> None:
        """One round over every probe kind's current targets."""
        objects = self._snapshot()
        pairs: list[tuple[ProbeKind, ProbeTarget]] = []
        for kind in self._probes:
            try:
                pairs.extend((kind, target) for target in kind.targets(objects) if self._mine(target))
            except Exception:  # an object its rules did not foresee must not end the prober
                log.exception("finding the targets of probe %s failed", kind.name)
        live = {state_key(t) for _, t in pairs}
        for stale in [k for k in self._last if k not in live]:
            del self._last[stale]
        self._unanswered &= live
        if pairs:
            # the probes take the slots in this order
            ordered = poll_order(pairs, self._last, self._unanswered)
            await asyncio.gather(*(self._probe(kind, target) for kind, target in ordered))
        self.polls += 1

    async def _probe(self, kind: ProbeKind, target: ProbeTarget) -> None:
        async with self._slots:
            try:
                await self._probe_one(kind, target)
            except Exception:  # one target's answer (or a bug it triggers) must not end the prober
                raise_if_cancelling()
                log.exception("probing %s of %s failed", target.path, target.key, extra={"raybus.key": str(target.key)})

    async def _probe_one(self, kind: ProbeKind, target: ProbeTarget) -> None:
        try:
            if target.pod is not None:
                answer = await self._dashboard.request_pod(target.pod, "GET", target.path)
            elif target.dashboard is not None:
                answer = await self._dashboard.request(target.dashboard, "GET", target.path)
            else:
                answer = DashboardAnswer(status=0, error="the target names no dashboard and no pod")
        except PermanentError as exc:
            answer = DashboardAnswer(status=0, error=str(exc))
        data = kind.observe(target, answer)
        significant = kind.significant(data)
        known = state_key(target)
        unanswered = answer.status == 0 or answer.status >= 400
        if unanswered:
            self._unanswered.add(known)
        else:
            self._unanswered.discard(known)
        if known not in self._last:
            self._last[known] = await self._projected(kind, target)
        last = self._last[known]
        if last.significant == significant:
            pipeline_metrics.polled(kind.name, changed=False, error=unanswered)
            return
        try:
            revision = await self._publish(target, data, significant, base=last.revision)
        except (nats.errors.Error, TimeoutError) as exc:
            raise_if_cancelling()
            log.warning("publishing an observation of %s failed: %s", target.key, exc)
            pipeline_metrics.polled(kind.name, changed=False, error=True)
            return
        self._last[known] = _Known(significant, revision)
        pipeline_metrics.polled(kind.name, changed=True, error=unanswered)

    async def _projected(self, kind: ProbeKind, target: ProbeTarget) -> _Known:
        if self._objects is None:
            return _Known(None, 0)
        try:
            entry = await self._objects.get(subjects.entry_key(target.key, target.entry_kind, target.entry_name))
        except KeyNotFoundError:
            return _Known(None, 0)
        revision = entry.revision or 0
        if entry.value:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                return _Known(kind.significant(_json.decode(entry.value)), revision)
        return _Known(None, revision)

    async def _publish(self, target: ProbeTarget, data: dict[str, Any], significant: Any, *, base: int) -> int:
        """Write the answer to KV and publish its Observation; returns the KV revision that holds it."""
        msg_id = observation_id(target, significant, base)
        with self._tracer.start_as_current_span(
            "watcher.observe",
            attributes={**key_attributes(target.key), "raybus.source": target.source},
        ):
            encoded = msgspec.json.encode(data)
            subject = subjects.kv_subject(
                subjects.OBJECTS_BUCKET, subjects.entry_key(target.key, target.entry_kind, target.entry_name)
            )
            ack = await self._js.publish(subject, encoded, headers={"Nats-Msg-Id": msg_id})
            observation = Observation(
                key=target.key,
                source=target.source,
                entry_name=target.entry_name,
                data=data,
                observed_at=self._clock(),
                kv_revision=int(ack.seq),
            )
            await publish(self._js, subjects.events_subject(target.key), codec.encode(observation), msg_id=msg_id)
        self.published += 1
        return int(ack.seq)
