"""The whole raybus pipeline in one test process, on real servers.

nats-server runs as a child process (restartable with its file store), kubesim in its own thread with the
kubelet and dashboard simulators, and the watcher, reconciler and status services as asyncio tasks of the
test, each restartable on its own. In-process services share one tracer provider, so a test can follow
one trace from the watch event to the persisted transition. The kill -9 test runs its reconcilers as real
``raybus reconciler`` processes instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from kubernetes import client
from nats.aio.client import Client

from schema import codec, subjects
from schema.crd import write_crds
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    CommandResult,
    Observation,
    PatchObject,
    PatchStatus,
    WatchEvent,
    command_target,
    command_verb,
)
from services.edge.service import run_watcher
from services.reconciler.worker.service import run_reconciler
from services.runtime.health import HealthServer
from services.runtime.settings import (
    BusSettings,
    KubeSettings,
    NatsSettings,
    PartitionSettings,
    RaybusSettings,
    StatusSettings,
    WatcherRole,
)
from services.status.service import run_status
from tests.fixtures.kubesim import KubeSimHandle, running_kubesim
from tests.fixtures.nats import NatsServer, free_port
from tests.helpers import conformance_dir, eventually, reap_tasks, stored_messages

ServiceFn = Callable[[RaybusSettings, asyncio.Event, HealthServer], Coroutine[Any, Any, None]]


def gateway_api_crds() -> Path:
    """The Gateway API standard-channel CRDs (what a cluster admin installs for incremental upgrades)."""
    return conformance_dir() / "gateway-api"


@dataclass
class Component:
    """One in-process service task that can be stopped and started again."""

    name: str
    run: ServiceFn
    settings: RaybusSettings
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    health: HealthServer = field(default_factory=lambda: HealthServer(host="127.0.0.1", port=0))

    def start(self) -> None:
        self.stop_event = asyncio.Event()
        self.health = HealthServer(host="127.0.0.1", port=0)
        self.task = asyncio.create_task(self.run(self.settings, self.stop_event, self.health), name=self.name)

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait until the service's readiness checks pass (or raise if it died)."""

        def probe() -> bool:
            self.check()
            return not self.health.readiness()

        await eventually(probe, timeout=timeout, message=f"{self.name} never became ready")

    async def stop(self, timeout: float = 30.0) -> None:
        if self.task is None:
            return
        self.stop_event.set()
        try:
            await asyncio.wait_for(self.task, timeout)
        finally:
            self.task = None

    def check(self) -> None:
        """Raise the service's exception if it died."""
        if self.task is not None and self.task.done() and not self.task.cancelled():
            exc = self.task.exception()
            if exc is not None:
                raise RuntimeError(f"{self.name} crashed") from exc


