"""The simulated Ray job manager behind ``/api/jobs/``: submissions, their timelines and Ray's JSON shapes.

A job's status is not stored, it is *computed* from the clock and the job's script (see ``rules``): PENDING
until ``pending_seconds`` after submission, RUNNING for ``run_seconds``, then SUCCEEDED or FAILED by the
scripted exit code; a stop before the end makes it STOPPED from that instant. So advancing an injected clock
is all it takes to move a job on, and no background task exists to leak.

The JSON field names and messages are those of Ray's job REST API (``JobDetails``), for KubeRay's dashboard
client: ``start_time`` is the submission time and ``end_time`` the end, both epoch milliseconds.
It deliberately does not run anything, keep real logs, or model driver nodes.
"""

from __future__ import annotations

import math
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubesim.dashboard.clock import Clock
from kubesim.dashboard.rules import JobScript, parse_job_script
from kubesim.dashboard.timings import INSTANT_RAY, RayTimings
from schema.ray import conventions

_PENDING_MESSAGE = "Job has not started yet."
_WAITING_MESSAGE = (
    "Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, custom resources) to "
    "become available."
)
_SUBMIT_FIELDS = frozenset(
    {
        "entrypoint",
        "submission_id",
        "job_id",
        "runtime_env",
        "metadata",
        "entrypoint_num_cpus",
        "entrypoint_num_gpus",
        "entrypoint_memory",
        "entrypoint_resources",
        "entrypoint_label_selector",
    }
)
"""The fields of Ray's ``JobSubmitRequest``; any other is a 400."""
DELETED_ID_WINDOW = 10.0
"""Seconds after a job's deletion during which a new job with its submission id fails: Ray's supervisor
actor of the deleted job still holds the id's name and the new job's supervisor dies
(``JOB_SUPERVISOR_ACTOR_DIED``)."""
_SUPERVISOR_DIED = "Job supervisor actor died: the actor of a job with this submission_id was deleted moments ago."
_COUNTED_BY_EVERY_NODE = frozenset({"CPU", "memory"})
"""Resources every simulated node has enough of."""

NodeResources = Callable[[Mapping[str, float]], bool]
"""Whether the cluster has a node with the given resources (GPUs, custom resources)."""


class JobStatus(StrEnum):
    """Ray's JobStatus values."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def is_terminal(self) -> bool:
        """True for STOPPED, SUCCEEDED and FAILED."""
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobExistsError(Exception):
    """A submission reused an existing submission_id (Ray answers 500 with this text)."""


class InvalidSubmissionError(Exception):
    """The submit request body is malformed (Ray answers 400)."""


class JobNotTerminalError(Exception):
    """DELETE of a job that is still pending or running (Ray answers 400)."""


@dataclass(kw_only=True)
class JobRecord:
    """One submitted job and its scripted timeline."""

    submission_id: str
    driver_job_id: str
    entrypoint: str
    metadata: dict[str, str] | None
    runtime_env: dict[str, Any] | None
    entrypoint_num_cpus: float | None
    entrypoint_num_gpus: float | None
    entrypoint_memory: int | None
    entrypoint_resources: dict[str, float] | None
    script: JobScript
    submitted_mono: float
    submitted_wall: float
    schedulable: bool = True
    """False when the job asks for resources the head lacks: Ray keeps it PENDING, also after a stop."""
    supervisor_died: bool = False
    """The submission reused a just-deleted id: the job is FAILED from the start."""
    stopped_mono: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def run_start(self) -> float:
        """Monotonic time the driver starts (``inf`` for a job that cannot be scheduled)."""
        if not self.schedulable:
            return math.inf
        if self.supervisor_died:
            return self.submitted_mono
        return self.submitted_mono + self.script.pending_seconds

    @property
    def run_end(self) -> float:
        """Monotonic time the entrypoint exits on its own (``inf`` if never)."""
        if self.supervisor_died:
            return self.submitted_mono
        return self.run_start + self.script.run_seconds

    def status_at(self, now: float) -> JobStatus:
        """The job's status at monotonic time ``now`` (an entrypoint that ends before a stop takes effect
        ends on its own)."""
        stopped = self.stopped_mono is not None and self.stopped_mono <= now and self.stopped_mono < self.run_end
        if stopped and self.schedulable:
            return JobStatus.STOPPED
        if now < self.run_start:
            return JobStatus.PENDING
        if now < self.run_end:
            return JobStatus.RUNNING
        if self.supervisor_died:
            return JobStatus.FAILED
        return JobStatus.SUCCEEDED if self.script.exit_code == 0 else JobStatus.FAILED

    def end_mono(self, now: float) -> float | None:
        """Monotonic time the job ended, or None if it has not."""
        status = self.status_at(now)
        if status is JobStatus.STOPPED:
            return self.stopped_mono
        if status.is_terminal:
            return self.run_end
        return None

    def wall(self, mono: float) -> float:
        """Wall time corresponding to monotonic time ``mono``."""
        return self.submitted_wall + (mono - self.submitted_mono)


def _request(gpus: float | None, resources: Mapping[str, Any] | None) -> dict[str, float]:
    request = {
        str(k): float(v)
        for k, v in (resources or {}).items()
        if k not in _COUNTED_BY_EVERY_NODE and isinstance(v, int | float) and not isinstance(v, bool)
    }
    if gpus:
        request["GPU"] = gpus
    return request


def _no_gpus_nor_custom_resources(request: Mapping[str, float]) -> bool:
    """A standalone head's answer: it has no GPUs and no custom resources."""
    return not any(amount > 0 for amount in request.values())


