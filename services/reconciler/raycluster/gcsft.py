"""GCS fault tolerance outside the pods: the Redis-cleanup finalizer flow and the rocksdb PVC
(docs/behaviour.md#2.5, #3.8, #4.6).

Role: add ``ray.io/gcs-ft-redis-cleanup-finalizer`` to a Redis-backed cluster; on deletion, delete the
pods, wait for the head to go, run the Redis-cleanup Job and drop the finalizer when it finished (or
after ``ray.io/gcs-ft-deletion-timeout`` seconds); build the operator-managed rocksdb PVC.

Invariants: finalizer edits are merge patches of ``metadata.finalizers`` carrying the RayCluster's
resourceVersion (a stale edit is dropped by a 409 and redone on the newer snapshot); the cleanup Job has
a deterministic name, so a re-issued create is an AlreadyExists.

Not here: the GCS env vars and volumes of the head pod (``pod_bodies``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from schema.config import OperatorConfig
from schema.ray import conventions
from schema.times import parse_time
from services.reconciler.raycluster import containers, model, names, pod_bodies
from services.reconciler.raycluster.commands import Plan
from services.reconciler.raycluster.model import ClusterView
from services.reconciler.raycluster.pod_census import PodCensus

DEFAULT_DELETION_TIMEOUT: Final = 300
HEAD_WAIT_SECONDS: Final = 10.0
JOB_POLL_SECONDS: Final = 2.0

CLEANUP_SCRIPT: Final = (
    'echo "To get more information about manually deleting the storage namespace in Redis and removing '
    "the RayCluster's finalizer, please check https://docs.ray.io/en/master/cluster/kubernetes/user-guides/"
    'kuberay-gcs-ft.html for more details." && '
    'python -c "import os, sys; '
    "from urllib.parse import urlparse; "
    "from ray._private.gcs_utils import cleanup_redis_storage; "
    "address = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]; "
    "address = address if '://' in address else 'redis://' + address; "
    "parsed = urlparse(address); "
    "sys.exit(1) if not cleanup_redis_storage("
    "host=parsed.hostname, port=parsed.port, "
    "username=os.getenv('REDIS_USERNAME', parsed.username), "
    "password=os.getenv('REDIS_PASSWORD', parsed.password or ''), "
    "use_ssl=parsed.scheme == 'rediss', "
    "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None\""
)


def finalizer_applies(view: ClusterView, config: OperatorConfig) -> bool:
    """Redis-backed GCS FT with the cleanup switch on."""
    return model.gcs_backend(view) == "redis" and config.switches.enable_gcs_ft_redis_cleanup


def _finalizer_patch(view: ClusterView, plan: Plan, finalizers: list[str]) -> None:
    plan.patch(plan.owner, {"metadata": {"finalizers": finalizers}}, resource_version=view.resource_version)


def deletion_timeout(view: ClusterView) -> int:
    """``ray.io/gcs-ft-deletion-timeout`` seconds (default 300; unparsable → default)."""
    raw = view.annotations.get(conventions.ANN_GCS_FT_DELETION_TIMEOUT, "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_DELETION_TIMEOUT
    return value if value > 0 else DEFAULT_DELETION_TIMEOUT


def job_finished(job: dict[str, Any]) -> bool:
    """A Job with condition Complete, Failed or FailureTarget = True."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") in ("Complete", "Failed", "FailureTarget") and c.get("status") == "True"
        for c in conditions
    )


def handle_finalizer(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    jobs: list[dict[str, Any]],
    now: datetime,
    plan: Plan,
) -> bool:
    """docs/behaviour.md#4.1 step 10. Returns True when this pass ends here (finalizer added, or being deleted)."""
    has_finalizer = conventions.FINALIZER_GCS_FT in view.finalizers
    deleting = bool(view.deletion_timestamp)
    others = [f for f in view.finalizers if f != conventions.FINALIZER_GCS_FT]
    if finalizer_applies(view, config):
        if not has_finalizer and not deleting:
            _finalizer_patch(view, plan, [*view.finalizers, conventions.FINALIZER_GCS_FT])
            plan.rule("2.5/add-gcs-ft-finalizer")
            plan.requeue(JOB_POLL_SECONDS)
            return True
        if deleting and has_finalizer:
            _cleanup_flow(view, config, census=census, jobs=jobs, now=now, plan=plan, others=others)
            return True
    elif deleting and has_finalizer:
        _finalizer_patch(view, plan, others)
        plan.rule("4.6/remove-finalizer-no-redis")
        return True
    if deleting:
        plan.rule("4.1/being-deleted")
        return True
    return False


