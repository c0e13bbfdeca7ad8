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

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubesim.dashboard.clock import Clock
from kubesim.dashboard.rules import JobScript, parse_job_script

_PENDING_MESSAGE = (
    "Job has not started yet. It may be waiting for resources (CPUs, GPUs, memory, custom resources) to "
    "become available. It may be waiting for the runtime environment to be set up."
)


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
    metadata: dict[str, str]
    runtime_env: dict[str, Any]
    entrypoint_num_cpus: float | None
    entrypoint_num_gpus: float | None
    entrypoint_memory: int | None
    entrypoint_resources: dict[str, float] | None
    script: JobScript
    submitted_mono: float
    submitted_wall: float
    stopped_mono: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def run_start(self) -> float:
        """Monotonic time the driver starts."""
        return self.submitted_mono + self.script.pending_seconds

    @property
    def run_end(self) -> float:
        """Monotonic time the entrypoint exits on its own (``inf`` if never)."""
        return self.run_start + self.script.run_seconds

    def status_at(self, now: float) -> JobStatus:
        """The job's status at monotonic time ``now``."""
        if self.stopped_mono is not None and self.stopped_mono <= now:
            return JobStatus.STOPPED
        if now < self.run_start:
            return JobStatus.PENDING
        if now < self.run_end:
            return JobStatus.RUNNING
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

    def __init__(self, clock: Clock, *, default_run_seconds: float = 0.2) -> None:
        self._clock = clock
        self._default_run_seconds = default_run_seconds
        self._jobs: dict[str, JobRecord] = {}
        self._count = 0

    def submit(self, body: Mapping[str, Any]) -> JobRecord:
        """Accept a ``POST /api/jobs/`` body.

        Raises:
            InvalidSubmissionError: the body is malformed.
            JobExistsError: the submission_id is taken.
        """
        entrypoint = body.get("entrypoint")
        if not isinstance(entrypoint, str) or not entrypoint.strip():
            raise InvalidSubmissionError("entrypoint must be a non-empty string")
        submission_id = body.get("submission_id") or body.get("job_id")
        if submission_id is None:
            alphabet = string.ascii_lowercase + string.digits
            submission_id = "raysubmit_" + "".join(secrets.choice(alphabet) for _ in range(16))
        if not isinstance(submission_id, str):
            raise InvalidSubmissionError("submission_id must be a string")
        if self.get(submission_id) is not None:
            raise JobExistsError(
                f"Job with submission_id {submission_id} already exists. " "Please use a different submission_id."
            )
        metadata = body.get("metadata") or {}
        runtime_env = body.get("runtime_env") or {}
        resources = body.get("entrypoint_resources")
        if not isinstance(metadata, dict) or not isinstance(runtime_env, dict):
            raise InvalidSubmissionError("metadata and runtime_env must be objects")
        if resources is not None and not isinstance(resources, dict):
            raise InvalidSubmissionError("entrypoint_resources must be an object")
        memory = body.get("entrypoint_memory")
        self._count += 1
        record = JobRecord(
            submission_id=submission_id,
            driver_job_id=_driver_job_id(self._count),
            entrypoint=entrypoint,
            metadata={str(k): str(v) for k, v in metadata.items()},
            runtime_env=runtime_env,
            entrypoint_num_cpus=_optional_float(body, "entrypoint_num_cpus"),
            entrypoint_num_gpus=_optional_float(body, "entrypoint_num_gpus"),
            entrypoint_memory=int(memory) if isinstance(memory, int | float) else None,
            entrypoint_resources=resources,
            script=parse_job_script(entrypoint, runtime_env, default_run_seconds=self._default_run_seconds),
            submitted_mono=self._clock.monotonic(),
            submitted_wall=self._clock.time(),
        )
        self._jobs[submission_id] = record
        return record

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
        """Stop a job; False if it had already ended (Ray's ``{"stopped": false}``)."""
        now = self._clock.monotonic()
        if record.status_at(now).is_terminal:
            return False
        record.stopped_mono = now
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
            JobStatus.PENDING: _PENDING_MESSAGE,
            JobStatus.RUNNING: "Job is currently running.",
            JobStatus.SUCCEEDED: "Job finished successfully.",
            JobStatus.STOPPED: "Job was intentionally stopped.",
            JobStatus.FAILED: (
                f"Job entrypoint command failed with exit code {record.script.exit_code}, last "
                f"available logs (truncated to 20,000 chars):\n{self.logs(record)}"
            ),
        }[status]
        return {
            "type": "SUBMISSION",
            "job_id": record.driver_job_id if started else None,
            "submission_id": record.submission_id,
            "driver_info": (
                {"id": record.driver_job_id, "node_ip_address": "127.0.0.1", "pid": "4242"} if started else None
            ),
            "status": status.value,
            "entrypoint": record.entrypoint,
            "message": message,
            "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR" if status is JobStatus.FAILED else None,
            "start_time": int(record.submitted_wall * 1000),
            "end_time": None if end is None else int(record.wall(end) * 1000),
            "metadata": record.metadata,
            "runtime_env": record.runtime_env,
            "driver_agent_http_address": "http://127.0.0.1:52365",
            "driver_node_id": "kubesim-head-node",
            "driver_exit_code": (
                record.script.exit_code if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None
            ),
            "entrypoint_num_cpus": record.entrypoint_num_cpus,
            "entrypoint_num_gpus": record.entrypoint_num_gpus,
            "entrypoint_memory": record.entrypoint_memory,
            "entrypoint_resources": record.entrypoint_resources,
        }

    def list_details(self) -> list[dict[str, Any]]:
        """Every job's details, in submission order."""
        return [self.details(record) for record in self._jobs.values()]
