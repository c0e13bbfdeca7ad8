"""The batch/v1 Job controller simulator (what kube-controller-manager does for KubeRay's submitter Jobs).

Per Job: create pods from the template (``generateName: <job>-``, labels ``batch.kubernetes.io/job-name``,
``job-name``, ``batch.kubernetes.io/controller-uid``, ``controller-uid``, a controlling ownerReference)
until ``completions`` (default 1) pods succeeded, at most ``parallelism`` (default 1) at a time; a failed
pod is replaced until more than ``backoffLimit`` (default 6) pods failed. Status: ``startTime``,
``active``/``ready``/``succeeded``/``failed``, and the terminal conditions of Kubernetes ≥ 1.31
(``SuccessCriteriaMet`` + ``Complete`` with ``completionTime``, or ``FailureTarget`` + ``Failed`` with
reason ``BackoffLimitExceeded`` or ``DeadlineExceeded``). Remaining active pods of a finished Job are
deleted; finished pods are kept (KubeRay reads the submitter's logs and state from them). ``suspend``
deletes the active pods and sets ``Suspended``.

Counting is done by listing the Job's pods, not with tracking finalizers: deleting a failed pod of a running
Job by hand makes it count again. Indexed completion, pod failure policies and success policies are not
modelled.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from kubesim.dashboard import Clock
from kubesim.hooks import Store, StoreEvent
from kubesim.sims.loop import WorkQueue, consume, process
from kubesim.sims.objects import (
    JOBS,
    PODS,
    api_error_code,
    controller_owner_uid,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    rfc3339,
    spec_of,
    status_of,
    uid_of,
)
from kubesim.sims.options import SimOptions

logger = logging.getLogger(__name__)

JobKey = tuple[str, str]
_TERMINAL = ("Complete", "Failed")


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status_of(pod).get("conditions") or [])


def _condition(kind: str, now: str, *, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class JobController:
    """Runs batch/v1 Jobs with pods the kubelet simulator then plays."""

    def __init__(self, *, options: SimOptions, clock: Clock) -> None:
        self._options = options
        self._clock = clock
        self._store: Store | None = None
        self._queue: WorkQueue[JobKey] = WorkQueue()
        self._failures_seen: dict[str, tuple[int, float]] = {}
        self._started: dict[str, float] = {}

    async def run(self, store: Store) -> None:
        """Run until cancelled."""
        self._store = store
        worker = asyncio.ensure_future(process(self._queue, self._reconcile, what="job controller"))
        try:
            await consume(store, self._on_event, initial=[JOBS, PODS])
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)

    def _on_event(self, event: StoreEvent) -> None:
        obj = event.object
        if event.gvr == JOBS:
            if event.type == "DELETED":
                self._failures_seen.pop(uid_of(obj), None)
                self._started.pop(uid_of(obj), None)
                return
            self._queue.add((namespace_of(obj), name_of(obj)))
        elif event.gvr == PODS:
            for ref in meta(obj).get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    self._queue.add((namespace_of(obj), str(ref.get("name", ""))))

    def _reconcile(self, key: JobKey) -> None:
        store = self._store
        if store is None:
            return
        namespace, name = key
        job = store.get(JOBS, namespace, name)
        if job is None or is_terminating(job):
            return
        uid = uid_of(job)
        spec = spec_of(job)
        status = copy.deepcopy(status_of(job))
        conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
        if any(c.get("type") in _TERMINAL and c.get("status") == "True" for c in conditions):
            return
        now_wall = self._clock.time()
        now = rfc3339(now_wall)
        # Like the real controller, select the Job's pods by its controller-uid label (filtered before
        # the store copies them: copying every pod of the namespace per Job made this quadratic).
        owned = store.list(PODS, namespace, label_selector=f"batch.kubernetes.io/controller-uid={uid}")
        pods = [p for p in owned if controller_owner_uid(p, "Job") == uid]
        active = [p for p in pods if status_of(p).get("phase") not in ("Succeeded", "Failed") and not is_terminating(p)]
        succeeded = sum(1 for p in pods if status_of(p).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if status_of(p).get("phase") == "Failed")
        completions = _int(spec.get("completions"), 1)
        parallelism = _int(spec.get("parallelism"), 1)
        backoff_limit = _int(spec.get("backoffLimit"), 6)
        deadline = spec.get("activeDeadlineSeconds")
        suspended = bool(spec.get("suspend"))

        conditions = [c for c in conditions if c.get("type") != "Suspended" or suspended]
        finish: str | None = None
        if suspended:
            self._delete_pods(store, active)
            active = []
            if not any(c.get("type") == "Suspended" for c in conditions):
                conditions.append(_condition("Suspended", now, reason="JobSuspended", message="Job suspended"))
            status.pop("startTime", None)
            self._started.pop(uid, None)
        else:
            status.setdefault("startTime", now)
            started = self._started.setdefault(uid, self._clock.monotonic())
            if succeeded >= completions:
                finish = "Complete"
                conditions.append(
                    _condition(
                        "SuccessCriteriaMet",
                        now,
                        reason="CompletionsReached",
                        message="Reached expected number of succeeded pods",
                    )
                )
                conditions.append(
                    _condition(
                        "Complete",
                        now,
                        reason="CompletionsReached",
                        message="Reached expected number of succeeded pods",
                    )
                )
                status["completionTime"] = now
            elif failed > backoff_limit:
                finish = "Failed"
                message = "Job has reached the specified backoff limit"
                conditions.append(_condition("FailureTarget", now, reason="BackoffLimitExceeded", message=message))
                conditions.append(_condition("Failed", now, reason="BackoffLimitExceeded", message=message))
            elif isinstance(deadline, int) and self._clock.monotonic() - started >= deadline:
                finish = "Failed"
                message = "Job was active longer than specified deadline"
                conditions.append(_condition("FailureTarget", now, reason="DeadlineExceeded", message=message))
                conditions.append(_condition("Failed", now, reason="DeadlineExceeded", message=message))
            else:
                if isinstance(deadline, int):
                    self._queue.add_after(key, deadline - (self._clock.monotonic() - started) + 0.01)
                want = min(parallelism, completions - succeeded) - len(active)
                if want > 0 and self._backoff_over(key, uid, failed):
                    for _ in range(want):
                        created = self._create_pod(store, job)
                        if created is not None:
                            active.append(created)
            if finish is not None:
                self._delete_pods(store, active)
                active = []

        status["conditions"] = conditions
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _is_ready(p))
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["terminating"] = 0
        status["uncountedTerminatedPods"] = {}
        for field in ("active", "succeeded", "failed"):
            if status[field] == 0:
                del status[field]  # omitempty in the real API
        if status != status_of(job):
            job["status"] = status
            store.update(JOBS, job, subresource="status")

    def _backoff_over(self, key: JobKey, uid: str, failed: int) -> bool:
        """False (and a requeue) while the post-failure backoff of the Job runs."""
        delay = self._options.job_backoff_delay
        if failed == 0 or delay <= 0:
            return True
        seen_count, seen_at = self._failures_seen.get(uid, (0, 0.0))
        now = self._clock.monotonic()
        if failed > seen_count:
            self._failures_seen[uid] = (failed, now)
            seen_at = now
        remaining = seen_at + delay - now
        if remaining > 0:
            self._queue.add_after(key, remaining)
            return False
        return True

    def _create_pod(self, store: Store, job: dict[str, Any]) -> dict[str, Any] | None:
        name, namespace, uid = name_of(job), namespace_of(job), uid_of(job)
        template = copy.deepcopy(spec_of(job).get("template") or {})
        template_meta = template.get("metadata") or {}
        labels = dict(template_meta.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        metadata: dict[str, Any] = {
            "generateName": f"{name}-",
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if template_meta.get("annotations"):
            metadata["annotations"] = dict(template_meta["annotations"])
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
        try:
            return store.create(PODS, pod)
        except Exception:
            logger.exception("kubesim job controller: cannot create a pod for %s/%s", namespace, name)
            return None

    @staticmethod
    def _delete_pods(store: Store, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            try:
                store.delete(PODS, namespace_of(pod), name_of(pod))
            except Exception as error:
                if api_error_code(error) != 404:
                    raise
