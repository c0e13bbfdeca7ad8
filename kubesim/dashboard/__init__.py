"""A Ray head simulator: the dashboard REST API (jobs, serve), agent and serve-proxy health, over real HTTP
(one loopback port each, as on a real head).

Standalone: build a state with :func:`new_state`, serve it with :class:`DashboardServer` (a loopback port)
or test it through :func:`build_app`. The kubesim head wiring (``kubesim.sims.dashboards``) starts one per
running Ray head pod. Scripted job and serve outcomes are described in ``rules`` and README.md.
"""

from kubesim.dashboard.app import DashboardState, build_app, new_state
from kubesim.dashboard.clock import Clock, ManualClock, SystemClock
from kubesim.dashboard.jobs import JobStatus
from kubesim.dashboard.server import DashboardServer
from kubesim.dashboard.timings import INSTANT_RAY, REALISTIC_RAY, RayTimings

__all__ = [
    "INSTANT_RAY",
    "REALISTIC_RAY",
    "Clock",
    "DashboardServer",
    "DashboardState",
    "JobStatus",
    "ManualClock",
    "RayTimings",
    "SystemClock",
    "build_app",
    "new_state",
]
