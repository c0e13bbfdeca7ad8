"""The NATS users of ``deploy/`` against a real nats-server: each service can do its job and nothing else.

The authorization block is taken from the rendered ConfigMap ``raybus-nats-config`` (``auth.conf``);
the passwords it reads from the environment get test values. The admin user creates the topology with
the services' own code (``services.runtime.topology``); then every user exercises its subjects, and the
denied operations must come back as permission violations.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schema import subjects
from schema.codec import encode
from schema.config import OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import CommandBatch, EmitEvent, ObjectRef, WatchEvent
from schema.replayview import ReplayRequest, ReplayView
from services.edge.apply.staleness import DecisionCheck
from services.reconciler.registry import default_reconcilers
from services.reconciler.worker.applied import AppliedFloor
from services.reconciler.worker.stalls import StallWatch
from services.replay.responder import serve_replays
from services.runtime.leases import Membership, PartitionLeases
from services.runtime.natsbin import nats_server_binary
from services.runtime.settings import BusSettings, PartitionSettings
from services.runtime.snapshots import SnapshotReader
from services.runtime.topology import ensure_topology
from services.status.busview import bus_view
from services.status.eventsview import key_events
from tests.deploy.render import find
from tests.deploy.test_nats_tls import make_certificates
from tests.fixtures.nats import NatsServer
from tests.helpers import eventually

USERS = ("admin", "watcher", "reconciler", "status")
PARTITIONS = 4
RECONCILE_LEASE = subjects.kv_subject(subjects.LEASES_BUCKET, subjects.lease_key("reconcile", 0))
KEY = ReconcileKey(kind="RayCluster", namespace="team-a", name="demo.cluster")


def _password(user: str) -> str:
    return f"test-{user}-password"


@pytest.fixture(scope="module")
def authorized_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server with the deployed authorization block (shared by the module's tests)."""
    config_dir = tmp_path_factory.mktemp("nats-auth")
    auth = find("base", "ConfigMap", "raybus-nats-config")["data"]["auth.conf"]
    (config_dir / "auth.conf").write_text(auth)
    (config_dir / "server.conf").write_text("include ./auth.conf\n")
    with pytest.MonkeyPatch.context() as env:
        for user in USERS:
            env.setenv(f"RAYBUS_NATS_{user.upper()}_PASSWORD", _password(user))
        nats_server = NatsServer(config_dir / "store", config=config_dir / "server.conf")
        nats_server.start()
    try:
        yield nats_server
    finally:
        nats_server.stop()


@pytest.fixture
async def server(authorized_server: NatsServer) -> NatsServer:
    """The shared server with raybus's topology, created by the admin user (idempotent, so per test)."""
    nc = await nats.connect(authorized_server.url, user="admin", password=_password("admin"))
    try:
        await ensure_topology(nc, bus=BusSettings(partitions=PARTITIONS), partitions=PartitionSettings())
    finally:
        await nc.close()
    return authorized_server


class User:
    """A connection of one user that records the permission violations the server reports."""

    def __init__(self, nc: Client, violations: list[str], connect: Callable[[], Awaitable[Client]]) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=5.0)
        self.violations = violations
        self.connect = connect
        """Opens another connection of this user, its violations recorded here too."""

    async def assert_denied_publish(self, subject: str) -> None:
        await self.nc.publish(subject, b"{}")
        # The server reports a denied PUB as an -ERR, handed to the error callback (lower-cased by nats-py).
        await eventually(lambda: f'publish to "{subject.lower()}"' in self.violations, message=subject)

    async def assert_denied_subscribe(self, subject: str) -> None:
        await self.nc.subscribe(subject)
        await eventually(lambda: f'subscription to "{subject.lower()}"' in self.violations, message=subject)


async def _connect(server: NatsServer, user: str) -> User:
    violations: list[str] = []

    async def record(exc: Exception) -> None:
        violations.append(str(exc).lower().removeprefix("nats: permissions violation for "))

    def connect() -> Awaitable[Client]:
        return nats.connect(server.url, user=user, password=_password(user), error_cb=record)

    return User(await connect(), violations, connect)


@pytest.fixture
async def watcher(server: NatsServer) -> AsyncIterator[User]:
    user = await _connect(server, "watcher")
    try:
        yield user
    finally:
        await user.nc.close()


