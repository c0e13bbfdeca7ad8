"""A partition's in-flight commands move with it: a worker joining mid-burst causes no duplicate create."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from schema import subjects
from schema.codec import decode_results
from services.reconciler.worker.service import run_reconciler
from services.runtime.settings import RaybusSettings
from tests.e2e.clusters import small_cluster
from tests.e2e.pipeline import Component, running_pipeline
from tests.e2e.test_invariants import all_ready, create, stream_messages

CLUSTERS = 200


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_worker_joining_mid_burst_sends_no_duplicate_create(tmp_path: Path, db_url: str) -> None:
    # A create hold longer than any watch lag of a loaded test machine: what is measured is the hand-over,
    # not a Pod that showed up in the snapshot later than the hold.
    def hold(settings: RaybusSettings) -> RaybusSettings:
        return dataclasses.replace(
            settings, partitions=dataclasses.replace(settings.partitions, inflight_create_hold=60.0)
        )

    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=hold) as p:
        names = [f"handover-{i}" for i in range(CLUSTERS)]
        joiner = Component(
            "joiner",
            run_reconciler,
            dataclasses.replace(p.settings, partitions=dataclasses.replace(p.settings.partitions, worker_id="joiner")),
        )
        p.components["joiner"] = joiner
        try:
            for i, name in enumerate(names):
                await asyncio.to_thread(create, p, small_cluster(name))
                if i == CLUSTERS // 3:
                    joiner.start()  # takes over about half of the partitions while their creates are in flight
            await joiner.ready()
            await all_ready(p, set(names), timeout=600)
        finally:
            await joiner.stop()
        results = [
            r for _, _, data, _ in await stream_messages(p, subjects.RESULTS_STREAM) for r in decode_results(data)
        ]
        creates = [r for r in results if r.verb == "create_object" and r.target.startswith("Pod ")]
        duplicates = [r.target for r in creates if r.outcome == "already_done"]
        assert len({r.target for r in creates}) == 2 * CLUSTERS
        assert duplicates == []
