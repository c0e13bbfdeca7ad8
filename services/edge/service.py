"""An edge process: the watch side (informers → projection), the applier and the dashboard prober.

Role: :func:`run_watcher` is what ``raybus watch``, ``raybus applier`` and ``raybus prober`` run, each with
its one role, and ``raybus watcher`` with any of them (``KubeSettings.roles``): each role a separately
scalable stage (docs/architecture.md#watcher):

- ``watch``: informers → projection, in exactly one active replica: it is elected by the Kubernetes
  Lease ``raybus-watcher`` (``election``, KubeRay's leader election). A standby waits, ready (it is
  healthy, and a rollout must not wait for it); the leader discovers which resources are served, rebuilds
  the projection from KV, starts one informer per resource and namespace from its stored resume point,
  and renews the Lease. A leader that loses the Lease ends the process, which its supervisor restarts as
  a standby: two projections never write at once for long.
- ``apply`` and ``probe``: the applier and the prober, each sharing the partitions with its other
  replicas through leases in KV (``services.runtime.leases``). In a process that also watches, they use
  the projection as their facts and start once it leads; on their own they follow KV ``raybus-objects``
  (``kvfacts``).

Every ``check_interval`` (jittered) the leader checks its projection against the API server (the
informers) and against KV (``Projection.check_entries``), and repairs what lost events left wrong.

Readiness = NATS connected, and per role: informers synced once leading; the facts loaded; the applier
not stalled. On ``stop``: informers stop first, in-flight projection writes finish (bounded), resume
points are stored, the Lease is released, the prober and the applier finish their in-flight work and
release their partitions, then everything closes. A crashed part ends the process loudly.

Each role's modules are imported where the role starts: a process that runs one role does not hold the
others' (2.6 MB for the watch and for the prober, whose siblings' modules the applier's content checks
mostly share).

Not here: command-line parsing (``services/cli``), signal handling (``services.runtime.lifecycle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import nats.errors
from nats.aio.client import Client

from schema.probes import PROBED_KEYS
from services.edge.calls import ApiError
from services.edge.dashboard import DashboardClient
from services.edge.kubeapi import KubeApi, load_configuration
from services.edge.resources import ResourceType, select_served
from services.runtime.aio import cancel_and_wait, raise_if_cancelling
from services.runtime.backoff import retry
from services.runtime.bus import connect
from services.runtime.errors import PermanentError
from services.runtime.health import HealthServer
from services.runtime.leases import Membership, default_member_id
from services.runtime.publishing import AckedJetStream
from services.runtime.settings import RaybusSettings, WatcherRole
from services.runtime.topology import Buckets, ensure_topology, open_buckets, when_answered

if TYPE_CHECKING:
    from services.edge.apply.applier import Applier
    from services.edge.probe.prober import Prober
    from services.edge.watch.election import LeaseElection
    from services.edge.watch.informer import Informer
    from services.edge.watch.kvfacts import KvFacts
    from services.edge.watch.projection import Projection

log = logging.getLogger(__name__)

QUEUE_SIZE: Final = 256
"""Informer batches waiting for the projection before informer threads block (backpressure)."""
DRAIN_TIMEOUT: Final = 10.0
"""Seconds in-flight projection writes get on shutdown."""
SUPERVISE_INTERVAL: Final = 0.5
DISCOVERY_TIMEOUT: Final = 120.0
"""Seconds the watcher waits at start for the API server and the ray.io CRDs before giving up."""
STOP_TIMEOUT: Final = 5.0
"""Seconds a part gets to stop once cancelled (nats-py can swallow a cancellation)."""
API_CONCURRENCY: Final = 8
"""Requests to the API server in flight at once, whatever the applier's concurrency: more than the API server
answers at once only wait there (1000 clusters, when each request held a thread: 36 cost more CPU than 8
and were slower)."""


class Watcher:
    """One watcher process: start it, wait until ready, stop it; exceptions of its parts surface from ``wait``."""

    def __init__(self, settings: RaybusSettings, *, api: KubeApi | None = None, prober: bool = True) -> None:
        self.settings = settings
        self.roles: frozenset[WatcherRole] = frozenset(settings.kube.roles) - (set() if prober else {"probe"})
        self._api = api
        self._own_api = api is None
        self._nc: Client | None = None
        self.buckets: Buckets | None = None
        self.projection: Projection | None = None
        self.facts: KvFacts | None = None
        self.election: LeaseElection | None = None
        self.applier: Applier | None = None
        self.prober: Prober | None = None
        self.informers: list[Informer] = []
        self._membership: Membership | None = None
        self._dashboard: DashboardClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = threading.Event()
        self._stop = asyncio.Event()
        """Set at the start of :meth:`stop`: ends the Lease's wait and renewals."""
        self._applier_stop = asyncio.Event()
        self._prober_stop = asyncio.Event()
        self._waiting_for = ""

    @property
    def api(self) -> KubeApi:
        """The API adapter (after :meth:`start`)."""
        assert self._api is not None
        return self._api

    @property
    def dashboard(self) -> DashboardClient:
        """The dashboard client (after :meth:`start`)."""
        assert self._dashboard is not None
        return self._dashboard

    @property
    def nats(self) -> Client:
        """The NATS connection (after :meth:`start`)."""
        assert self._nc is not None
        return self._nc

    @property
    def standby(self) -> bool:
        """Whether this replica waits for the Lease another replica holds (its watch side is idle)."""
        election = self.election
        return election is not None and not election.is_leader and bool(election.holder)

    def readiness(self) -> str | None:
        """None when ready, else why not."""
        if self._nc is None or not self._nc.is_connected:
            return "NATS not connected"
        if "watch" in self.roles:
            if self.standby:
                return None  # healthy and waiting: a rollout need not wait for the leader to go
            if not self.informers:
                if self.election is not None and not self.election.is_leader:
                    return self.election.readiness() or "acquiring the Lease"
                return f"informers not started: {self._waiting_for or 'starting'}"
            waiting = [i.scope.name for i in self.informers if not i.synced]
            if waiting:
                return f"informers not synced: {', '.join(waiting[:5])}"
        elif self.facts is None:
            return "loading the facts from KV"
        return self.applier.progress.stalled() if self.applier is not None else None

    async def start(self) -> None:
        """Connect and start every role (returns once they run, or once the watch side waits for its
        Lease; see :meth:`wait`)."""
        settings = self.settings
        if self._api is None:
            configuration = await asyncio.to_thread(load_configuration, settings.kube.kubeconfig)
            self._api = KubeApi(configuration, concurrency=min(settings.kube.applier_concurrency, API_CONCURRENCY) + 4)
        self._nc = await connect(settings.nats, name="raybus-watcher")
        nc = self._nc
        if settings.nats.ensure_topology:
            self.buckets = await when_answered(
                lambda: ensure_topology(nc, bus=settings.bus, partitions=settings.partitions), "watcher"
            )
        else:
            self.buckets = await when_answered(
                lambda: open_buckets(nc, bus=settings.bus, partitions=settings.partitions), "watcher"
            )
        member_id = settings.partitions.worker_id or default_member_id()
        self._membership = Membership(
            self._nc,
            self.buckets.leases,
            member_id,
            settings.bus.partitions,
            settings.partitions,
            connect=functools.partial(connect, settings.nats, name="raybus-watcher-leases"),
        )
        self._dashboard = DashboardClient(
            self.api,
            use_proxy=settings.kube.use_kubernetes_proxy,
            cluster_domain=settings.operator.switches.cluster_domain,
        )
        if "watch" in self.roles:
            from services.edge.watch.election import ElectionTimings, LeaseElection

            self.election = LeaseElection(
                self.api,
                namespace=settings.kube.election_namespace,
                identity=member_id,
                timings=ElectionTimings(
                    lease_duration=settings.kube.lease_duration,
                    renew_deadline=settings.kube.renew_deadline,
                    retry_period=settings.kube.retry_period,
                ),
            )
            self._spawn(self._lead(self.election), "watcher-watch")
        else:
            # A prober alone reads only the probed keys' objects; an applier needs every key's.
            from services.edge.watch.kvfacts import KvFacts

            if "apply" in self.roles:
                from services.edge.apply.provenance import prepare

                config = self.settings.operator
                self.facts = KvFacts(self.nats, on_edit=lambda kind, obj: prepare(kind, obj, config))
            else:
                self.facts = KvFacts(self.nats, keys=PROBED_KEYS)
            await self.facts.start()
            self._start_stages(self.facts)

    async def _lead(self, election: LeaseElection) -> None:
        """Wait for the Lease, run the watch side (and the stages that share this process) while it is held;
        raise when it is lost."""
        if not await election.acquire(self._stop):
            return  # stopped while waiting
        log.info("leading the watch side as %s", election.identity)
        # Renewing runs alongside the start-up: loading a large projection (60,000 entries at 10,000
        # clusters) can take longer than the renew deadline.
        renewing = asyncio.ensure_future(election.run(self._stop))
        starting = asyncio.ensure_future(self._start_watch())
        try:
            await asyncio.wait({renewing, starting}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                self._start_stages(starting.result())
            held = await renewing
        finally:
            for task in (starting, renewing):
                task.cancel()
            await asyncio.gather(starting, renewing, return_exceptions=True)
        if not held and not self._stop.is_set():
            raise RuntimeError(f"lost the watch Lease: {election.readiness()}")

    async def _start_watch(self) -> Projection:
        """Discover, load the projection from KV, start the informers from their resume points."""
        from services.edge.watch.informer import Handoff, Informer, scopes_for
        from services.edge.watch.owners import api_owner_reader
        from services.edge.watch.projection import Projection
        from services.edge.watch.resume import load_resume_points

        assert self.buckets is not None
        js = AckedJetStream(self.nats)
        available, skipped = await self._discover()
        for resource in skipped:
            log.info("the API server does not serve %s: not watching it", resource.name)
        scopes = scopes_for(available, self.settings.kube.watch_namespaces)
        points = await load_resume_points(self.buckets.watcher, [s.name for s in scopes])
        projection = Projection(
            js, resume_kv=self.buckets.watcher, resume_points=points, owners=api_owner_reader(self.api)
        )
        self.projection = projection
        loaded = await projection.load(self.nats)
        log.info("projection holds %d objects; %d of %d scopes resume", loaded, len(points), len(scopes))

        handoff = Handoff(asyncio.get_running_loop(), QUEUE_SIZE, self._stopping)
        informers = [
            Informer(
                self.api,
                scope,
                resource_version=points.get(scope.name),
                deliver=handoff.deliver,
                check_interval=self.settings.kube.check_interval,
            )
            for scope in scopes
        ]
        self._spawn(projection.run(handoff), "watcher-projection")
        if self.settings.kube.check_interval > 0:
            self._spawn(self._check_entries(projection), "watcher-entries-check")
        for informer in informers:
            informer.start()
        self.informers = informers
        return projection

    async def _check_entries(self, projection: Projection) -> None:
        """Every check interval (jittered), compare KV ``raybus-objects`` with the projection and repair it
        (``Projection.check_entries``; the informers check the projection against the API server)."""
        from services.edge.watch.informer import check_delay

        assert self.buckets is not None
        while True:
            await asyncio.sleep(check_delay(self.settings.kube.check_interval))
            try:
                await projection.check_entries(self.buckets.objects)
            except (nats.errors.Error, TimeoutError) as exc:
                raise_if_cancelling()
                log.warning("checking the projection's KV entries failed: %s", exc)

    def _start_stages(self, facts: Projection | KvFacts) -> None:
        """Start this process's applier and prober on ``facts`` (the projection, or KV)."""
        assert self.buckets is not None and self._membership is not None
        settings = self.settings
        js = AckedJetStream(self.nats)
        if "apply" in self.roles:
            from services.edge.apply.applier import Applier
            from services.edge.apply.failures import FailureReporter

            self.applier = Applier(
                self.nats,
                self.api,
                membership=self._membership,
                dashboard=self.dashboard,
                concurrency=settings.kube.applier_concurrency,
                exit_timeout=settings.partitions.exit_timeout,
                qps=settings.kube.qps,
                burst=settings.kube.burst,
                max_deliver=settings.bus.max_deliver,
                ack_wait=settings.bus.ack_wait,
                result_batches=settings.bus.result_batches,
                on_failure=FailureReporter(self.api, clock=lambda: datetime.now(UTC)),
                owners=facts,
                facts=facts,
                config=settings.operator,
                applied=self.buckets.applied,
            )
            self._spawn(self.applier.run(self._applier_stop), "watcher-applier")
        if "probe" in self.roles:
            from services.edge.probe.probekinds import PROBE_KINDS
            from services.edge.probe.prober import Prober

            self.prober = Prober(
                js,
                facts,
                self.dashboard,
                membership=self._membership,
                interval=settings.kube.dashboard_poll_interval,
                objects=self.buckets.objects,
                probes=PROBE_KINDS,
            )
            self._spawn(self.prober.run(self._prober_stop), "watcher-prober")

    async def _discover(self) -> tuple[list[ResourceType], list[ResourceType]]:
        """Which resources to watch; retried while the API server is unreachable or the ray.io CRDs are
        not served yet (they are often applied together with the watcher's Deployment).

        Raises:
            PermanentError: still not possible after :data:`DISCOVERY_TIMEOUT` seconds.
        """
        from services.edge.watch.informer import RECONNECT_BACKOFF

        loop = asyncio.get_running_loop()
        deadline = loop.time() + DISCOVERY_TIMEOUT

        async def discover() -> tuple[list[ResourceType], list[ResourceType]]:
            return select_served(await asyncio.to_thread(self.api.served_resources))

        def waiting(exc: Exception, _: int, delay: float) -> None:
            self._waiting_for = str(exc)
            log.warning("discovery: %s; retrying in %.1fs", exc, delay)

        try:
            return await retry(
                discover,
                RECONNECT_BACKOFF,
                transient=lambda exc: isinstance(exc, ApiError | LookupError),
                give_up=lambda: loop.time() >= deadline,
                on_retry=waiting,
            )
        except (ApiError, LookupError) as exc:
            self._waiting_for = str(exc)
            raise PermanentError(f"cannot start watching: {exc}") from exc

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def wait(self, stop: asyncio.Event) -> None:
        """Return when ``stop`` is set; raise when a part crashed."""
        while not stop.is_set():
            for informer in self.informers:
                if informer.failure is not None:
                    raise RuntimeError(f"informer {informer.scope.name} crashed") from informer.failure
            for task in self._tasks:
                if task.done():
                    exc = None if task.cancelled() else task.exception()
                    raise RuntimeError(f"{task.get_name()} stopped unexpectedly") from exc
            try:
                await asyncio.wait_for(stop.wait(), SUPERVISE_INTERVAL)
            except TimeoutError:
                raise_if_cancelling()

    async def stop(self) -> None:
        """Stop in order: informers, projection (drain, store resume points), the Lease, prober, applier, facts,
        connections."""
        self._stop.set()
        self._stopping.set()
        for informer in self.informers:
            informer.stop()

        def join_all() -> None:
            for informer in self.informers:
                informer.join(5.0)

        await asyncio.to_thread(join_all)
        by_name = {task.get_name(): task for task in self._tasks}
        writing = [by_name.get("watcher-projection"), by_name.get("watcher-entries-check")]
        await cancel_and_wait([task for task in writing if task is not None], timeout=STOP_TIMEOUT)
        if self.projection is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.projection.drain(), DRAIN_TIMEOUT)
            with contextlib.suppress(Exception):
                await self.projection.close()
        watch_task = by_name.get("watcher-watch")
        if watch_task is not None:
            await asyncio.wait([watch_task], timeout=STOP_TIMEOUT)
        if self.election is not None and self.election.is_leader:
            await self.election.release()
        self._prober_stop.set()
        self._applier_stop.set()
        applier_task = by_name.get("watcher-applier")
        if applier_task is not None:
            await asyncio.wait([applier_task], timeout=self.settings.partitions.exit_timeout + STOP_TIMEOUT)
        lingering = await cancel_and_wait(self._tasks, timeout=STOP_TIMEOUT)
        if lingering:
            log.warning("watcher parts did not stop: %s", ", ".join(t.get_name() for t in lingering))
        if self.facts is not None:
            await self.facts.stop()  # after the applier: a batch waiting for facts must not see them stop
        if self._dashboard is not None:
            await self._dashboard.close()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.drain()
        if self._api is not None and self._own_api:
            await self._api.close()


async def run_watcher(settings: RaybusSettings, stop: asyncio.Event, health: HealthServer) -> None:
    """Run the watcher until ``stop`` is set (see the module docstring).

    Raises:
        PermanentError: no Kubernetes configuration, or the ray.io CRDs are not served.
        RuntimeError: a part of the watcher crashed (the process should exit non-zero).
    """
    watcher = Watcher(settings)
    health.add_readiness("watcher", watcher.readiness)
    try:
        await watcher.start()
        await watcher.wait(stop)
    finally:
        await watcher.stop()
