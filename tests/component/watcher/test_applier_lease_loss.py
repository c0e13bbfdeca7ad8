"""An applier that loses a partition's lease does not wait for the batch in hand before it can hold the
partition again (real nats-server, kubesim).

A batch decided on a snapshot the facts never reach waits for them (``FACTS_WAIT``) before it is applied;
an exit timeout far longer than that would let a drain wait it out. The lease is deleted under the applier
(as the bucket's TTL does while NATS does not answer): the applier finds it lost, stops the partition and
claims it again — before the batch in hand produced any result, so the stop cancelled it and handed it
back instead of waiting for it. The batch, delivered again, is then applied once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.errors import KeyNotFoundError

from schema import codec, subjects
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, CreateObject
from services.edge.apply.applier import Applier
from services.edge.kubeapi import KubeApi
from services.edge.watch.kvfacts import KvFacts
from services.runtime.bus import publish
from tests.component.watcher.conftest import Bus, partition_of
from tests.component.watcher.test_applier import NOW, sa_ref
from tests.helpers import eventually

MEMBER = "lease-loss-member"
NEVER = 10**12
"""A KV revision the facts never reach."""


async def _lease(bus: Bus, partition: int) -> Any:
    try:
        return await bus.buckets.leases.get(subjects.lease_key("apply", partition))
    except KeyNotFoundError:
        return None


async def _ack_pending(bus: Bus, partition: int) -> int:
    info = await bus.js.consumer_info(subjects.COMMANDS_STREAM, subjects.applier_consumer(partition))
    return int(info.num_ack_pending or 0)


async def test_a_lost_lease_is_claimed_again_without_waiting_for_the_batch_in_hand(
    bus: Bus, kube_api: KubeApi, kubesim_namespace: str
) -> None:
    ns = kubesim_namespace
    key = ReconcileKey(kind="RayCluster", namespace=ns, name="waits")
    partition = partition_of(key)
    facts = KvFacts(bus.nc)
    await facts.start()
    applier = Applier(bus.nc, kube_api, membership=bus.membership(MEMBER), facts=facts, exit_timeout=3600)
    stop = asyncio.Event()
    running = asyncio.create_task(applier.run(stop))
    try:
        held = await eventually(lambda: _lease(bus, partition), message="the applier holds the partition")
        command = CreateObject(id="create", target=sa_ref(ns, "sa"), body={"metadata": {"name": "sa"}})
        batch = CommandBatch(id="b1", key=key, issued_at=NOW, commands=(command,), snapshot_revision=NEVER)
        await publish(bus.js, subjects.command_subject(key), codec.encode(batch), msg_id=batch.id)
        await eventually(lambda: _ack_pending(bus, partition), message="the batch in hand, waiting for facts")

        await bus.buckets.leases.delete(subjects.lease_key("apply", partition))

        async def claimed_again() -> bool:
            lease = await _lease(bus, partition)
            return lease is not None and lease.value == MEMBER.encode() and lease.revision > held.revision

        await eventually(claimed_again, timeout=120, message="the partition claimed again")
        assert await bus.results(key) == []  # the stop did not wait for the batch in hand
        results = await eventually(lambda: bus.results(key), timeout=120, message="the batch delivered again")
        assert [r["command_id"] for r in results] == ["create"]
    finally:
        stop.set()
        await running
        await facts.stop()