@pytest.fixture
async def reconciler(server: NatsServer) -> AsyncIterator[User]:
    user = await _connect(server, "reconciler")
    try:
        yield user
    finally:
        await user.nc.close()


@pytest.fixture
async def status(server: NatsServer) -> AsyncIterator[User]:
    user = await _connect(server, "status")
    try:
        yield user
    finally:
        await user.nc.close()


async def eventually_fetched(sub: JetStreamContext.PullSubscription, count: int) -> list[Msg]:
    """The next ``count`` messages of ``sub``, however many fetches they take."""
    messages: list[Msg] = []
    while len(messages) < count:
        messages.extend(await sub.fetch(count - len(messages), timeout=5))
    return messages


def _batch(key: ReconcileKey, batch_id: str, *, revision: int) -> CommandBatch:
    """A decision of ``key`` with one command."""
    regarding = ObjectRef(api_version="ray.io/v1", kind=key.kind, namespace=key.namespace, name=key.name)
    event = EmitEvent(id="event", regarding=regarding, event_type="Normal", reason="Created", message="hello")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return CommandBatch(id=batch_id, key=key, issued_at=at, commands=(event,), snapshot_revision=revision)


def _key(name: str) -> ReconcileKey:
    return ReconcileKey(kind="RayJob", namespace="perm-tests", name=name)


async def test_watcher_does_its_job(watcher: User, server: NatsServer) -> None:
    key = _key("watcher-job")
    ack = await watcher.js.publish(subjects.events_subject(key), b"{}", headers={"Nats-Msg-Id": "uid/1/ADDED"})
    assert ack.stream == subjects.EVENTS_STREAM
    ack = await watcher.js.publish(subjects.result_subject(key), b"{}")
    assert ack.stream == subjects.RESULTS_STREAM
    ack = await watcher.js.publish(subjects.deadletter_subject(subjects.COMMANDS_STREAM), b"{}")
    assert ack.stream == subjects.DEADLETTER_STREAM

    objects = await watcher.js.key_value(subjects.OBJECTS_BUCKET)
    entry = subjects.entry_key(key, "Pod", "demo.pod-1")
    await objects.put(entry, b'{"kind": "Pod"}')
    assert (await objects.get(entry)).value == b'{"kind": "Pod"}'
    watch = await objects.watch(subjects.entry_prefix(key))
    try:
        first = await watch.updates(timeout=5)  # type: ignore[no-untyped-call]
        if first is None:  # nats-py's end-of-initial-values marker can come before the values
            first = await watch.updates(timeout=5)  # type: ignore[no-untyped-call]
        assert first is not None
        assert first.key == entry
    finally:
        await watch.stop()  # type: ignore[no-untyped-call]
    resume = await watcher.js.key_value(subjects.WATCHER_BUCKET)
    await resume.put(subjects.resume_key("pods"), b"12345")
    assert (await resume.get(subjects.resume_key("pods"))).value == b"12345"
    applied = await watcher.js.key_value(subjects.APPLIED_BUCKET)
    await applied.put(subjects.applied_key(key), b"7")
    assert (await applied.get(subjects.applied_key(key))).value == b"7"

    # The applier's work queue: a command published by the reconciler is fetched and acknowledged.
    reconciler = await _connect(server, "reconciler")
    try:
        await reconciler.js.publish(subjects.command_subject(key), b"[]")
    finally:
        await reconciler.nc.close()
    sub = await watcher.js.pull_subscribe_bind(
        durable=subjects.applier_consumer(subjects.partition_of(key, PARTITIONS)), stream=subjects.COMMANDS_STREAM
    )
    messages = await sub.fetch(1, timeout=5)
    assert subjects.key_from_stored_subject(messages[0].subject) == key
    await messages[0].ack_sync()

    # A batch delivered again: the applier looks up the key's last decision on the stream.
    older, newer = (_batch(key, f"b{n}", revision=n) for n in (1, 2))
    reconciler = await _connect(server, "reconciler")
    try:
        for batch in (older, newer):
            await reconciler.js.publish(subjects.command_subject(key), encode(batch))
    finally:
        await reconciler.nc.close()
    delivered = await eventually_fetched(sub, 2)
    await delivered[1].ack_sync()
    await delivered[0].nak()
    again = (await eventually_fetched(sub, 1))[0]
    assert again.metadata.num_delivered == 2
    review = await DecisionCheck(watcher.js, None).review(again, older, ())
    assert review.newer == "(command batch b2)"
    await again.ack_sync()

    # The appliers and probers share the partitions through their groups' leases.
    groups: tuple[subjects.LeaseGroup, ...] = ("apply", "probe")
    for group in groups:
        await _hold_every_partition(watcher, group)
    assert watcher.violations == []


