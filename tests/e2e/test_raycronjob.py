"""RayCronJob end to end through the real pipeline (kubesim, watcher, reconciler, status on
nats-server), with the ``RayCronJob`` gate on as ``raybus up`` sets it.

Time is never faked here: the controller's ``now`` is the bus's. What a 5-minute outage of the
reconcilers looks like to the controller is a ``status.lastScheduleTime`` 5 minutes back when a
reconciler next looks, so the outage and suspend tests set it through the status subresource while no
reconcile can act on it; only the sample's test waits for real one-minute ticks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import io
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from schema import subjects
from schema.codec import decode_batch, decode_input
from schema.keys import ReconcileKey
from schema.messages import RESYNC, CommandBatch, CreateObject, EmitEvent, TimerTick, WatchEvent
from services.runtime.settings import RaybusSettings
from services.status import history_cli
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.e2e.test_pipeline import status_api
from tests.fixtures.processes import spawn_raybus
from tests.helpers import stored_messages
from tests.replays.scenarios import Driver, sample, until
from tests.unit.replay.clirun import replay_cli_async

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

CRONJOB_LABEL = "ray.io/cronjob-name"
SCHEDULED_ANNOTATION = "ray.io/cronjob-scheduled-timestamp"
SAMPLE = "ray-cronjob.sample.yaml"


def gate_on(settings: RaybusSettings) -> RaybusSettings:
    """The reconciler's operator config with the RayCronJob gate on (as ``raybus up`` passes it)."""
    gates = msgspec.structs.replace(settings.operator.gates, ray_cron_job=True)
    return dataclasses.replace(settings, operator=msgspec.structs.replace(settings.operator, gates=gates))


def cronjob(name: str, *, parked_runs: bool = True, file_name: str = SAMPLE, **spec: Any) -> dict[str, Any]:
    """A RayCronJob sample, renamed, with ``spec`` overrides.

    ``parked_runs`` creates the RayJobs suspended (valid: the sample's jobTemplate shuts down after its
    job), so tests about scheduling do not bring up a Ray cluster per tick.
    """
    body = sample(file_name, name=name, kind="RayCronJob")
    body["spec"].update(spec)
    if parked_runs:
        body["spec"]["jobTemplate"]["suspend"] = True
    return body


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def this_minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def child_name(cron: str, tick: datetime) -> str:
    """docs/behaviour.md#2.1: ``<cronjob>-<floor(scheduled unix seconds / 60)>``."""
    return f"{cron}-{int(tick.timestamp()) // 60}"


async def children(p: Pipeline, cron: str, namespace: str = "default") -> list[dict[str, Any]]:
    """RayJobs labelled with the cron job's name, oldest tick first."""
    found: Any = await asyncio.to_thread(
        p.custom().list_namespaced_custom_object,
        "ray.io",
        "v1",
        namespace,
        "rayjobs",
        label_selector=f"{CRONJOB_LABEL}={cron}",
    )
    items: list[dict[str, Any]] = found["items"]
    return sorted(items, key=lambda j: j["metadata"]["annotations"][SCHEDULED_ANNOTATION])


def scheduled(job: dict[str, Any]) -> datetime:
    return parse(job["metadata"]["annotations"][SCHEDULED_ANNOTATION])


def assert_child_of(job: dict[str, Any], cron: Driver, tick: datetime) -> None:
    """Name, label, annotation and owner of the RayJob created for ``tick`` (docs/behaviour.md#7)."""
    metadata = job["metadata"]
    assert metadata["name"] == child_name(cron.name, tick)
    assert metadata["labels"][CRONJOB_LABEL] == cron.name
    assert metadata["annotations"][SCHEDULED_ANNOTATION] == rfc3339(tick)
    (owner,) = metadata["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RayCronJob", cron.name, True)
    assert job["spec"]["entrypoint"] == cron.body["spec"]["jobTemplate"]["entrypoint"]


