"""Ray head wiring: one dashboard simulator per running head pod, and where the kubesim proxies forward.

The kubelet starts a dashboard (``kubesim.dashboard``) on loopback ports (or, with
``SimOptions.heads_on_pod_ips``, on the pod's IP and the head's real ports) just before it reports a head
pod (``ray.io/node-type=head``) Running, so anyone who sees the pod Running can reach it; it stops it when the
head's Ray container dies or the pod goes away. A new head pod gets a fresh dashboard: jobs and serve apps
are lost, as with a real head restart without GCS fault tolerance.

Token auth: when the head's Ray container has ``RAY_AUTH_MODE=token``, the token is its ``RAY_AUTH_TOKEN``
(usually a secretKeyRef, read from the store) and the dashboard demands it.

As a :class:`~kubesim.hooks.ProxyResolver`, a Service port resolves to the head of the cluster whose
pods its selector picks (Ready pods, or any running one with ``publishNotReadyAddresses``), and a Pod port
to its cluster's head; a head this registry does not run resolves to the URLs its head Pod's
``head-urls`` annotation records (simulators attached over HTTP run it, ``kubesim.sims.headurls``). The
agent port (52365) and the Serve port (8000, only while Serve runs) lead to the head's agent and Serve
proxy, every other Ray HTTP port (dashboard 8265, metrics, any port named in the container) to its
dashboard; GCS (6379) and Ray client (10001) ports resolve to nothing, as they do not speak HTTP.

With ``SimOptions.real_ray`` a head pod gets a real Ray head instead (``kubesim.sims.realray``): the pod is
reported Running once that head answers its health checks, each HTTP port of the pod maps to the port the
process really listens on (dashboard, agent, Serve, metrics), and Serve config PUTs forwarded by the proxy
get the head's own Serve port (:meth:`RayDashboards.adapt_request`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.dashboard import Clock, DashboardServer, DashboardState, new_state
from kubesim.dashboard.app import Role
from kubesim.hooks import Store
from kubesim.sims.annotations import pod_faults, recorded_head_urls
from kubesim.sims.envresolve import resolve_env
from kubesim.sims.objects import (
    PODS,
    SERVICES,
    is_terminating,
    label_selector_text,
    labels_of,
    name_of,
    namespace_of,
    selector_matches,
    spec_of,
    status_of,
    uid_of,
)
from kubesim.sims.options import SimOptions
from kubesim.sims.rayresources import fits, node_resources
from kubesim.sims.realray import RealRayHead
from schema.objects import container_port, first_container
from schema.ray import conventions

logger = logging.getLogger(__name__)

NON_HTTP_PORTS = frozenset({conventions.DEFAULT_GCS_PORT, conventions.DEFAULT_CLIENT_PORT})
NON_HTTP_PORT_NAMES = frozenset({conventions.PORT_GCS, "gcs", conventions.PORT_CLIENT, "redis"})
_RAY_PORT_NAMES = {
    conventions.PORT_DASHBOARD: conventions.DEFAULT_DASHBOARD_PORT,
    conventions.PORT_DASHBOARD_AGENT: conventions.DEFAULT_DASHBOARD_AGENT_PORT,
    conventions.PORT_SERVE: conventions.DEFAULT_SERVE_PORT,
    conventions.PORT_METRICS: conventions.DEFAULT_METRICS_PORT,
}
_VERSION = re.compile(r"(\d+\.\d+\.\d+)")


@dataclass
class _Head:
    pod_uid: str
    pod_name: str
    server: DashboardServer | None = None
    """The simulated head, or None for a real one."""
    real: RealRayHead | None = None
    """The real Ray head (``SimOptions.real_ray``), or None."""

    @property
    def running(self) -> bool:
        return self.real.running if self.real is not None else self.server is not None and self.server.running

    @property
    def url(self) -> str:
        if self.real is not None:
            return self.real.url
        assert self.server is not None
        return self.server.url

    @property
    def gcs_healthy(self) -> bool:
        if self.real is not None:
            return self.real.healthy and self.real.running
        return self.server is not None and self.server.state.gcs_healthy

    async def stop(self) -> None:
        # Shielded: a head whose stop is cancelled half-way (pod deleted while kubesim shuts down) would
        # keep its other ports listening, and it is no longer in the registry that stops the rest.
        stopping = asyncio.ensure_future(self._stop())
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            await stopping
            raise

    async def _stop(self) -> None:
        if self.real is not None:
            await self.real.stop()
        if self.server is not None:
            await self.server.stop()

    def url_for(self, container_port: int | None) -> str | None:
        """Base URL of a head container port (dashboard, agent, Serve proxy; other HTTP ports: the dashboard)."""
        if self.real is None:
            return self.server.url_for(container_port) if self.server is not None else None
        return self.real.url_for(container_port) if container_port is not None and self.running else None


def is_head_pod(pod: Mapping[str, Any]) -> bool:
    """True for a Ray head pod."""
    return labels_of(pod).get(conventions.LABEL_NODE_TYPE) == conventions.NODE_HEAD


def head_ports(pod: Mapping[str, Any]) -> dict[Role, int]:
    """The ports a head Pod's dashboard, agent and Serve proxy listen on: those its Ray container names
    so, else Ray's defaults."""
    container = first_container(spec_of(pod))
    return {
        "dashboard": container_port(container, conventions.PORT_DASHBOARD) or conventions.DEFAULT_DASHBOARD_PORT,
        "agent": container_port(container, conventions.PORT_DASHBOARD_AGENT)
        or conventions.DEFAULT_DASHBOARD_AGENT_PORT,
        "serve": container_port(container, conventions.PORT_SERVE) or conventions.DEFAULT_SERVE_PORT,
    }