async def _hold_every_partition(user: User, group: subjects.LeaseGroup) -> None:
    """Claim, renew and release every partition of ``group`` as the services do."""

    async def nothing(_: int) -> None:
        return None

    kv = await user.js.key_value(subjects.LEASES_BUCKET)
    settings = PartitionSettings(lease_ttl=2.0, renew_interval=0.2)
    membership = Membership(user.nc, kv, f"{group}-member", PARTITIONS, settings, connect=user.connect)
    leases = PartitionLeases(membership, group, start=nothing, stop=nothing)
    stop = asyncio.Event()
    running = asyncio.create_task(leases.run(stop))
    try:
        await eventually(lambda: leases.owned == frozenset(range(PARTITIONS)), message=f"every {group} partition")
        revision = (await kv.get(subjects.lease_key(group, 0))).revision or 0

        async def renewed() -> bool:  # by the renewal thread, on its own connection
            return ((await kv.get(subjects.lease_key(group, 0))).revision or 0) > revision

        await eventually(renewed, message=f"a {group} lease renewed")
    finally:
        stop.set()
        await running


async def test_reconciler_does_its_job(reconciler: User, server: NatsServer) -> None:
    key = _key("reconciler-job")
    outcomes = await reconciler.nc.subscribe(subjects.RESULTS_WILDCARD)  # which commands the applier carried out
    watcher = await _connect(server, "watcher")
    try:
        await watcher.js.publish(subjects.result_subject(key), b"{}")
        assert (await outcomes.next_msg(timeout=10)).subject == subjects.result_subject(key)
        event = WatchEvent(
            key=key,
            event_type="ADDED",
            entry_kind="RayJob",
            object={"kind": "RayJob"},
            resource_version="1",
            observed_at=datetime.now(UTC),
        )
        await watcher.js.publish(subjects.events_subject(key), encode(event))
        objects = await watcher.js.key_value(subjects.OBJECTS_BUCKET)
        revision = await objects.put(subjects.entry_key(key, "RayJob", key.name), b'{"kind": "RayJob"}')
    finally:
        await watcher.nc.close()

    # Every replica looks for inputs left undecided: the event, not fetched yet, is one.
    stalls = await StallWatch(reconciler.nc, partitions=PARTITIONS, stall_after=0).look()
    assert key in {stall.key for stall in stalls}

    # Find the event on its partition, as a worker holding every lease would.
    fetched = None
    for partition in range(PARTITIONS):
        info = await reconciler.js.consumer_info(subjects.EVENTS_STREAM, subjects.partition_consumer(partition))
        if info.num_pending:
            sub = await reconciler.js.pull_subscribe(
                subjects.partition_filter(partition),
                durable=subjects.partition_consumer(partition),
                stream=subjects.EVENTS_STREAM,
            )
            for message in await sub.fetch(info.num_pending, timeout=5):
                await message.ack_sync()
                fetched = fetched or (message.subject if message.subject.endswith(key.token()) else None)
    assert fetched is not None

    snapshot = await SnapshotReader(reconciler.nc).read(key, min_revision=revision)
    assert snapshot.owner() == {"kind": "RayJob"}
    objects = await reconciler.js.key_value(subjects.OBJECTS_BUCKET)
    assert (await objects.get(subjects.entry_key(key, "RayJob", key.name))).value == b'{"kind": "RayJob"}'

    ack = await reconciler.js.publish(subjects.command_subject(key), b"[]")
    assert ack.stream == subjects.COMMANDS_STREAM
    wake_at = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ack = await reconciler.js.publish(
        subjects.timer_subject(key),
        b"{}",
        headers={"Nats-Schedule": f"@at {wake_at}", "Nats-Schedule-Target": subjects.events_subject(key)},
    )
    assert ack.stream == subjects.EVENTS_STREAM
    ack = await reconciler.js.publish(subjects.deadletter_subject(subjects.EVENTS_STREAM), b"{}")
    assert ack.stream == subjects.DEADLETTER_STREAM

    await _hold_every_partition(reconciler, "reconcile")
    assert await AppliedFloor(reconciler.js).get(0) == 0  # how far the applier got, read without a violation
    assert reconciler.violations == []