@dataclass
class Pipeline:
    """Handles on every part of a running pipeline."""

    nats: NatsServer
    kube: KubeSimHandle
    settings: RaybusSettings
    components: dict[str, Component]
    workdir: Path

    @property
    def api(self) -> client.ApiClient:
        return self.kube.api_client

    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube.api_client)

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.kube.api_client)

    async def nc(self) -> Client:
        return await nats.connect(self.nats.url)

    async def restart(self, name: str) -> None:
        await self.components[name].stop()
        self.components[name].start()
        await self.components[name].ready()

    def check(self) -> None:
        for component in self.components.values():
            component.check()

    async def trail(self, key: ReconcileKey, *, last: int = 20) -> str:
        """The last ``last`` inputs, decisions and command results of ``key`` as stored on the bus, one line
        each in stream order: what a failed wait shows, so that a stalled key can be diagnosed from the test's
        output (which input came, which decision took it, on which snapshot, and what each patch was based on)."""
        nc = await self.nc()
        try:
            js = nc.jetstream()
            inputs = await stored_messages(js, subjects.EVENTS_STREAM, subjects.stored_events_filter(key))
            batches = await stored_messages(js, subjects.COMMANDS_STREAM, subjects.stored_commands_filter(key))
            results = await stored_messages(js, subjects.RESULTS_STREAM, subjects.result_subject(key))
        finally:
            await nc.close()
        lines = [f"  input {msg.metadata.sequence.stream} {_described(msg.data)}" for msg in inputs[-last:]]
        for msg in batches[-last:]:
            batch = codec.decode_batch(msg.data)
            verbs = [_command_line(c) for c in batch.commands]
            lines.append(
                f"  decision {batch.issued_at:%H:%M:%S.%f} of inputs {list(batch.inputs)} at revision"
                f" {batch.snapshot_revision} rules {list(batch.rules)} commands {verbs}"
                f" withheld {len(batch.suppressed)} wake {batch.wake_at}"
            )
        for result in [r for msg in results for r in codec.decode_results(msg.data)][-last:]:
            lines.append(f"  result {result.verb} {result.target}: {result.outcome} {result.error[:200]}")
        return "\n".join(lines)

    async def denials(self) -> list[CommandResult]:
        """Every command the applier refused as outside its key's authority so far (from the results)."""
        nc = await self.nc()
        try:
            stored = await stored_messages(nc.jetstream(), subjects.RESULTS_STREAM)
        finally:
            await nc.close()
        return [r for m in stored for r in codec.decode_results(m.data) if r.outcome == "denied"]


def pipeline_settings(nats_url: str, kubeconfig: str, db_url: str, *, partitions: int = 8) -> RaybusSettings:
    """Settings for a fast test pipeline (short lease TTL and ack wait so failover is quick; one build, so
    results go out batched, as under ``raybus up``)."""
    return RaybusSettings(
        nats=NatsSettings(url=nats_url),
        bus=BusSettings(partitions=partitions, ack_wait=5.0, max_deliver=5, result_batches=True),
        partitions=PartitionSettings(lease_ttl=3.0, renew_interval=0.5, exit_timeout=10.0),
        kube=KubeSettings(kubeconfig=kubeconfig, use_kubernetes_proxy=True, dashboard_poll_interval=0.5),
        status=StatusSettings(db_url=db_url, http_port=free_port()),
    )


def as_replica(settings: RaybusSettings, worker_id: str, roles: tuple[WatcherRole, ...] = ()) -> RaybusSettings:
    """The settings of one replica: its identity and, for a watcher, its roles."""
    partitions = dataclasses.replace(settings.partitions, worker_id=worker_id)
    kube = dataclasses.replace(settings.kube, roles=roles) if roles else settings.kube
    return dataclasses.replace(settings, partitions=partitions, kube=kube)


