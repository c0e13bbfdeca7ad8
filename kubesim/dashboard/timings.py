"""How long a real Ray head takes for what the dashboard simulator does (float seconds).

Measured on Ray 2.60 heads (``raybus[realray]``, idle 2-core machine): a submitted job is PENDING for
1.2-1.6 s before its driver runs, and RUNNING for about 1.3 s more after a stop; the head's first job
submission answers after about 0.8 s and the Serve config PUT that starts Serve after 1.7-2.5 s; an
application lists no deployments for its first 1-2 s of DEPLOYING; one left out of a PUT is DELETING for
about 2 s. :data:`INSTANT_RAY` (every delay 0) is the default; the ``realistic`` kubelet mode uses
:data:`REALISTIC_RAY`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RayTimings:
    """Delays of a simulated Ray head."""

    pending_seconds: float = 0.0
    """PENDING before a job's driver starts (a ``KUBESIM_PENDING_SECONDS`` marker overrides it)."""
    stop_seconds: float = 0.0
    """A stopped job stays in its state this long before it is STOPPED."""
    first_submit_seconds: float = 0.0
    """Latency of the head's first ``POST /api/jobs/``."""
    first_put_seconds: float = 0.0
    """Latency of the Serve config PUT that starts Serve."""
    deployments_after_seconds: float = 0.0
    """A deploying application lists no deployments for this long."""
    serve_delete_seconds: float = 0.0
    """An application left out of a PUT stays DELETING this long."""


INSTANT_RAY = RayTimings()

REALISTIC_RAY = RayTimings(
    pending_seconds=1.4,
    stop_seconds=1.3,
    first_submit_seconds=0.8,
    first_put_seconds=2.0,
    deployments_after_seconds=1.5,
    serve_delete_seconds=2.0,
)