async def stored(p: Pipeline, stream: str, subject: str) -> list[tuple[int, bytes]]:
    """``(sequence, data)`` of every message of ``stream`` on ``subject`` (wildcards allowed)."""
    nc = await p.nc()
    try:
        messages = await stored_messages(nc.jetstream(), stream, subject, timeout=1)
        return [(msg.metadata.sequence.stream, msg.data) for msg in messages]
    finally:
        await nc.close()


async def decisions(p: Pipeline, key: ReconcileKey) -> list[CommandBatch]:
    """Every decision the reconcilers published for ``key``, in order."""
    return [
        decode_batch(data)
        for _, data in await stored(p, subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key))
    ]


async def decided_on(p: Pipeline, key: ReconcileKey, resource_version: str) -> list[CommandBatch]:
    """The decisions for ``key`` from the one that first saw its object at ``resource_version`` on."""

    async def seq() -> int | None:
        for number, data in await stored(p, subjects.EVENTS_STREAM, f"{subjects.PREFIX}.part.*.{key.token()}"):
            event = decode_input(data)
            if isinstance(event, WatchEvent) and event.resource_version == resource_version:
                return number
        return None

    event_seq = await until(seq, message=f"no watch event of {key} at resourceVersion {resource_version}")

    async def since() -> list[CommandBatch] | None:
        p.check()
        found = await decisions(p, key)
        first = next((i for i, b in enumerate(found) if max(b.inputs, default=0) >= event_seq), None)
        return None if first is None else found[first:]

    return await until(since, message=f"{key} was never reconciled after resourceVersion {resource_version}")


async def assert_woken_by_timer(p: Pipeline, key: ReconcileKey, tick: datetime, rayjob: str) -> None:
    """The decision that created ``rayjob`` was made on the bus timer due at ``tick``, which the
    decisions before it had asked for (a wait on the bus, never a sleep or a poll)."""
    found = await decisions(p, key)
    index = next(i for i, batch in enumerate(found) if rayjob in created_rayjobs(batch))
    inputs = dict(await stored(p, subjects.EVENTS_STREAM, f"{subjects.PREFIX}.part.*.{key.token()}"))
    ticks = [decode_input(inputs[seq]) for seq in found[index].inputs]
    assert tick in [t.due_at for t in ticks if isinstance(t, TimerTick)], ticks
    assert found[index].issued_at >= tick
    waiting = [batch.wake_at for batch in found[:index] if "7/wait-next-tick" in batch.rules]
    assert waiting and waiting[-1] == tick


def created_rayjobs(batch: CommandBatch) -> list[str]:
    return [c.target.name for c in batch.commands if isinstance(c, CreateObject) and c.target.kind == "RayJob"]


async def set_last_schedule_time(cron: Driver, value: datetime) -> str:
    """Patch ``status.lastScheduleTime`` (the status subresource); returns the new resourceVersion."""
    patched = await cron.call(
        "patch_namespaced_custom_object_status", cron.name, {"status": {"lastScheduleTime": rfc3339(value)}}
    )
    return str(patched["metadata"]["resourceVersion"])


async def events_of(p: Pipeline, name: str, namespace: str = "default") -> list[Any]:
    found = await asyncio.to_thread(p.core().list_namespaced_event, namespace)
    return [e for e in found.items if e.involved_object.name == name]


async def schedule_transitions(p: Pipeline, name: str) -> list[dict[str, Any]]:
    history = await asyncio.to_thread(status_api, p, f"/v1/raycronjobs/default/{name}/transitions")
    return [t for t in history["transitions"] if t["field"] == "schedule"]


@contextlib.asynccontextmanager
async def reconciler_process(p: Pipeline, log_dir: Path) -> AsyncIterator[None]:
    """One ``raybus reconciler`` process with the gate on, stopped with SIGTERM on exit."""
    args = ["reconciler", "--nats-url", p.nats.url, "--worker-id", "cron-worker", "--health-port", "0"]
    args += ["--partitions", str(p.settings.bus.partitions), "--feature-gates", "RayCronJob=true"]
    log = log_dir / "reconciler.log"
    proc = spawn_raybus(args, log_path=log, home=log_dir / "home")
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0, log.read_text()[-3000:]


