"""Settings of the simulators: one frozen dataclass with documented defaults, one preset per kubelet mode.

``instant`` is what tests use: pods go Running/Ready in the same pass they are seen, only scripted Ray
work (a job's run, a serve deploy) takes its short default time. ``realistic`` spaces the steps out
(scheduling, image pull, readiness, graceful termination) so a client sees every intermediate state,
and its Ray heads take as long as real Ray 2.60 heads where those are slow (``kubesim.dashboard.timings``:
PENDING jobs, stops, the first submit and Serve PUT, a 4 s DEPLOYING, DELETING applications). Tests override single
fields with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from kubesim.dashboard.timings import INSTANT_RAY, REALISTIC_RAY, RayTimings

KubeletMode = Literal["off", "instant", "realistic"]
RayMode = Literal["sim", "real"]
"""What a Ray head pod runs: the dashboard simulator, or a real ``ray start --head`` process."""
RAY_MODES: tuple[RayMode, ...] = ("sim", "real")


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """Every tunable of the simulators (float seconds unless said otherwise)."""

    schedule_delay: float = 0.0
    """Pending → scheduled (``spec.nodeName`` set, PodScheduled True)."""
    image_pull_delay: float = 0.0
    """Scheduled → containers started (per init-container step too)."""
    readiness_delay: float = 0.0
    """Container started → Ready (stand-in for the first passing readiness probe)."""
    termination_delay: float = 0.0
    """deletionTimestamp seen → pod removed; also capped by the pod's terminationGracePeriodSeconds."""
    crash_loop_interval: float = 1.0
    """Time between restartCount increments of a ``crash-loop`` pod."""
    batch_container_run_seconds: float = 0.2
    """Run length of a container of a batch Job pod that is not a Ray job submitter (it then exits 0)."""
    job_backoff_delay: float = 0.0
    """Batch Job: wait after a failed pod before creating the next one."""
    submitter_poll_interval: float = 0.05
    """How often a simulated ``ray job`` CLI polls the dashboard (health wait, ``logs --follow``)."""
    wait_gcs_ready: bool = True
    """Workers' ``wait-gcs-ready`` init container waits for the head's dashboard, like the real one."""
    job_run_seconds: float = 0.2
    """Default run length of a Ray job without a ``KUBESIM_RUN_SECONDS`` marker."""
    serve_deploy_seconds: float = 0.2
    """Time a serve application spends DEPLOYING before RUNNING / DEPLOY_FAILED."""
    ray_timings: RayTimings = INSTANT_RAY
    """The simulated heads' other delays (a real head's latencies in ``realistic`` mode)."""
    node_name: str = "kubesim-node"
    """The one simulated node pods are bound to."""
    host_ip: str = "10.0.0.10"
    """``status.hostIP`` of that node."""
    endpoint_slices: bool = True
    """Run the EndpointSlice controller."""
    batch_jobs: bool = True
    """Run the batch/v1 Job controller."""
    gateway_status: bool = True
    """Run the Gateway API status controller."""
    publish_head_urls: bool = False
    """Record where each simulated head listens on its Pod (``kubesim.sims.headurls``): for API servers
    whose proxies cannot reach the heads (``kubesim attach``)."""
    heads_on_pod_ips: bool = False
    """Simulated heads listen on their Pod's IP and the real head's ports (dashboard 8265, agent 52365, Serve
    8000, or the ports the head container names so) instead of loopback ports: for an API server that
    proxies to Pod IPs (``kubesim attach`` to a real kube-apiserver). Needs the Pod network local to this
    machine (``kubesim.sims.podnetwork``)."""
    real_ray: bool = False
    """Head pods run real Ray heads (``ray start --head``, needs ``raybus[realray]``) instead of the dashboard
    simulator, and Ray job submitters run their real script with the real ``ray`` CLI."""


INSTANT = SimOptions()

REALISTIC = replace(
    INSTANT,
    schedule_delay=0.05,
    image_pull_delay=0.2,
    readiness_delay=0.3,
    termination_delay=0.2,
    serve_deploy_seconds=4.0,
    ray_timings=REALISTIC_RAY,
)


def options_for(mode: KubeletMode) -> SimOptions:
    """The preset of a kubelet mode ("off" gets the instant values; nothing runs anyway)."""
    return REALISTIC if mode == "realistic" else INSTANT
