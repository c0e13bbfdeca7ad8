"""KubeRay's RayJob metrics derived from persisted transitions (``services/status/metrics.py``), on
SQLite and PostgreSQL: info and deployment status per live RayJob, execution durations with KubeRay's
labels (retries included), redelivery counted once, a restart seeded from the history, and the series
of a deleted RayJob gone."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from schema.messages import CommandResult
from services.status.metrics import ResourceMetrics
from services.status.store import StatusStore
from tests.component.status.conftest import records
from tests.component.status.test_rayservices import metric_points
from tests.unit.status.builders import lifecycle, result, transition

JOB = {"name": "demo", "namespace": "default", "uid": "rj-1"}


def write(seconds: float, rv: str, *moves: tuple[str, str], batch: str) -> CommandResult:
    """One status write of the RayJob moving jobDeploymentStatus through ``moves``."""
    steps = [transition("jobDeploymentStatus", a, b, uid="rj-1", seconds=seconds, rv=rv) for a, b in moves]
    return result(*steps, batch_id=batch)


def retried_history() -> list[CommandResult]:
    """backoffLimit 1: the first attempt fails after 10 s and is retried, the second succeeds after 5 s."""
    return [
        lifecycle("created", uid="rj-1", kind="RayJob", name="demo"),
        write(1, "2", ("", "Initializing"), batch="b1"),
        write(3, "3", ("Initializing", "Running"), batch="b2"),
        write(11, "4", ("Running", "Failed"), ("Failed", "Retrying"), batch="b3"),
        write(12, "5", ("Retrying", ""), batch="b4"),
        write(13, "6", ("", "Initializing"), batch="b5"),
        write(14, "7", ("Initializing", "Running"), batch="b6"),
        write(18, "8", ("Running", "Complete"), batch="b7"),
    ]


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[float, dict[str, Any]]]:
    return sorted(((p.value, dict(p.attributes)) for p in metric_points(reader).get(name, [])), key=lambda x: str(x[1]))


async def test_rayjob_metrics(store: StatusStore) -> None:
    reader = InMemoryMetricReader()
    metrics = ResourceMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    history = retried_history()
    running = history[:4]  # created, Initializing, Running, then the failed attempt's write
    metrics.observe(await store.persist(records(running)))
    assert points(reader, "kuberay_job_info") == [(1, JOB)]
    assert points(reader, "kuberay_job_deployment_status") == [(1, {**JOB, "deployment_status": "Retrying"})]
    retry = {**JOB, "job_deployment_status": "Retrying", "retry_count": "0"}
    assert points(reader, "kuberay_job_execution_duration_seconds") == [(10.0, retry)]

    metrics.observe(await store.persist(records(history)))  # the rest, with the first part redelivered
    assert points(reader, "kuberay_job_deployment_status") == [(1, {**JOB, "deployment_status": "Complete"})]
    complete = {**JOB, "job_deployment_status": "Complete", "retry_count": "1"}
    assert points(reader, "kuberay_job_execution_duration_seconds") == [(5.0, complete), (10.0, retry)]

    restarted = ResourceMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("test"))
    await restarted.load(store)
    assert restarted.live_rayjobs == {"rj-1": "Complete"}

    gone = [*history, lifecycle("deleted", uid="rj-1", kind="RayJob", name="demo", seconds=30, rv="9")]
    metrics.observe(await store.persist(records(gone)))
    for name in ("kuberay_job_info", "kuberay_job_deployment_status", "kuberay_job_execution_duration_seconds"):
        assert points(reader, name) == [], name


async def test_a_restart_seeds_the_attempt_and_the_failures(store: StatusStore) -> None:
    """A status service started while a retried RayJob runs: the attempt's start and the failures so far
    come from the history, so the duration and retry_count of its end are still KubeRay's."""
    history = retried_history()
    await store.persist(records(history[:-1]))  # up to the second attempt's Running
    reader = InMemoryMetricReader()
    metrics = ResourceMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    await metrics.load(store)
    assert metrics.live_rayjobs == {"rj-1": "Running"}
    metrics.observe(await store.persist(records(history)))
    complete = {**JOB, "job_deployment_status": "Complete", "retry_count": "1"}
    assert points(reader, "kuberay_job_execution_duration_seconds") == [(5.0, complete)]


async def test_instances_without_a_meter_report_their_own_state(store: StatusStore) -> None:
    """Two status services in one process (a restart): the second one's gauges are not shadowed by the
    first one's, which reports nothing once closed."""
    first, second = ResourceMetrics(), ResourceMetrics()
    first.close()
    await store.persist(records(retried_history()))
    await second.load(store)
    assert first.live_rayjobs == {} and second.live_rayjobs == {"rj-1": "Complete"}


def cluster_write(seconds: float, rv: str, field: str, a: str, b: str, *, uid: str, name: str) -> CommandResult:
    """One status write of a RayCluster moving ``field`` from ``a`` to ``b``."""
    step = transition(field, a, b, uid=uid, kind="RayCluster", name=name, seconds=seconds, rv=rv)
    return result(step, kind="RayCluster", name=name, batch_id=f"{name}-{rv}")


async def test_raycluster_metrics_with_kuberays_names_and_labels(store: StatusStore) -> None:
    reader = InMemoryMetricReader()
    metrics = ResourceMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    job_cluster = {"name": "demo-abcde", "namespace": "default", "uid": "rc-job"}
    plain = {"name": "plain", "namespace": "default", "uid": "rc-plain"}
    initializing = transition(
        "jobDeploymentStatus",
        "",
        "Initializing",
        uid="rj-1",
        seconds=1,
        rv="2",
        attributes={"rayClusterName": "demo-abcde"},
    )
    history = [
        lifecycle("created", uid="rj-1", kind="RayJob", name="demo"),
        result(initializing, batch_id="job-1"),
        lifecycle("created", uid="rc-job", kind="RayCluster", name="demo-abcde", seconds=1),
        cluster_write(4.5, "3", "condition/RayClusterProvisioned", "", "True", uid="rc-job", name="demo-abcde"),
        lifecycle("created", uid="rc-plain", kind="RayCluster", name="plain", seconds=2),
        cluster_write(3, "4", "condition/RayClusterProvisioned", "", "False", uid="rc-plain", name="plain"),
    ]
    metrics.observe(await store.persist(records(history)))
    assert points(reader, "kuberay_cluster_info") == [
        (1, {**job_cluster, "owner_kind": "RayJob"}),
        (1, {**plain, "owner_kind": "None"}),
    ]
    assert points(reader, "kuberay_cluster_condition_provisioned") == [
        (1, {**job_cluster, "condition": "true"}),
        (1, {**plain, "condition": "false"}),
    ]
    assert points(reader, "kuberay_cluster_provisioned_duration_seconds") == [(3.5, job_cluster)]

    restarted = ResourceMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("test"))
    await restarted.load(store)
    assert restarted.live_rayclusters == {"rc-job": "RayJob", "rc-plain": "None"}

    deleted = lifecycle("deleted", uid="rc-job", kind="RayCluster", name="demo-abcde", seconds=9, rv="5")
    metrics.observe(await store.persist(records([*history, deleted])))
    assert points(reader, "kuberay_cluster_info") == [(1, {**plain, "owner_kind": "None"})]
    assert points(reader, "kuberay_cluster_provisioned_duration_seconds") == []
