"""Scripted outcomes of simulated Ray jobs and serve applications, read from what the user submitted.

Nothing is executed: a job's fate is written into its entrypoint (or its ``runtime_env.env_vars``) as
``NAME=value`` markers, so a test scripts it in the RayJob manifest it already writes:

=============================  ===========================================================================
marker                          effect
=============================  ===========================================================================
``KUBESIM_PENDING_SECONDS=F``   seconds the job stays ``PENDING`` before it runs (default 0)
``KUBESIM_RUN_SECONDS=F``       seconds it stays ``RUNNING`` (default: the dashboard's
                                ``default_run_seconds``, 0.2 s); ``inf`` runs until stopped
``KUBESIM_EXIT_CODE=N``         exit code of the entrypoint: 0 → ``SUCCEEDED``, anything else → ``FAILED``
                                with Ray's "Job entrypoint command failed with exit code N" message
=============================  ===========================================================================

Any other entrypoint (``python /home/ray/samples/sample_code.py``) is a short successful run. A marker in
the entrypoint wins over the same marker in ``runtime_env.env_vars``.

Serve applications: an application whose ``name`` or ``import_path`` contains ``kubesim-deploy-fail``
(case-insensitive, ``_`` or ``-``) fails to import, one whose ``runtime_env.env_vars`` has
``KUBESIM_DEPLOY_FAIL`` fails in its replicas' constructor; both end in ``DEPLOY_FAILED`` instead of
``RUNNING``, each with Ray's answer for that kind of failure. ``KUBESIM_DEPLOY_SECONDS=F`` in
``runtime_env.env_vars`` overrides the dashboard's serve deploy delay for that application.

This module is pure: it parses, it does not keep time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MARKER = re.compile(r"\b(KUBESIM_[A-Z_]+)=(\S+)")
_DEPLOY_FAIL = re.compile(r"kubesim[-_]deploy[-_]fail", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class JobScript:
    """What a simulated job will do."""

    pending_seconds: float
    """Time spent PENDING before the driver starts."""
    run_seconds: float
    """Time spent RUNNING; ``math.inf`` means until stopped."""
    exit_code: int
    """Exit code of the entrypoint; non-zero means FAILED."""


def _markers(entrypoint: str, runtime_env: Mapping[str, Any] | None) -> dict[str, str]:
    found: dict[str, str] = {}
    env_vars = (runtime_env or {}).get("env_vars")
    if isinstance(env_vars, Mapping):
        for key, value in env_vars.items():
            if isinstance(key, str) and key.startswith("KUBESIM_"):
                found[key] = str(value)
    # The entrypoint wins: it is the more specific place for a test to write a rule.
    for key, value in _MARKER.findall(entrypoint):
        found[key] = value.strip("'\"")
    return found


def _float(value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        return default
    return parsed if parsed >= 0 and not math.isnan(parsed) else default


def parse_job_script(
    entrypoint: str,
    runtime_env: Mapping[str, Any] | None = None,
    *,
    default_run_seconds: float = 0.2,
    default_pending_seconds: float = 0.0,
) -> JobScript:
    """Read a job's scripted outcome from its entrypoint and runtime environment.

    Args:
        entrypoint: the shell command the job would run.
        runtime_env: the submitted ``runtime_env`` (its ``env_vars`` may carry markers).
        default_run_seconds: run length when no ``KUBESIM_RUN_SECONDS`` is given.
        default_pending_seconds: time PENDING when no ``KUBESIM_PENDING_SECONDS`` is given.

    Returns:
        The job's script; malformed marker values fall back to the defaults.
    """
    found = _markers(entrypoint, runtime_env)
    try:
        exit_code = int(found.get("KUBESIM_EXIT_CODE", "0"))
    except ValueError:
        exit_code = 1
    return JobScript(
        pending_seconds=_float(found.get("KUBESIM_PENDING_SECONDS"), default_pending_seconds),
        run_seconds=_float(found.get("KUBESIM_RUN_SECONDS"), default_run_seconds),
        exit_code=exit_code,
    )


@dataclass(frozen=True, kw_only=True)
class ServeAppScript:
    """What a simulated serve application will do after a deploy."""

    deploy_seconds: float
    """Time spent DEPLOYING."""
    fails: bool
    """True: ends DEPLOY_FAILED instead of RUNNING."""
    import_failure: bool = False
    """The failure is the application's import (no deployments known) rather than a replica's constructor."""


def parse_serve_app_script(app: Mapping[str, Any], *, default_deploy_seconds: float) -> ServeAppScript:
    """Read a serve application's scripted outcome from its config entry.

    Args:
        app: one entry of the serve config's ``applications`` list.
        default_deploy_seconds: the dashboard's configured deploy delay.

    Returns:
        The application's script.
    """
    runtime_env = app.get("runtime_env")
    env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, Mapping) else None
    env: Mapping[str, Any] = env_vars if isinstance(env_vars, Mapping) else {}
    text = f"{app.get('name', '')} {app.get('import_path', '')}"
    import_failure = bool(_DEPLOY_FAIL.search(text))
    raw = env.get("KUBESIM_DEPLOY_SECONDS")
    return ServeAppScript(
        deploy_seconds=_float(None if raw is None else str(raw), default_deploy_seconds),
        fails=import_failure or "KUBESIM_DEPLOY_FAIL" in env,
        import_failure=import_failure,
    )