def _driver_job_id(index: int) -> str:
    # Ray's JobID is 4 bytes, printed in hex little-endian: the first job is "01000000".
    return index.to_bytes(4, "little").hex()


def _optional_float(body: Mapping[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSubmissionError(f"{key} must be a number, got {value!r}")
    return float(value)


class JobTable:
    """All jobs of one simulated Ray cluster."""

    def __init__(
        self,
        clock: Clock,
        *,
        default_run_seconds: float = 0.2,
        timings: RayTimings = INSTANT_RAY,
        fits: NodeResources | None = None,
    ) -> None:
        self._clock = clock
        self.fits: NodeResources = fits or _no_gpus_nor_custom_resources
        self._default_run_seconds = default_run_seconds
        self._timings = timings
        self._jobs: dict[str, JobRecord] = {}
        self._deleted: dict[str, float] = {}
        self._count = 0

    def submit(self, body: Mapping[str, Any]) -> JobRecord:
        """Accept a ``POST /api/jobs/`` body.

        Raises:
            InvalidSubmissionError: the body is malformed.
            JobExistsError: the submission_id is taken.
        """
        unknown = sorted(set(body) - _SUBMIT_FIELDS)
        if unknown:
            raise InvalidSubmissionError(
                f"TypeError: JobSubmitRequest.__init__() got an unexpected keyword argument '{unknown[0]}'"
            )
        entrypoint = body.get("entrypoint")
        if not isinstance(entrypoint, str):
            raise InvalidSubmissionError(f"TypeError: entrypoint must be a string, got {type(entrypoint)}")
        submission_id = body.get("submission_id") or body.get("job_id")
        if submission_id is None:
            alphabet = string.ascii_lowercase + string.digits
            submission_id = "raysubmit_" + "".join(secrets.choice(alphabet) for _ in range(16))
        if not isinstance(submission_id, str):
            raise InvalidSubmissionError(f"TypeError: submission_id must be a string, got {type(submission_id)}")
        if self.get(submission_id) is not None:
            raise JobExistsError(
                f"Job with submission_id {submission_id} already exists. " "Please use a different submission_id."
            )
        metadata = body.get("metadata")
        runtime_env = body.get("runtime_env")
        resources = body.get("entrypoint_resources")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidSubmissionError(f"TypeError: metadata must be a dict, got {type(metadata)}")
        for value in (metadata or {}).values():
            if not isinstance(value, str):
                raise InvalidSubmissionError(f"TypeError: metadata values must be strings, got {type(value)}")
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise InvalidSubmissionError(f"TypeError: runtime_env must be a dict, got {type(runtime_env)}")
        if resources is not None and not isinstance(resources, dict):
            raise InvalidSubmissionError(f"TypeError: entrypoint_resources must be a dict, got {type(resources)}")
        memory = body.get("entrypoint_memory")
        gpus = _optional_float(body, "entrypoint_num_gpus")
        self._count += 1
        record = JobRecord(
            submission_id=submission_id,
            driver_job_id=_driver_job_id(self._count),
            entrypoint=entrypoint,
            metadata=metadata,
            runtime_env=runtime_env,
            entrypoint_num_cpus=_optional_float(body, "entrypoint_num_cpus"),
            entrypoint_num_gpus=gpus,
            entrypoint_memory=int(memory) if isinstance(memory, int | float) else None,
            entrypoint_resources=resources,
            script=parse_job_script(
                entrypoint,
                runtime_env,
                default_run_seconds=self._default_run_seconds,
                default_pending_seconds=self._timings.pending_seconds,
            ),
            submitted_mono=self._clock.monotonic(),
            submitted_wall=self._clock.time(),
            schedulable=self.fits(_request(gpus, resources)),
            supervisor_died=self._clock.monotonic() - self._deleted.get(submission_id, -math.inf) < DELETED_ID_WINDOW,
        )
        self._jobs[submission_id] = record
        return record

    def any_submitted(self) -> bool:
        """True once the head has taken a job (its job manager is up)."""
        return self._count > 0

    def get(self, job_id: str) -> JobRecord | None:
        """Find a job by submission id, or by driver job id once its driver has started."""
        record = self._jobs.get(job_id)
        if record is not None:
            return record
        now = self._clock.monotonic()
        for candidate in self._jobs.values():
            if candidate.driver_job_id == job_id and candidate.status_at(now) is not JobStatus.PENDING:
                return candidate
        return None

    def status(self, record: JobRecord) -> JobStatus:
        """The job's status now."""
        return record.status_at(self._clock.monotonic())

    def stop(self, record: JobRecord) -> bool:
        """Stop a job; False if it had already ended (Ray's ``{"stopped": false}``). The job is STOPPED after
        the head's stop delay; one that cannot be scheduled stays PENDING although the answer is True."""
        now = self._clock.monotonic()
        if record.status_at(now).is_terminal:
            return False
        if record.stopped_mono is None:
            record.stopped_mono = now + self._timings.stop_seconds
        return True

    def delete(self, record: JobRecord) -> None:
        """Forget a terminal job.

        Raises:
            JobNotTerminalError: the job is still pending or running.
        """
        if not self.status(record).is_terminal:
            raise JobNotTerminalError(
                f"Attempted to delete job with id '{record.submission_id}', but it is in a non-terminal "
                f"state {self.status(record)}."
            )
        del self._jobs[record.submission_id]
        self._deleted[record.submission_id] = self._clock.monotonic()

    def logs(self, record: JobRecord) -> str:
        """The simulated driver output so far."""
        now = self._clock.monotonic()
        status = record.status_at(now)
        if status is JobStatus.PENDING or (
            status is JobStatus.STOPPED and record.stopped_mono is not None and record.stopped_mono < record.run_start
        ):
            return ""
        lines = [f"kubesim: running entrypoint: {record.entrypoint}"]
        if status is JobStatus.STOPPED:
            lines.append("kubesim: job was stopped")
        elif status.is_terminal:
            lines.append(f"kubesim: entrypoint exited with code {record.script.exit_code}")
        return "\n".join(lines) + "\n"

    def details(self, record: JobRecord) -> dict[str, Any]:
        """Ray's ``JobDetails`` JSON for ``GET /api/jobs/<id>``."""
        now = self._clock.monotonic()
        status = record.status_at(now)
        end = record.end_mono(now)
        started = status is not JobStatus.PENDING and not (
            status is JobStatus.STOPPED and record.stopped_mono is not None and record.stopped_mono < record.run_start
        )
        message = {
            JobStatus.PENDING: _PENDING_MESSAGE if record.schedulable else _WAITING_MESSAGE,
            JobStatus.RUNNING: "Job is currently running.",
            JobStatus.SUCCEEDED: "Job finished successfully.",
            JobStatus.STOPPED: "Job was intentionally stopped.",
            JobStatus.FAILED: (
                _SUPERVISOR_DIED
                if record.supervisor_died
                else f"Job entrypoint command failed with exit code {record.script.exit_code}, last "
                f"available logs (truncated to 20,000 chars):\n{self.logs(record)}"
            ),
        }[status]
        error_type = None
        if status is JobStatus.FAILED:
            error_type = "JOB_SUPERVISOR_ACTOR_DIED" if record.supervisor_died else "JOB_ENTRYPOINT_COMMAND_ERROR"
        details: dict[str, Any] = {
            "type": "SUBMISSION",
            "job_id": record.driver_job_id if started else None,
            "submission_id": record.submission_id,
            "driver_info": (
                {"id": record.driver_job_id, "node_ip_address": "127.0.0.1", "pid": "4242"} if started else None
            ),
            "status": status.value,
            "entrypoint": record.entrypoint,
            "message": message,
            "error_type": error_type,
            "start_time": int(record.submitted_wall * 1000),
            "end_time": None if end is None else int(record.wall(end) * 1000),
            "metadata": record.metadata,
            "runtime_env": record.runtime_env,
            "driver_agent_http_address": f"http://127.0.0.1:{conventions.DEFAULT_DASHBOARD_AGENT_PORT}"
            if started
            else None,
            "driver_node_id": "kubesim-head-node" if started else None,
            "driver_exit_code": (
                record.script.exit_code
                if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) and not record.supervisor_died
                else None
            ),
        }
        # Ray leaves the entrypoint resources out unless they were asked for.
        optional = {
            "entrypoint_num_cpus": record.entrypoint_num_cpus,
            "entrypoint_num_gpus": record.entrypoint_num_gpus,
            "entrypoint_memory": record.entrypoint_memory,
            "entrypoint_resources": record.entrypoint_resources,
        }
        details.update({key: value for key, value in optional.items() if value is not None})
        return details

    def list_details(self) -> list[dict[str, Any]]:
        """Every job's details, in submission order."""
        return [self.details(record) for record in self._jobs.values()]