@contextlib.asynccontextmanager
async def running_pipeline(
    workdir: Path,
    *,
    db_url: str | None = None,
    kubelet: str = "instant",
    ray: str = "sim",
    with_reconciler: bool = True,
    replicas: int = 0,
    settings_hook: Callable[[RaybusSettings], RaybusSettings] | None = None,
    extra_crds: Sequence[Path] = (),
) -> AsyncIterator[Pipeline]:
    """Start nats-server, kubesim and the three services; stop them all afterwards.

    ``replicas=0`` runs one watcher with every role (component ``watcher``) and one reconciler; ``replicas=N``
    runs every stage apart, as ``deploy/`` does: the watch side (``watch``), and N replicas each of the
    applier (``applier-1``…), the prober (``prober-1``…) and the reconciler (``reconciler-1``…).

    ``extra_crds`` (files or directories) are registered beside raybus's own, before anything starts,
    e.g. the Gateway API CRDs a RayService incremental upgrade needs (:func:`gateway_api_crds`).
    ``ray="real"`` makes kubesim run a real Ray head for every head Pod (the real-Ray tier).
    """
    crds = workdir / "crds"
    write_crds(crds)
    server = NatsServer(workdir / "nats")
    await asyncio.to_thread(server.start)
    try:
        async with running_kubesim(
            kubelet=kubelet, ray=ray, crd_paths=[crds, *extra_crds], workdir=workdir / "kube"
        ) as kube:
            settings = pipeline_settings(
                server.url, str(kube.kubeconfig), db_url or f"sqlite+aiosqlite:///{workdir}/raybus.db"
            )
            if settings_hook is not None:
                settings = settings_hook(settings)
            components = {"status": Component("status", run_status, settings)}
            if replicas:
                components["watch"] = Component("watch", run_watcher, as_replica(settings, "watch", ("watch",)))
                stages: tuple[tuple[str, WatcherRole], ...] = (("applier", "apply"), ("prober", "probe"))
                for n in range(1, replicas + 1):
                    for stage, role in stages:
                        name = f"{stage}-{n}"
                        components[name] = Component(name, run_watcher, as_replica(settings, name, (role,)))
                    if with_reconciler:
                        name = f"reconciler-{n}"
                        components[name] = Component(name, run_reconciler, as_replica(settings, name))
            else:
                components["watcher"] = Component("watcher", run_watcher, settings)
                if with_reconciler:
                    components["reconciler"] = Component(
                        "reconciler", run_reconciler, as_replica(settings, "in-process")
                    )
            for component in components.values():
                component.start()
            for component in components.values():
                await component.ready()
            pipeline = Pipeline(nats=server, kube=kube, settings=settings, components=components, workdir=workdir)
            try:
                yield pipeline
            finally:
                for component in reversed(components.values()):  # the status service last
                    with contextlib.suppress(Exception):
                        await component.stop()
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def shared_pipeline(workdir: Path, **kwargs: Any) -> AsyncIterator[Pipeline]:
    """``running_pipeline`` for a whole test module, failing if it leaves asyncio tasks behind once stopped.

    Its services start tasks of their own at any time, so the project's per-test leak guard cannot tell
    them from a test's: modules using it replace that guard with a no-op and the check runs once, here.
    """
    before = asyncio.all_tasks()
    async with running_pipeline(workdir, **kwargs) as p:
        yield p
    leaked = await reap_tasks(before)
    assert not leaked, f"the pipeline left {len(leaked)} task(s) running: {leaked}"


@pytest.fixture(autouse=True, name="_no_leaked_tasks")
def shared_pipeline_leak_guard() -> None:
    """The no-op that replaces the per-test leak guard in a module that imports it and runs on a
    ``shared_pipeline`` (which checks once the module's pipeline stopped)."""


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    """Documents of a YAML file (non-dicts dropped)."""
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def to_plain(obj: Any) -> Any:
    """A Kubernetes client model or dict as plain JSON data."""
    return msgspec.json.decode(msgspec.json.encode(obj)) if isinstance(obj, dict) else obj.to_dict()


def _described(data: bytes) -> str:
    """One input of a trail: what it is and what it carries of the key's state."""
    message = codec.decode_input(data)
    if isinstance(message, WatchEvent):
        name = message.object.get("metadata", {}).get("name")
        status_only = " status-only" if message.status_only else ""
        return (
            f"{message.event_type} {message.entry_kind} {name} rv {message.resource_version}{status_only}"
            f" at revision {message.kv_revision}"
        )
    if isinstance(message, Observation):
        return f"observation {message.source} {message.entry_name} at revision {message.kv_revision}"
    return f"tick {message.reason or 'wake'} due {message.due_at:%H:%M:%S.%f}"


def _command_line(command: Command) -> str:
    """One command of a trail; a patch names the version it was decided on, a status patch also its fields."""
    line = f"{command_verb(command)} {command_target(command)}"
    if isinstance(command, PatchStatus):
        return f"{line}@{command.resource_version} {json.dumps(command.status, sort_keys=True)[:300]}"
    if isinstance(command, PatchObject) and command.resource_version:
        return f"{line}@{command.resource_version}"
    return line