async def test_missed_ticks_after_an_outage_are_created_one_per_pass_in_order(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, with_reconciler=False, settings_hook=gate_on) as p:
        cron = Driver(p, cronjob("outage"))
        await cron.create()
        outage_start = this_minute() - timedelta(minutes=5)
        await set_last_schedule_time(cron, outage_start)
        missed = [outage_start + timedelta(minutes=i) for i in range(1, 6)]

        async with reconciler_process(p, tmp_path):

            async def caught_up() -> list[dict[str, Any]] | None:
                p.check()
                jobs = await children(p, cron.name)
                return jobs if len(jobs) >= len(missed) else None

            jobs = await until(caught_up, message="the missed ticks were not all created")
        # a minute may have turned meanwhile: its tick comes after the missed ones
        ticks = [scheduled(job) for job in jobs]
        assert ticks[: len(missed)] == missed
        for job, tick in zip(jobs, ticks, strict=True):
            assert_child_of(job, cron, tick)
        assert parse((await cron.status())["lastScheduleTime"]) == ticks[-1]

        # one RayJob per pass, in tick order (a pass on a stale snapshot repeats the same create)
        creates = [names for batch in await decisions(p, cron.key) if (names := created_rayjobs(batch))]
        assert all(len(names) == 1 for names in creates), creates
        assert list(dict.fromkeys(names[0] for names in creates)) == [job["metadata"]["name"] for job in jobs]

        # the status service recorded each run, in order, each linked to its RayJob
        async def recorded() -> list[dict[str, Any]] | None:
            rows = await schedule_transitions(p, cron.name)
            return rows if len(rows) >= len(jobs) else None

        rows = await until(recorded, message="the status service did not record every run")
        assert [parse(t["to_value"]) for t in rows] == ticks
        assert [t["from_value"] for t in rows] == [rfc3339(t) for t in [outage_start, *ticks[:-1]]]
        assert [t["attributes"]["rayJobName"] for t in rows] == [job["metadata"]["name"] for job in jobs]

        async def linked() -> list[dict[str, Any]] | None:
            runs = (await asyncio.to_thread(status_api, p, f"/v1/raycronjobs/default/{cron.name}/runs"))["runs"]
            return runs if all(r["rayjob_uid"] for r in runs) and len(runs) == len(jobs) else None

        runs = await until(linked, message="the runs were not linked to their RayJobs")
        assert [r["rayjob_uid"] for r in runs] == [job["metadata"]["uid"] for job in jobs]
        assert [parse(r["scheduled_at"]) for r in runs] == ticks

        # and the catch-up replays exactly (invariant 3 of docs/architecture.md#invariants), under the gates it ran with
        replay = await replay_cli_async(
            ["RayCronJob", f"default/{cron.name}", "--nats-url", p.nats.url, "--feature-gates", "RayCronJob=true"]
        )
        assert replay.code == 0 and " 0 diverged" in replay.out, replay.out + replay.err


async def test_suspend_stops_new_runs_and_leaves_existing_rayjobs_alone(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=gate_on) as p:
        cron = Driver(p, cronjob("paused", suspend=True))
        await cron.create()
        await until(lambda: _has_event(p, cron.name, "SuspendedRayCronJob"), message="no SuspendedRayCronJob event")
        start = this_minute() - timedelta(minutes=2)
        await set_last_schedule_time(cron, start)
        await cron.patch({"spec": {"suspend": False}})

        async def ran() -> list[dict[str, Any]] | None:
            p.check()
            jobs = await children(p, cron.name)
            status = await cron.status()
            done = len(jobs) >= 2 and status.get("lastScheduleTime") == rfc3339(scheduled(jobs[-1]))
            return jobs if done else None

        before = await until(ran, message="resuming did not catch up")
        assert [scheduled(j) for j in before][:2] == [start + timedelta(minutes=1), start + timedelta(minutes=2)]

        # suspended, with three ticks due (one new, two that already have their RayJob)
        patched = await cron.call("patch_namespaced_custom_object", cron.name, {"spec": {"suspend": True}})
        await decided_on(p, cron.key, str(patched["metadata"]["resourceVersion"]))
        version = await set_last_schedule_time(cron, start - timedelta(minutes=1))
        after_rewind = await decided_on(p, cron.key, version)
        assert "7/suspended" in after_rewind[0].rules
        for batch in after_rewind:
            assert not [c for c in batch.commands if getattr(getattr(c, "target", None), "kind", "") == "RayJob"]
            assert batch.wake_at is None
        after = await children(p, cron.name)
        assert [(j["metadata"]["uid"], j["spec"]) for j in after] == [(j["metadata"]["uid"], j["spec"]) for j in before]
        assert not any(j["metadata"].get("deletionTimestamp") for j in after)
        assert (await cron.status())["lastScheduleTime"] == rfc3339(start - timedelta(minutes=1))

        # resumed: the tick skipped while suspended is created now, the existing RayJobs are kept
        await cron.patch({"spec": {"suspend": False}})

        async def resumed() -> list[dict[str, Any]] | None:
            jobs = await children(p, cron.name)
            return jobs if scheduled(jobs[0]) == start else None

        jobs = await until(resumed, message="the tick missed while suspended was not created after resuming")
        assert {j["metadata"]["uid"] for j in before} <= {j["metadata"]["uid"] for j in jobs}