def _cleanup_flow(
    view: ClusterView,
    config: OperatorConfig,
    *,
    census: PodCensus,
    jobs: list[dict[str, Any]],
    now: datetime,
    plan: Plan,
    others: list[str],
) -> None:
    heads = census.heads
    workers = census.workers
    if any(not p.terminating for p in heads):
        plan.delete_collection(
            "Pod",
            names.selector({conventions.LABEL_CLUSTER: view.name, conventions.LABEL_NODE_TYPE: conventions.NODE_HEAD}),
        )
        plan.rule("4.6/delete-head-pods")
    if any(not p.terminating for p in workers):
        plan.delete_collection(
            "Pod",
            names.selector(
                {conventions.LABEL_CLUSTER: view.name, conventions.LABEL_NODE_TYPE: conventions.NODE_WORKER}
            ),
        )
        plan.rule("4.6/delete-worker-pods")
    if heads:
        plan.rule("4.6/wait-head-terminated")
        plan.requeue(HEAD_WAIT_SECONDS)
        return
    deleted_at = parse_time(view.deletion_timestamp)
    if deleted_at is not None and now >= deleted_at + timedelta(seconds=deletion_timeout(view)):
        plan.event(
            "Warning",
            "ForceDeletedStuckCluster",
            f"RayCluster {view.namespace}/{view.name} has been stuck in deletion for more than "
            f"{deletion_timeout(view)} seconds; the finalizer {conventions.FINALIZER_GCS_FT} is removed without "
            "cleaning up Redis.",
        )
        _finalizer_patch(view, plan, others)
        plan.rule("4.6/force-remove-finalizer")
        return
    mine = [
        j
        for j in jobs
        if ((j.get("metadata") or {}).get("labels") or {}).get(conventions.LABEL_NODE_TYPE)
        == conventions.NODE_REDIS_CLEANUP
        and ((j.get("metadata") or {}).get("labels") or {}).get(conventions.LABEL_CLUSTER) == view.name
    ]
    if mine:
        if job_finished(mine[0]):
            _finalizer_patch(view, plan, others)
            plan.rule("4.6/cleanup-finished")
        else:
            plan.rule("4.6/cleanup-running")
            plan.requeue(JOB_POLL_SECONDS)
        return
    job = redis_cleanup_job(view, config)
    plan.create("Job", job)
    plan.event(
        "Normal", "CreatedRedisCleanupJob", f"Created Redis cleanup Job {view.namespace}/{job['metadata']['name']}"
    )
    plan.rule("4.6/create-cleanup-job")
    plan.requeue(JOB_POLL_SECONDS)


def redis_cleanup_job(view: ClusterView, config: OperatorConfig) -> dict[str, Any]:
    """The Job that deletes the cluster's storage namespace in Redis (built from the head pod)."""
    head = pod_bodies.head_pod(view, config, name="redis-cleanup", spec_hash="")
    labels = dict(head["metadata"]["labels"])
    labels[conventions.LABEL_NODE_TYPE] = conventions.NODE_REDIS_CLEANUP
    spec = head["spec"]
    container = dict(spec["containers"][0])
    container.pop("livenessProbe", None)
    container.pop("readinessProbe", None)
    container["command"] = containers.shell_command(login_shell=config.switches.enable_login_shell)
    container["args"] = [CLEANUP_SCRIPT]
    container["resources"] = containers.fixed_resources("200m", "256Mi")
    container["env"] = [
        *container.get("env", []),
        {"name": "RAY_redis_db_connect_retries", "value": "120"},
        {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
    ]
    pod_spec = {**spec, "containers": [container], "restartPolicy": "Never"}
    pod_meta: dict[str, Any] = {"labels": labels}
    if head["metadata"].get("annotations"):
        pod_meta["annotations"] = head["metadata"]["annotations"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.redis_cleanup_job_name(view.name),
            "namespace": view.namespace,
            "labels": labels,
            "ownerReferences": [pod_bodies.owner_reference_of(view)],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 300,
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def gcs_pvc(view: ClusterView) -> dict[str, Any] | None:
    """The operator-managed rocksdb PVC, or None (not rocksdb, or a bring-your-own claim)."""
    if model.gcs_backend(view) != "rocksdb":
        return None
    options = view.spec.gcs_fault_tolerance_options
    storage = options.storage if options is not None else None
    if storage is not None and storage.claim_name:
        return None
    spec: dict[str, Any] = {
        "accessModes": list(storage.access_modes)
        if storage is not None and storage.access_modes
        else ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(storage.size) if storage is not None and storage.size else "1Gi"}},
    }
    if storage is not None and storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    metadata: dict[str, Any] = {
        "name": names.gcs_pvc_name(view.name),
        "namespace": view.namespace,
        "labels": {conventions.LABEL_CLUSTER: view.name},
    }
    if not (storage is not None and storage.deletion_policy == "Retain"):
        metadata["ownerReferences"] = [pod_bodies.owner_reference_of(view)]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}
