"""The reconciler's NATS user may publish schedules with any ``Nats-Schedule-Target``: what a schedule
delivers is accepted only as a timer tick of the schedule's own key, never later than the stream stored
it. Checked against a nats-server loading the deployed authorization block."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import nats
import pytest

from schema import subjects
from schema.codec import decode_input, encode
from schema.keys import ReconcileKey
from schema.messages import TimerTick, WatchEvent
from services.reconciler.worker.consumer import checked_origin
from services.reconciler.worker.timers import TimerScheduler, schedule_header
from tests.deploy.test_nats_permissions import _password, authorized_server, server  # noqa: F401
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually, stored_messages

OWN = ReconcileKey(kind="RayCluster", namespace="team-a", name="own")
OTHER = ReconcileKey(kind="RayCluster", namespace="team-a", name="other")
AHEAD = ReconcileKey(kind="RayCluster", namespace="team-a", name="ahead")
VICTIM = ReconcileKey(kind="RayCluster", namespace="team-b", name="victim")


async def test_a_schedule_delivers_only_its_own_keys_tick_and_never_moves_time_ahead(server: NatsServer) -> None:  # noqa: F811
    reconciler = await nats.connect(server.url, user="reconciler", password=_password("reconciler"))
    admin = await nats.connect(server.url, user="admin", password=_password("admin"))
    try:
        js = reconciler.jetstream()
        now = datetime.now(UTC)
        forged_event = WatchEvent(
            key=VICTIM, event_type="DELETED", entry_kind="RayCluster", object={}, resource_version="1", observed_at=now
        )
        forged = {
            "a forged event": (OWN, VICTIM, encode(forged_event)),
            "a tick for another key": (OTHER, VICTIM, encode(TimerTick(key=VICTIM, due_at=now))),
            "a tick far ahead": (AHEAD, AHEAD, encode(TimerTick(key=AHEAD, due_at=now + timedelta(days=365)))),
        }
        for schedule_key, target_key, payload in forged.values():
            headers = {
                "Nats-Schedule": schedule_header(now),
                "Nats-Schedule-Target": subjects.events_subject(target_key),
            }
            await js.publish(subjects.timer_subject(schedule_key), payload, headers=headers)
        await TimerScheduler(js).schedule(VICTIM, now, reason="the victim's own")

        fired: list[nats.aio.msg.Msg] = []

        async def all_fired() -> bool:
            stored = await stored_messages(admin.jetstream(), subjects.EVENTS_STREAM, "raybus.part.>")
            fired[:] = [m for m in stored if subjects.key_from_stored_subject(m.subject) in (VICTIM, AHEAD)]
            return len(fired) == 4

        await eventually(all_fired, timeout=30, message="the schedules did not all fire")
        outcomes: list[str] = []
        for msg in fired:
            try:
                message = checked_origin(decode_input(msg.data), msg)
            except ValueError as exc:
                outcomes.append(str(exc))
                continue
            assert isinstance(message, TimerTick)
            assert message.due_at <= msg.metadata.timestamp
            outcomes.append(f"accepted {message.key.name} {message.reason or 'clamped'}")
        assert sorted(outcomes) == sorted(
            [
                f"the schedule {subjects.timer_subject(OWN)} published a WatchEvent, not a timer tick",
                f"a timer tick must come from the schedule {subjects.timer_subject(VICTIM)}, "
                f"not {subjects.timer_subject(OTHER)}",
                "accepted ahead clamped",
                "accepted victim the victim's own",
            ]
        )
    finally:
        await reconciler.close()
        await admin.close()


async def test_a_tick_published_directly_is_refused(server: NatsServer) -> None:  # noqa: F811
    watcher = await nats.connect(server.url, user="watcher", password=_password("watcher"))
    admin = await nats.connect(server.url, user="admin", password=_password("admin"))
    try:
        key = ReconcileKey(kind="RayCluster", namespace="team-a", name="direct")
        await watcher.jetstream().publish(
            subjects.events_subject(key), encode(TimerTick(key=key, due_at=datetime.now(UTC)))
        )
        [msg] = await stored_messages(admin.jetstream(), subjects.EVENTS_STREAM, f"raybus.part.*.{key.token()}")
        with pytest.raises(ValueError, match="must come from the schedule"):
            checked_origin(decode_input(msg.data), msg)
    finally:
        await watcher.close()
        await admin.close()
