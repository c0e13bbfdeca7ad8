"""Leader election over kubesim's Leases: who leads, who waits for whom, and each way leadership moves.

Lease durations are either an hour (a standby that takes over did so through a release or its own
identity, never through expiry) or four seconds (the takeover of a leader that stopped renewing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, cast

import msgspec
from kubernetes import client

from schema.times import format_time_exact, parse_time
from services.edge.calls import object_path
from services.edge.kubeapi import KubeApi
from services.edge.resources import LEASE
from services.edge.service import Watcher
from services.edge.watch.election import LEASE_NAME, ElectionTimings, LeaseElection
from services.edge.watch.projection import Projection
from services.runtime.aio import cancel_and_wait
from services.runtime.settings import KubeSettings, NatsSettings, RaybusSettings
from tests.component.watcher.conftest import in_thread
from tests.fixtures.kubesim import KubeSimHandle
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

PATIENT = ElectionTimings(lease_duration=3600, renew_deadline=30, retry_period=0.1)
"""Never expires within a test."""
SHORT = ElectionTimings(lease_duration=4, renew_deadline=3, retry_period=0.1)
"""Expires soon after its leader stops renewing."""


def candidate(api: KubeApi, namespace: str, identity: str, timings: ElectionTimings) -> LeaseElection:
    return LeaseElection(api, namespace=namespace, identity=identity, timings=timings)


async def campaign(election: LeaseElection, stop: asyncio.Event) -> bool:
    """What a watcher replica does: acquire, then renew until stopped (True) or lost (False)."""
    if not await election.acquire(stop):
        return False
    return await election.run(stop)


@asynccontextmanager
async def campaigning(election: LeaseElection) -> AsyncIterator[tuple[asyncio.Task[bool], asyncio.Event]]:
    """A candidate campaigning in a task; the task is stopped (without a release) at the end."""
    stop = asyncio.Event()
    task = asyncio.create_task(campaign(election, stop))
    try:
        yield task, stop
    finally:
        stop.set()
        await cancel_and_wait([task], timeout=30)


def hold_the_interpreter(seconds: float) -> None:
    """Python work for ``seconds`` without an await: the event loop is held, as a long synchronous step holds it."""
    busy_until = time.monotonic() + seconds
    while time.monotonic() < busy_until:
        sum(range(1000))


def spec_of(api: KubeApi, namespace: str) -> dict[str, Any]:
    """The Lease's spec as the server sends it (the official client's models would re-format its times)."""
    lease = msgspec.json.decode(api.request("GET", object_path(LEASE, namespace, LEASE_NAME)).data)
    return cast(dict[str, Any], lease["spec"])


def renew_time(spec: dict[str, Any]) -> datetime:
    """The Lease's renewTime, which a held Lease has."""
    renewed = parse_time(spec["renewTime"])
    assert renewed is not None
    return renewed