def cluster_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, cluster) of a Ray pod; a pod without the label is its own cluster."""
    return namespace_of(pod), labels_of(pod).get(conventions.LABEL_CLUSTER) or name_of(pod)


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status_of(pod).get("conditions") or [])


class RayDashboards:
    """Registry of simulated Ray heads; also the kubesim :class:`~kubesim.hooks.ProxyResolver`."""

    def __init__(self, *, options: SimOptions, clock: Clock) -> None:
        self._options = options
        self._clock = clock
        self._store: Store | None = None
        self._heads: dict[tuple[str, str], _Head] = {}
        self._open: dict[int, _Head] = {}
        """Every head started and not yet stopped, by ``id``: also one a racing start or a stop cut short by
        cancellation dropped from ``_heads``. :meth:`stop_all` stops them all, so no listener outlives
        kubesim (its socket would be collected unclosed once the event loop is gone)."""

    def attach(self, store: Store) -> None:
        """Give the registry the store it reads Secrets, Services and Pods from."""
        self._store = store

    # --- lifecycle, driven by the kubelet ------------------------------------------------------

    @property
    def real_ray(self) -> bool:
        """True when head pods run real Ray heads."""
        return self._options.real_ray

    async def start_for(self, pod: Mapping[str, Any], *, pod_ip: str | None = None) -> None:
        """Start a fresh dashboard for a head pod (replacing any previous head of its cluster); with
        ``SimOptions.heads_on_pod_ips`` it listens on ``pod_ip`` (the IP the kubelet gave the pod).

        Raises:
            RealRayUnavailableError: a real head was asked for and could not start.
            OSError: the head's ports on ``pod_ip`` could not be bound.
        """
        key = cluster_key(pod)
        previous = self._heads.pop(key, None)
        if previous is not None:
            await self._stop_head(previous)
        if self._options.real_ray:
            await self._start_real(pod, key)
            return
        state = new_state(
            clock=self._clock,
            token=self._token_for(pod),
            default_run_seconds=self._options.job_run_seconds,
            serve_deploy_seconds=self._options.serve_deploy_seconds,
            ray_version=_ray_version(pod),
            timings=self._options.ray_timings,
        )
        state.labels = {"namespace": key[0], "cluster": key[1], "pod": name_of(pod)}
        store = self._store
        if store is not None:
            state.jobs.fits = lambda request: fits(request, node_resources(store, key[0], key[1]))
        self.apply_faults(pod, state)
        if self._options.heads_on_pod_ips and pod_ip:
            server = DashboardServer(state, host=pod_ip, ports=head_ports(pod))
        else:
            server = DashboardServer(state)
        head = _Head(uid_of(pod), name_of(pod), server=server)
        await self._start_registered(key, head)
        logger.info("kubesim: Ray dashboard of %s/%s serving at %s", key[0], key[1], head.url)

    async def _start_real(self, pod: Mapping[str, Any], key: tuple[str, str]) -> None:
        containers = spec_of(pod).get("containers") or []
        container = containers[0] if containers else {}
        env: dict[str, str] = {}
        if self._store is not None and container:
            env, _ = resolve_env(self._store, pod, container=container)
        head = _Head(
            uid_of(pod), name_of(pod), real=RealRayHead(container=container, env=env, token=self._token_for(pod))
        )
        await self._start_registered(key, head)
        logger.info("kubesim: real Ray head of %s/%s serving at %s", key[0], key[1], head.url)

    async def _start_registered(self, key: tuple[str, str], head: _Head) -> None:
        # Registered before it listens, so a pod deleted (or kubesim stopped) meanwhile still stops it;
        # a start that fails or is cancelled half-way closes whatever it opened.
        replaced = self._heads.get(key)
        self._heads[key] = head
        self._open[id(head)] = head
        try:
            if replaced is not None:  # another start of this cluster's head registered it meanwhile
                await self._stop_head(replaced)
            if head.real is not None:
                await head.real.start()
            elif head.server is not None:
                await head.server.start()
        except BaseException:
            if self._heads.get(key) is head:
                del self._heads[key]
            await self._stop_head(head)
            raise

    def adapt_request(self, base_url: str, method: str, path: str, body: bytes) -> bytes:
        """The body to forward to ``base_url``: real heads get their own Serve port in Serve config PUTs."""
        if not self._options.real_ray:
            return body  # no real head to adapt for: do not walk every head on every proxied request
        for head in self._heads.values():
            if head.real is not None and head.real.url == base_url:
                return head.real.adapt_body(method, path, body)
        return body

    async def stop_for(self, pod: Mapping[str, Any]) -> None:
        """Stop the dashboard of a head pod, if that pod still owns it."""
        key = cluster_key(pod)
        head = self._heads.get(key)
        if head is not None and head.pod_uid == uid_of(pod):
            del self._heads[key]
            await self._stop_head(head)

    async def stop_all(self) -> None:
        """Stop every dashboard (simulator shutdown), also those already being stopped."""
        self._heads = {}
        heads = list(self._open.values())
        await asyncio.gather(*(self._stop_head(head) for head in heads), return_exceptions=True)

    async def _stop_head(self, head: _Head) -> None:
        await head.stop()
        self._open.pop(id(head), None)

    def refresh(self, pod: Mapping[str, Any]) -> None:
        """Re-read a live head pod's failure annotations into its dashboard."""
        head = self._heads.get(cluster_key(pod))
        if head is not None and head.server is not None and head.pod_uid == uid_of(pod):
            self.apply_faults(pod, head.server.state)

    @staticmethod
    def apply_faults(pod: Mapping[str, Any], state: DashboardState) -> None:
        """Copy the ``serve-unhealthy`` / ``gcs-unhealthy`` annotations into a dashboard state."""
        faults = pod_faults(pod)
        state.serve_proxy_healthy = not faults.serve_unhealthy
        state.gcs_healthy = not faults.gcs_unhealthy

    def _token_for(self, pod: Mapping[str, Any]) -> str | None:
        containers = spec_of(pod).get("containers") or []
        if not containers or self._store is None:
            return None
        env, _ = resolve_env(self._store, pod, container=containers[0])
        if env.get("RAY_AUTH_MODE", "").lower() != "token":
            return None
        return env.get("RAY_AUTH_TOKEN") or None

    # --- lookups for tests and the submitter ---------------------------------------------------

    def gcs_ready(self, namespace: str, cluster: str) -> bool:
        """What ``ray health-check`` would say: the head runs and its GCS is healthy."""
        head = self._heads.get((namespace, cluster))
        return head is not None and head.gcs_healthy

    def dashboard_url(self, namespace: str, cluster: str) -> str | None:
        """Loopback base URL of a cluster's dashboard, or None."""
        head = self._heads.get((namespace, cluster))
        return head.url if head is not None and head.running else None

    def dashboard_state(self, namespace: str, cluster: str) -> DashboardState | None:
        """The live state of a cluster's dashboard (tests may inspect or poke it), or None."""
        head = self._heads.get((namespace, cluster))
        return head.server.state if head is not None and head.server is not None else None

    def resolve_address(self, pod: Mapping[str, Any], *, host: str, port: int) -> str | None:
        """Where ``http://host:port`` seen from inside ``pod`` really goes (a dashboard URL), or None."""
        store = self._store
        if store is None:
            return None
        if host in ("127.0.0.1", "localhost", "0.0.0.0", "::1") or host == status_of(pod).get("podIP"):
            return self._url_for_pod(pod, str(port))
        if _is_ip(host):
            for service in store.list(SERVICES):
                if spec_of(service).get("clusterIP") == host:
                    return self.resolve_service(namespace_of(service), name_of(service), str(port))
            for other in store.list(PODS):
                if status_of(other).get("podIP") == host:
                    return self._url_for_pod(other, str(port))
            return None
        parts = host.split(".")
        namespace = parts[1] if len(parts) > 1 and parts[1] != "svc" else namespace_of(pod)
        return self.resolve_service(namespace, parts[0], str(port))

    # --- ProxyResolver ---------------------------------------------------------------------

    def resolve_service(self, namespace: str, service: str, port: str) -> str | None:
        """Base URL behind ``<service>:<port>`` (port name or number), or None."""
        if self._store is None:
            return None
        svc = self._store.get(SERVICES, namespace, service)
        if svc is None:
            return None
        spec = spec_of(svc)
        selector = spec.get("selector") or {}
        if spec.get("type") == "ExternalName" or not selector:
            return None
        target = _service_target(spec.get("ports") or [], port)
        if target is None:
            return None
        publish = bool(spec.get("publishNotReadyAddresses"))
        # The store filters by the selector before copying: copying every pod of the namespace per
        # request made kubesim's CPU grow with pods times requests (prober, submitters, proxy users).
        wanted = label_selector_text(selector)
        candidates = [
            pod
            for pod in self._store.list(PODS, namespace, label_selector=wanted)
            if selector_matches(selector, labels_of(pod))
            and status_of(pod).get("phase") == "Running"
            and not is_terminating(pod)
            and (publish or _pod_ready(pod))
        ]
        # Prefer Ready pods, then heads, so a serve Service spanning head and workers lands deterministically.
        candidates.sort(key=lambda p: (not _pod_ready(p), not is_head_pod(p), name_of(p)))
        for pod in candidates:
            url = self._url_for_pod(pod, target)
            if url is not None:
                return url
        return None

    def resolve_pod(self, namespace: str, pod: str, port: str) -> str | None:
        """Base URL behind ``<pod>:<port>`` (port name or number), or None."""
        if self._store is None:
            return None
        obj = self._store.get(PODS, namespace, pod)
        if obj is None or status_of(obj).get("phase") != "Running":
            return None
        return self._url_for_pod(obj, port)

    def resolve_pod_view(self, pod: Mapping[str, Any], port: str) -> str | None:
        """Base URL behind a port (name or number) of a head Pod already read, while its head runs."""
        head = self._heads.get(cluster_key(pod))
        if head is None or head.pod_uid != uid_of(pod):
            return None
        return self._url_for_pod(pod, port)

    def _url_for_pod(self, pod: Mapping[str, Any], port: str) -> str | None:
        if not _is_http_port(pod, port):
            return None
        head = self._heads.get(cluster_key(pod))
        if head is not None:
            return head.url_for(_container_port(pod, port))
        return self._recorded_url(pod, _container_port(pod, port))

    def _recorded_url(self, pod: Mapping[str, Any], container_port: int | None) -> str | None:
        """A head that simulators attached over HTTP run, elsewhere: where its Pod says it listens."""
        if container_port is None:
            return None
        head_pod: Mapping[str, Any] | None = pod
        if not is_head_pod(pod):
            namespace, cluster = cluster_key(pod)
            wanted = {conventions.LABEL_CLUSTER: cluster, conventions.LABEL_NODE_TYPE: conventions.NODE_HEAD}
            heads = [] if self._store is None else self._store.list(PODS, namespace, label_selector_text(wanted))
            head_pod = next((h for h in heads if not is_terminating(h)), None)
        return None if head_pod is None else recorded_head_urls(head_pod).get(str(container_port))


