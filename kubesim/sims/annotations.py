"""Failure injection: annotations a test puts on a Pod (or a pod template) to script the kubelet.

All keys live under ``kubesim.raybus.io/``; they are read from the Pod itself on every pass, so they can be
set through a RayCluster's ``template.metadata.annotations`` and even changed on a live pod.

================================  =======================================================================
annotation                         effect
================================  =======================================================================
``stay-pending: "true"``           never scheduled: phase Pending, PodScheduled False (Unschedulable)
``never-ready: "true"``            Running, containers started, but never Ready
``ready-after-seconds: "F"``       readiness delay of this pod (overrides the mode's default)
``crash-loop: "true"``             the first container keeps crashing: waiting ``CrashLoopBackOff``,
                                   lastState terminated (exit 1), restartCount grows
``fail-after-seconds: "F"``        the first container exits F s after it starts, with ``exit-code``
``exit-code: "K"``                 exit code for ``fail-after-seconds`` (default 1). restartPolicy Never:
                                   the pod ends Failed (Succeeded when every container exited 0);
                                   Always/OnFailure: the container restarts (restartCount+1) and fails
                                   again F s later (OnFailure does not restart after exit 0)
``serve-unhealthy: "true"``        the Ray head's serve proxy ``/-/healthz`` answers 503
``gcs-unhealthy: "true"``          the Ray head's ``/api/gcs_healthz`` and agent health answer 503
================================  =======================================================================

Malformed values are ignored (the annotation counts as absent). This module only parses.

One annotation is written by the kubelet rather than read from a test: ``head-urls`` (see
``kubesim.sims.headurls``), where a head attached over HTTP listens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.sims.objects import annotations_of

PREFIX = "kubesim.raybus.io/"
STAY_PENDING = PREFIX + "stay-pending"
NEVER_READY = PREFIX + "never-ready"
READY_AFTER_SECONDS = PREFIX + "ready-after-seconds"
CRASH_LOOP = PREFIX + "crash-loop"
FAIL_AFTER_SECONDS = PREFIX + "fail-after-seconds"
EXIT_CODE = PREFIX + "exit-code"
SERVE_UNHEALTHY = PREFIX + "serve-unhealthy"
GCS_UNHEALTHY = PREFIX + "gcs-unhealthy"
HEAD_URLS = PREFIX + "head-urls"


@dataclass(frozen=True, kw_only=True)
class PodFaults:
    """The failure script of one pod."""

    stay_pending: bool = False
    never_ready: bool = False
    ready_after_seconds: float | None = None
    crash_loop: bool = False
    fail_after_seconds: float | None = None
    exit_code: int = 1
    serve_unhealthy: bool = False
    gcs_unhealthy: bool = False


def _flag(annotations: Mapping[str, str], key: str) -> bool:
    return str(annotations.get(key, "")).strip().lower() == "true"


def _seconds(annotations: Mapping[str, str], key: str) -> float | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def pod_faults(pod: Mapping[str, Any]) -> PodFaults:
    """Parse the failure-injection annotations of a pod."""
    annotations = annotations_of(pod)
    try:
        exit_code = int(annotations.get(EXIT_CODE, "1"))
    except ValueError:
        exit_code = 1
    return PodFaults(
        stay_pending=_flag(annotations, STAY_PENDING),
        never_ready=_flag(annotations, NEVER_READY),
        ready_after_seconds=_seconds(annotations, READY_AFTER_SECONDS),
        crash_loop=_flag(annotations, CRASH_LOOP),
        fail_after_seconds=_seconds(annotations, FAIL_AFTER_SECONDS),
        exit_code=exit_code,
        serve_unhealthy=_flag(annotations, SERVE_UNHEALTHY),
        gcs_unhealthy=_flag(annotations, GCS_UNHEALTHY),
    )


_LOOPBACK_URL = re.compile(r"http://127\.0\.0\.1:[0-9]{1,5}")


def recorded_head_urls(pod: Mapping[str, Any]) -> dict[str, str]:
    """The ``head-urls`` annotation of a pod: container port (as text) → base URL; empty when absent or
    malformed. Only loopback URLs count (the simulators listen nowhere else): whoever may annotate a Pod
    must not point kubesim's proxy at another host."""
    raw = annotations_of(pod).get(HEAD_URLS)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str) and _LOOPBACK_URL.fullmatch(v)}