async def test_status_does_its_job(status: User, server: NatsServer) -> None:
    key = _key("status-job")
    watcher = await _connect(server, "watcher")
    try:
        await watcher.js.publish(subjects.result_subject(key), b"{}")
    finally:
        await watcher.nc.close()
    sub = await status.js.pull_subscribe(
        subjects.RESULTS_WILDCARD, durable=subjects.STATUS_CONSUMER, stream=subjects.RESULTS_STREAM
    )
    found = False
    while not found:
        for message in await sub.fetch(10, timeout=5):
            await message.ack_sync()
            found = found or message.subject == subjects.result_subject(key)
    ack = await status.js.publish(subjects.deadletter_subject(subjects.RESULTS_STREAM), b"{}")
    assert ack.stream == subjects.DEADLETTER_STREAM
    assert status.violations == []


@pytest.mark.parametrize(
    "subject",
    [
        pytest.param(subjects.result_subject(KEY), id="results"),
        pytest.param(subjects.events_subject(KEY), id="events"),
        pytest.param(
            subjects.kv_subject(subjects.OBJECTS_BUCKET, subjects.entry_key(KEY, "Pod", "p")), id="kv-objects-write"
        ),
        pytest.param(subjects.kv_subject(subjects.WATCHER_BUCKET, subjects.resume_key("pods")), id="kv-watcher-write"),
        pytest.param(subjects.kv_subject(subjects.APPLIED_BUCKET, subjects.applied_key(KEY)), id="kv-applied-write"),
        pytest.param(
            subjects.pull_request_subject(subjects.COMMANDS_STREAM, subjects.applier_consumer(0)), id="applier-queue"
        ),
        pytest.param(
            subjects.pull_request_subject(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER), id="status-queue"
        ),
        pytest.param("$JS.API.STREAM.CREATE.RAYBUS_EXTRA", id="stream-create"),
        pytest.param(f"$JS.API.STREAM.DELETE.{subjects.EVENTS_STREAM}", id="stream-delete"),
        pytest.param(f"$JS.API.STREAM.PURGE.{subjects.EVENTS_STREAM}", id="stream-purge"),
        pytest.param(
            f"$JS.API.CONSUMER.DELETE.{subjects.EVENTS_STREAM}.{subjects.partition_consumer(0)}",
            id="partition-consumer-delete",
        ),
    ],
)
async def test_reconciler_is_denied(reconciler: User, subject: str) -> None:
    await reconciler.assert_denied_publish(subject)


async def test_reconciler_cannot_write_objects_through_kv(reconciler: User, server: NatsServer) -> None:
    objects = await reconciler.js.key_value(subjects.OBJECTS_BUCKET)
    entry = subjects.entry_key(_key("kv-denied"), "Pod", "p")
    await reconciler.assert_denied_publish(subjects.kv_subject(subjects.OBJECTS_BUCKET, entry))
    with pytest.raises(NotFoundError):
        await objects.get(entry)


async def test_reconciler_cannot_eavesdrop(reconciler: User) -> None:
    await reconciler.assert_denied_subscribe("raybus.>")


@pytest.mark.parametrize(
    "subject",
    [
        pytest.param(subjects.command_subject(KEY), id="commands"),
        pytest.param(subjects.timer_subject(KEY), id="timers"),
        pytest.param(subjects.events_subject(KEY), id="events"),
        pytest.param(subjects.result_subject(KEY), id="results"),
        pytest.param(
            subjects.kv_subject(subjects.OBJECTS_BUCKET, subjects.entry_key(KEY, "Pod", "p")), id="kv-objects-write"
        ),
        pytest.param(
            subjects.kv_subject(subjects.LEASES_BUCKET, subjects.lease_key("reconcile", 0)), id="kv-leases-write"
        ),
        pytest.param(subjects.direct_get_subject(subjects.kv_stream(subjects.OBJECTS_BUCKET)), id="kv-objects-read"),
        pytest.param(
            subjects.pull_request_subject(subjects.EVENTS_STREAM, subjects.partition_consumer(0)), id="partition-queue"
        ),
        pytest.param(
            subjects.pull_request_subject(subjects.COMMANDS_STREAM, subjects.applier_consumer(0)), id="applier-queue"
        ),
        pytest.param("$JS.API.STREAM.CREATE.RAYBUS_EXTRA", id="stream-create"),
    ],
)
async def test_status_is_denied(status: User, subject: str) -> None:
    await status.assert_denied_publish(subject)


