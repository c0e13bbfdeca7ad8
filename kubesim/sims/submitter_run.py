"""Playing a Ray job submitter container against the simulated dashboards, like the real ``ray job`` CLI.

Sequence (docs/behaviour.md#5.3): wait until ``/api/gcs_healthz`` says "success" (the script's ``until`` loop); with the
status check, ``GET /api/jobs/<id>`` and skip the submit when the job exists; ``POST /api/jobs/`` (a
non-2xx answer, e.g. the 500 of a reused id, fails the container with exit 1); then, when following, poll
until the job is terminal (backing off to ``FOLLOW_MAX_INTERVAL``). Exit code: as the real command's
(:func:`exit_code`: KubeRay's K8sJobMode script ends with ``ray job logs --follow``, which exits 0 whatever
the job's end; a blocking ``ray job submit`` exits 1 only for FAILED), 1 for a refused submit or a lost
dashboard. The address is resolved on every request, so a head that restarts (new
port) is found again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from kubesim.sims.submitter import ExitRule, SubmitterCommand

logger = logging.getLogger(__name__)

Resolver = Callable[[], str | None]
"""Returns the dashboard base URL the submitter's address leads to right now, or None."""

_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
FOLLOW_MAX_INTERVAL = 1.0
"""Longest pause between two polls while following a job: the pause doubles from ``poll_interval`` up to
this. The real ``ray job logs --follow`` streams over one connection; polling every 50 ms instead made
100 long-running jobs cost kubesim 2,000 requests/s, which starved everything else in the process."""
_TIMEOUT = aiohttp.ClientTimeout(total=10)


async def run_submitter(
    command: SubmitterCommand,
    *,
    resolve: Resolver,
    token: str | None,
    poll_interval: float,
) -> int:
    """Run a submitter to its end.

    Args:
        command: the parsed submitter.
        resolve: where the command's address leads (re-evaluated on each request).
        token: Ray auth token to send (``RAY_AUTH_TOKEN`` of the container), or None.
        poll_interval: seconds between polls (health wait, follow).

    Returns:
        The container's exit code.
    """
    headers = {"x-ray-authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(headers=headers, timeout=_TIMEOUT) as session:
        await _wait_healthy(session, resolve, poll_interval)
        submission_id = command.submission_id
        exists = False
        if command.check_status_first and submission_id:
            exists = await _job_status(session, resolve, submission_id) is not None
        if not exists:
            submitted = await _submit(session, resolve, command)
            if submitted is None:
                return 1
            submission_id = submitted
        if not command.follow or not submission_id:
            return 0
        interval = poll_interval
        while True:
            status = await _job_status(session, resolve, submission_id)
            if status is None:
                logger.info("kubesim submitter: job %s vanished from the dashboard", submission_id)
                return 1
            if status in _TERMINAL:
                return exit_code(command.exit_rule, status)
            await asyncio.sleep(interval)
            interval = min(interval * 2, max(poll_interval, FOLLOW_MAX_INTERVAL))


def exit_code(rule: ExitRule, status: str) -> int:
    """The exit code of a real submitter command that followed a job to ``status`` (terminal)."""
    if rule == "logs":
        return 0
    if rule == "submit":
        return 1 if status == "FAILED" else 0
    return 0 if status == "SUCCEEDED" else 1


async def _wait_healthy(session: aiohttp.ClientSession, resolve: Resolver, poll_interval: float) -> None:
    while True:
        base = resolve()
        if base is not None:
            try:
                async with session.get(f"{base}/api/gcs_healthz") as response:
                    if response.status == 200 and "success" in await response.text():
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
        await asyncio.sleep(poll_interval)


async def _job_status(session: aiohttp.ClientSession, resolve: Resolver, job_id: str) -> str | None:
    """The job's status; None when the job (or the dashboard) is gone."""
    base = resolve()
    if base is None:
        return None
    try:
        async with session.get(f"{base}/api/jobs/{job_id}") as response:
            if response.status != 200:
                return None
            body: Any = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    status = body.get("status") if isinstance(body, dict) else None
    return str(status) if status is not None else None


async def _submit(session: aiohttp.ClientSession, resolve: Resolver, command: SubmitterCommand) -> str | None:
    """POST the job; return its submission id, or None when ``ray job submit`` would fail."""
    base = resolve()
    if base is None:
        return None
    try:
        async with session.post(f"{base}/api/jobs/", json=command.submit_body()) as response:
            if response.status != 200:
                logger.info("kubesim submitter: submit failed (%s): %s", response.status, await response.text())
                return None
            body: Any = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    submission_id = body.get("submission_id") if isinstance(body, dict) else None
    return str(submission_id) if submission_id else None