async def _has_event(p: Pipeline, name: str, reason: str) -> bool:
    p.check()
    return any(e.reason == reason for e in await events_of(p, name))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"schedule": "TZ=Asia/Taipei 45 21 * * *"},
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            id="tz-in-schedule",
        ),
        pytest.param(
            {"timeZone": "Mars/Olympus_Mons"}, "invalid time zone: unknown time zone Mars/Olympus_Mons", id="zone"
        ),
    ],
)
async def test_an_invalid_raycronjob_gets_kuberays_warning_and_creates_nothing(
    tmp_path: Path, db_url: str, spec: dict[str, Any], message: str
) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=gate_on) as p:
        cron = Driver(p, cronjob("invalid", **spec))
        await cron.create()
        await until(lambda: _has_event(p, cron.name, "InvalidRayCronJobSpec"), message="no InvalidRayCronJobSpec")
        (event,) = [e for e in await events_of(p, cron.name) if e.reason == "InvalidRayCronJobSpec"]
        assert (event.type, event.message) == ("Warning", f"default/invalid: {message}")
        # even with ticks due: nothing but the Warning, no timer
        version = await set_last_schedule_time(cron, this_minute() - timedelta(minutes=3))
        for batch in await decided_on(p, cron.key, version):
            assert all(isinstance(c, EmitEvent) for c in batch.commands) and batch.wake_at is None
            assert batch.rules == ("8/raycronjob-invalid",)
        assert await children(p, cron.name) == []
        nc = await p.nc()
        try:  # no timer but its resync (a lost edit must still be seen): none of its ticks' schedules
            with contextlib.suppress(NotFoundError):
                msg = await nc.jetstream().get_last_msg(subjects.EVENTS_STREAM, subjects.timer_subject(cron.key))
                tick = decode_input(msg.data or b"")
                assert isinstance(tick, TimerTick) and tick.reason == RESYNC
        finally:
            await nc.close()


def gate_on_without_resync(settings: RaybusSettings) -> RaybusSettings:
    """:func:`gate_on`, and no resync: a resync tick, due sooner, would stand in the place of the cron's."""
    settings = gate_on(settings)
    return dataclasses.replace(settings, partitions=dataclasses.replace(settings.partitions, resync_period=0))