@pytest.mark.parametrize(
    "subject",
    [
        pytest.param(subjects.command_subject(KEY), id="commands"),
        pytest.param(subjects.timer_subject(KEY), id="timers"),
        pytest.param(
            subjects.kv_subject(subjects.LEASES_BUCKET, subjects.lease_key("reconcile", 0)), id="kv-leases-write"
        ),
        pytest.param(
            subjects.pull_request_subject(subjects.EVENTS_STREAM, subjects.partition_consumer(0)), id="partition-queue"
        ),
        pytest.param(
            subjects.pull_request_subject(subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER), id="status-queue"
        ),
        pytest.param("$JS.API.STREAM.CREATE.RAYBUS_EXTRA", id="stream-create"),
        pytest.param(f"$JS.API.STREAM.UPDATE.{subjects.EVENTS_STREAM}", id="stream-update"),
    ],
)
async def test_watcher_is_denied(watcher: User, subject: str) -> None:
    await watcher.assert_denied_publish(subject)


def test_every_user_has_a_password_variable() -> None:
    """Each user's password is an environment variable of the NATS pods, fed by raybus-nats-users."""
    auth = find("base", "ConfigMap", "raybus-nats-config")["data"]["auth.conf"]
    statefulset = find("base", "StatefulSet", "raybus-nats")
    env = {e["name"]: e for e in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]}
    for user in USERS:
        variable = f"RAYBUS_NATS_{user.upper()}_PASSWORD"
        assert f"password: ${variable}" in auth
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "raybus-nats-users", "key": user}


def test_server_configs_parse(tmp_path: Path) -> None:
    """The full server config of the base (cluster) and of the dev overlay is valid for nats-server (with
    a certificate where the Secret raybus-nats-tls is mounted)."""
    certs = make_certificates(tmp_path / "certs")
    for tree in ("base", "overlays/dev"):
        data = find(tree, "ConfigMap", "raybus-nats-config")["data"]
        folder = tmp_path / tree.replace("/", "-")
        folder.mkdir()
        for name, text in data.items():
            (folder / name).write_text(text.replace("/etc/nats-tls/", f"{certs}/"))
        env = {"SERVER_NAME": "raybus-nats-0"} | {f"RAYBUS_NATS_{u.upper()}_PASSWORD": _password(u) for u in USERS}
        result = subprocess.run(
            [nats_server_binary(), "-t", "-c", str(folder / "nats.conf")],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert result.returncode == 0, result.stderr + result.stdout
    assert "cluster" not in find("overlays/dev", "ConfigMap", "raybus-nats-config")["data"]["nats.conf"].split("#")[0]


async def test_the_console_reads_the_bus_and_a_reconciler_replays_for_it(
    status: User, reconciler: User, server: NatsServer
) -> None:
    key = _key("console-job")
    ack = await reconciler.js.publish(subjects.command_subject(key), b"not a batch")
    assert ack.stream == subjects.COMMANDS_STREAM
    await reconciler.js.publish(subjects.deadletter_subject(subjects.EVENTS_STREAM), b"{}")

    bus = await bus_view(status.nc, partitions=PARTITIONS)
    assert len(bus.partitions) == PARTITIONS and bus.dead_letters_total >= 1
    assert (await key_events(status.nc, key)).items == []

    responder = await serve_replays(reconciler.nc, config=OperatorConfig(), reconcilers=default_reconcilers())
    try:
        request = ReplayRequest(kind=key.kind, namespace=key.namespace, name=key.name)
        answer = await status.nc.request(subjects.REPLAY_SUBJECT, msgspec.json.encode(request), timeout=30)
    finally:
        await responder.unsubscribe()
    view: ReplayView = msgspec.json.decode(answer.data, type=ReplayView)
    assert view.error == "" and view.steps == []  # the one recorded batch does not decode: nothing to replay
    assert status.violations == [] and reconciler.violations == []
