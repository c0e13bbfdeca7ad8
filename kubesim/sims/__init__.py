"""kubesim's simulators: kubelet, batch Job controller, EndpointSlices, Gateway status and Ray heads.

The API-server core runs what :func:`build_simulators` returns: the controllers as tasks (each acts only
through the :class:`~kubesim.hooks.Store`) and the proxy resolvers for the service and pod proxies. Tests
that need a cluster's dashboard directly use :func:`build_simulation` (or :func:`find_dashboards` on the
resolvers) and ``RayDashboards.dashboard_url(namespace, cluster)``.

Failure-injection annotations are listed in ``annotations``, job and serve scripting in
``kubesim.dashboard.rules``; both are summarised in ``kubesim/dashboard/README.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kubesim.dashboard import Clock, SystemClock
from kubesim.hooks import Controller, ProxyResolver
from kubesim.sims.batchjobs import JobController
from kubesim.sims.dashboards import RayDashboards
from kubesim.sims.endpointslices import EndpointSliceController
from kubesim.sims.gateways import GatewayStatusController
from kubesim.sims.kubelet import Kubelet
from kubesim.sims.options import INSTANT, RAY_MODES, REALISTIC, KubeletMode, RayMode, SimOptions, options_for

__all__ = [
    "INSTANT",
    "REALISTIC",
    "KubeletMode",
    "RayDashboards",
    "RayMode",
    "SimOptions",
    "Simulation",
    "build_simulation",
    "build_simulators",
    "find_dashboards",
]


@dataclass
class Simulation:
    """Everything :func:`build_simulation` made."""

    controllers: list[Controller] = field(default_factory=list)
    resolvers: list[ProxyResolver] = field(default_factory=list)
    dashboards: RayDashboards | None = None
    """The Ray head registry (None in mode "off")."""


def build_simulation(
    kubelet_mode: KubeletMode,
    *,
    options: SimOptions | None = None,
    clock: Clock | None = None,
    ray: RayMode = "sim",
) -> Simulation:
    """Build the simulators of a kubelet mode.

    Args:
        kubelet_mode: "off" (nothing at all), "instant" or "realistic".
        options: settings; default the mode's preset (:data:`INSTANT` / :data:`REALISTIC`).
        clock: time source for timestamps and the Ray dashboards (default the system clock).
        ray: "sim" (the dashboard simulator) or "real" (real Ray heads, ``SimOptions.real_ray``).

    Returns:
        The controllers, proxy resolvers and the Ray dashboard registry.

    Raises:
        ValueError: for an unknown mode.
    """
    if kubelet_mode not in ("off", "instant", "realistic"):
        raise ValueError(f"unknown kubelet mode {kubelet_mode!r}")
    if ray not in RAY_MODES:
        raise ValueError(f"unknown ray mode {ray!r} (sim, real)")
    if kubelet_mode == "off":
        return Simulation()
    opts = options or options_for(kubelet_mode)
    if ray == "real":
        opts = replace(opts, real_ray=True)
    used_clock = clock or SystemClock()
    dashboards = RayDashboards(options=opts, clock=used_clock)
    controllers: list[Controller] = [Kubelet(options=opts, clock=used_clock, dashboards=dashboards)]
    if opts.batch_jobs:
        controllers.append(JobController(options=opts, clock=used_clock))
    if opts.endpoint_slices:
        controllers.append(EndpointSliceController(clock=used_clock))
    if opts.gateway_status:
        controllers.append(GatewayStatusController(clock=used_clock))
    return Simulation(controllers=controllers, resolvers=[dashboards], dashboards=dashboards)


def build_simulators(
    kubelet_mode: KubeletMode,
    *,
    options: SimOptions | None = None,
    clock: Clock | None = None,
    ray: RayMode = "sim",
) -> tuple[list[Controller], list[ProxyResolver]]:
    """The controllers and proxy resolvers for ``kubesim.server.KubeSim`` (see :func:`build_simulation`)."""
    simulation = build_simulation(kubelet_mode, options=options, clock=clock, ray=ray)
    return simulation.controllers, simulation.resolvers


def find_dashboards(resolvers: Sequence[object]) -> RayDashboards | None:
    """The Ray dashboard registry among a server's proxy resolvers, if any."""
    for resolver in resolvers:
        if isinstance(resolver, RayDashboards):
            return resolver
    return None