async def test_one_candidate_leads_the_other_waits_and_names_the_holder(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    a = candidate(kube_api, ns, "a", PATIENT)
    b = candidate(kube_api, ns, "b", PATIENT)
    async with campaigning(a) as (leading, _):
        await eventually(lambda: a.is_leader, message="a leads")
        async with campaigning(b) as (waiting, stop_b):
            await eventually(
                lambda: b.readiness() == f"waiting for the Lease {ns}/{LEASE_NAME} held by a", message="b waits for a"
            )
            assert not b.is_leader and b.holder == "a"
            assert a.readiness() is None and a.holder == "a"

            first = await in_thread(spec_of, kube_api, ns)
            assert first["holderIdentity"] == "a"
            assert first["leaseDurationSeconds"] == 3600
            assert first["leaseTransitions"] == 0
            for stamp in ("acquireTime", "renewTime"):  # MicroTime, written exactly as schema.times spells it
                parsed = parse_time(first[stamp])
                assert parsed is not None and format_time_exact(parsed) == first[stamp]

            def renewal() -> dict[str, Any]:
                spec = spec_of(kube_api, ns)
                return spec if spec["renewTime"] != first["renewTime"] else {}

            renewed = await eventually(renewal, message="a renews")
            assert renewed["acquireTime"] == first["acquireTime"] and renewed["leaseTransitions"] == 0

            stop_b.set()
            assert await waiting is False  # a stop ends the wait without the Lease
        assert not leading.done() and a.is_leader


async def test_a_released_lease_goes_to_the_standby_without_waiting_for_its_duration(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    a = candidate(kube_api, ns, "a", PATIENT)
    b = candidate(kube_api, ns, "b", PATIENT)
    async with campaigning(a) as (leading, stop_a):
        await eventually(lambda: a.is_leader, message="a leads")
        async with campaigning(b):
            await eventually(lambda: b.holder == "a", message="b waits for a")
            stop_a.set()
            assert await leading is True  # stopped while leading
            assert await a.release() is True
            assert not a.is_leader and not a.lost.is_set()
            await eventually(lambda: b.is_leader, message="b takes the released Lease")
            spec = await in_thread(spec_of, kube_api, ns)
            assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
            assert await a.release() is False  # nothing left to release


async def test_a_leader_that_stops_renewing_loses_the_lease_once_its_duration_passed(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    a = candidate(kube_api, ns, "a", SHORT)
    b = candidate(kube_api, ns, "b", SHORT)
    async with campaigning(a) as (leading, _):
        await eventually(lambda: a.is_leader, message="a leads")
        async with campaigning(b):
            await eventually(lambda: b.holder == "a", message="b waits for a")
            await cancel_and_wait([leading], timeout=30)  # a dies: no more renewals, no release
            await eventually(lambda: b.is_leader, message="b takes the expired Lease")
            spec = await in_thread(spec_of, kube_api, ns)
            assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


async def test_a_leader_whose_event_loop_is_busy_for_longer_than_the_renew_deadline_keeps_its_lease(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """Renewals run on a thread of their own: a watch process whose loop is busy for seconds (a relist of
    10,000 objects after a restart) does not lose its Lease for want of a turn on that loop."""
    ns = kubesim_namespace
    a = candidate(kube_api, ns, "a", SHORT)
    async with campaigning(a) as (leading, _):
        await eventually(lambda: a.is_leader, message="a leads")
        before = renew_time(await in_thread(spec_of, kube_api, ns))
        hold_the_interpreter(2 * SHORT.renew_deadline)
        await asyncio.sleep(0)
        assert not leading.done() and a.is_leader and not a.lost.is_set()
        spec = await in_thread(spec_of, kube_api, ns)
        assert spec["holderIdentity"] == "a" and renew_time(spec) > before


async def test_a_leader_whose_lease_is_taken_over_notices_that_it_lost(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    a = candidate(kube_api, ns, "a", PATIENT)
    leases = client.CoordinationV1Api(kube.api_client)

    def take_over() -> bool:
        """Write another holder into the Lease; False when a's renewal came in between (409)."""
        lease = leases.read_namespaced_lease(LEASE_NAME, ns)
        assert lease.spec is not None
        lease.spec.holder_identity = "intruder"
        try:
            leases.replace_namespaced_lease(LEASE_NAME, ns, lease)
        except client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async with campaigning(a) as (leading, _):
        await eventually(lambda: a.is_leader, message="a leads")
        await eventually(lambda: in_thread(take_over), message="the Lease is taken over")
        assert await leading is False
        assert a.lost.is_set() and not a.is_leader
        assert a.readiness() == f"lost the Lease {ns}/{LEASE_NAME} (held by intruder)"
        assert (await in_thread(spec_of, kube_api, ns))["holderIdentity"] == "intruder"


async def test_a_restart_with_the_same_identity_takes_its_lease_back_at_once(
    kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    before = candidate(kube_api, ns, "a", PATIENT)
    async with campaigning(before) as (leading, _):
        await eventually(lambda: before.is_leader, message="a leads")
        await cancel_and_wait([leading], timeout=30)  # the process dies without releasing
    held = await in_thread(spec_of, kube_api, ns)
    assert held["holderIdentity"] == "a"

    after = candidate(kube_api, ns, "a", PATIENT)
    assert await after.acquire(asyncio.Event()) is True
    spec = await in_thread(spec_of, kube_api, ns)
    assert spec["holderIdentity"] == "a"
    assert spec["acquireTime"] == held["acquireTime"] and spec["leaseTransitions"] == 0
    assert await after.release() is True


QUICK_RENEW = 1.0
"""The renew deadline of the slow-starting watcher."""


class SlowStartWatcher(Watcher):
    """A watcher whose watch side takes longer to start than its renew deadline, as loading a projection of
    60,000 entries does at 10,000 clusters (the event loop held, as a large synchronous load holds it)."""

    async def _start_watch(self) -> Projection:
        hold_the_interpreter(2 * QUICK_RENEW)
        return await super()._start_watch()


async def test_a_watcher_renews_its_lease_while_its_watch_side_starts(
    nats_server: NatsServer, kube: KubeSimHandle, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    """Renewing starts as soon as the Lease is held, not once the watch side has started: a start-up longer
    than the renew deadline keeps the Lease."""
    ns = kubesim_namespace
    kube_settings = KubeSettings(
        kubeconfig=str(kube.kubeconfig),
        watch_namespaces=(ns,),
        election_namespace=ns,
        lease_duration=2 * QUICK_RENEW,
        renew_deadline=QUICK_RENEW,
        retry_period=QUICK_RENEW / 4,
    )
    settings = RaybusSettings(nats=NatsSettings(url=nats_server.url), kube=kube_settings)
    watcher = SlowStartWatcher(settings, prober=False)
    try:
        await watcher.start()
        await eventually(lambda: watcher.readiness() is None, timeout=20, message="watcher ready")
        election = watcher.election
        assert election is not None
        started = renew_time(await in_thread(spec_of, kube_api, ns))

        async def renewed_since() -> bool:
            spec = await in_thread(spec_of, kube_api, ns)
            return spec["holderIdentity"] == election.identity and renew_time(spec) > started

        await eventually(renewed_since, message="a renewal after the start-up")
        assert election.is_leader and not election.lost.is_set()
    finally:
        await watcher.stop()