async def test_timezone_sample_sleeps_on_a_bus_timer_until_its_tick(tmp_path: Path, db_url: str) -> None:
    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=gate_on_without_resync) as p:
        cron = Driver(p, sample("ray-cronjob-timezone.sample.yaml", kind="RayCronJob"))
        await cron.create()
        obj = await cron.call("get_namespaced_custom_object", cron.name)
        created = parse(obj["metadata"]["creationTimestamp"]).astimezone(ZoneInfo("Asia/Taipei"))
        local = created.replace(hour=21, minute=45, second=0, microsecond=0)
        tick = local if local > created else (local + timedelta(days=1)).replace(hour=21, minute=45)

        async def timer() -> dict[str, str] | None:
            p.check()
            nc = await p.nc()
            try:
                msg: RawStreamMsg = await nc.jetstream().get_last_msg(
                    subjects.EVENTS_STREAM, subjects.timer_subject(cron.key)
                )
                return msg.headers
            finally:
                await nc.close()

        headers = await until(timer, message="no timer was scheduled")
        assert headers["Nats-Schedule"] == f"@at {rfc3339(tick)}"
        assert headers["Nats-Schedule-Target"] == subjects.events_subject(cron.key)
        (decision,) = {b.wake_at: b for b in await decisions(p, cron.key)}.values()
        assert decision.wake_at == tick and decision.commands == ()
        assert "lastScheduleTime" not in await cron.status()
        assert await children(p, cron.name) == []


async def test_sample_creates_a_rayjob_each_minute_that_runs_to_complete(tmp_path: Path, db_url: str) -> None:
    """The one test that waits for real ticks (one to two minutes)."""
    async with running_pipeline(tmp_path, db_url=db_url, settings_hook=gate_on) as p:
        cron = Driver(p, cronjob("raycronjob-sample", parked_runs=False))
        await cron.create_config_maps(SAMPLE)
        await cron.create()
        obj = await cron.call("get_namespaced_custom_object", cron.name)
        first = parse(obj["metadata"]["creationTimestamp"]).replace(second=0) + timedelta(minutes=1)

        async def child(tick: datetime) -> dict[str, Any] | None:
            p.check()
            return next((j for j in await children(p, cron.name) if scheduled(j) >= tick), None)

        job = await until(lambda: child(first), timeout=150, message="no RayJob at the first tick")
        assert_child_of(job, cron, first)
        assert parse(job["metadata"]["creationTimestamp"]) >= first
        await assert_woken_by_timer(p, cron.key, first, job["metadata"]["name"])

        rayjob = Driver(p, job)
        await rayjob.wait_status(lambda s: s.get("jobDeploymentStatus") == "Complete", "completed")

        second = first + timedelta(minutes=1)
        job2 = await until(lambda: child(second), timeout=150, message="no RayJob at the second tick")
        assert_child_of(job2, cron, second)
        await assert_woken_by_timer(p, cron.key, second, job2["metadata"]["name"])
        assert [scheduled(j) for j in await children(p, cron.name)][:2] == [first, second]

        async def runs_recorded() -> dict[str, Any] | None:
            body = await asyncio.to_thread(status_api, p, f"/v1/raycronjobs/default/{cron.name}/runs")
            runs = body["runs"]
            ok = len(runs) >= 2 and runs[0]["deployment_status"] == "Complete" and runs[1]["rayjob_uid"]
            return body if ok else None

        body = await until(runs_recorded, message="the runs were not linked to their RayJobs' histories")
        run = body["runs"][0]
        assert (run["rayjob_name"], run["rayjob_uid"]) == (job["metadata"]["name"], job["metadata"]["uid"])
        linked = await asyncio.to_thread(status_api, p, run["history_url"])
        statuses = [t["to_value"] for t in linked["transitions"] if t["field"] == "jobDeploymentStatus"]
        assert statuses[-1] == "Complete"

        parser = argparse.ArgumentParser()
        history_cli.add_arguments(parser)
        url = f"http://127.0.0.1:{p.settings.status.http_port}"
        args = parser.parse_args(["raycronjob", f"default/{cron.name}", "--status-url", url])
        out, err = io.StringIO(), io.StringIO()
        assert await history_cli.run(args, env={}, out=out, err=err) == 0, err.getvalue()
        rows = out.getvalue().split("\nRuns (", 1)[1].splitlines()[2:4]
        assert rows[0].split()[:5] == [
            rfc3339(first).replace("Z", ".000Z"),
            "Scheduled",
            job["metadata"]["name"],
            job["metadata"]["uid"][:8],
            "Complete/SUCCEEDED",
        ]
        assert rows[1].split()[:3] == [rfc3339(second).replace("Z", ".000Z"), "Scheduled", job2["metadata"]["name"]]
        assert await p.denials() == []