def _is_ip(host: str) -> bool:
    return bool(re.fullmatch(r"\d+\.\d+\.\d+\.\d+", host))


def _service_target(ports: list[Any], port: str) -> str | None:
    """The targetPort (name or number, as text) of the service port named or numbered ``port``."""
    if not ports:
        # A headless Service without ports: the client's port goes to the pod as is.
        return port or None
    chosen: Mapping[str, Any] | None = None
    for entry in ports:
        if not isinstance(entry, dict):
            continue
        if not port or port in (str(entry.get("name", "")), str(entry.get("port", ""))):
            chosen = entry
            break
    if chosen is None:
        return None
    target = chosen.get("targetPort", chosen.get("port"))
    return None if target is None else str(target)


def _container_port(pod: Mapping[str, Any], port: str) -> int | None:
    """The container port number a port name or number of a pod stands for (Ray's defaults by name)."""
    if port.isdigit():
        return int(port)
    for container in spec_of(pod).get("containers") or []:
        for entry in container.get("ports") or []:
            if entry.get("name") == port and isinstance(entry.get("containerPort"), int):
                return int(entry["containerPort"])
    return _RAY_PORT_NAMES.get(port)


def _is_http_port(pod: Mapping[str, Any], port: str) -> bool:
    if port.isdigit():
        return int(port) not in NON_HTTP_PORTS
    if port in NON_HTTP_PORT_NAMES:
        return False
    for container in spec_of(pod).get("containers") or []:
        for entry in container.get("ports") or []:
            if entry.get("name") == port:
                return int(entry.get("containerPort", 0)) not in NON_HTTP_PORTS
    # An unknown name: accept the Ray HTTP names even when the container does not declare them.
    return port in _RAY_PORT_NAMES or port.startswith(f"{conventions.PORT_SERVE}-")


def _ray_version(pod: Mapping[str, Any]) -> str:
    containers = spec_of(pod).get("containers") or []
    image = str(containers[0].get("image", "")) if containers else ""
    match = _VERSION.search(image.rsplit(":", 1)[-1]) if ":" in image else None
    return match.group(1) if match else "2.52.0"
