"""Where a simulated Ray head listens, recorded on its Pod for clients that cannot use kubesim's proxies.

In kubesim, the service and pod proxies and the port-forward lead to a head's loopback ports. Attached to
another API server (``kubesim attach``) they cannot: a real kube-apiserver proxies only to Pod IPs, where a
simulated head listens only with ``SimOptions.heads_on_pod_ips``. So the kubelet then writes the annotation
``kubesim.raybus.io/head-urls`` on each running head Pod: a JSON object from container port (as text) to
the base URL answering it on this machine, e.g.
``{"8265": "http://127.0.0.1:40123", "52365": "http://127.0.0.1:40125"}``. The Serve port appears while
Serve runs. The annotation is refreshed while the head lives and left stale when it stops
(the Pod is then no longer Ready).

kubesim serving without simulators of its own (``--kubelet off``) resolves its proxies from these
annotations (:class:`RecordedHeads`), so its service proxy reaches heads run by attached simulators.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubesim.dashboard import SystemClock
from kubesim.hooks import Store
from kubesim.sims.annotations import HEAD_URLS
from kubesim.sims.dashboards import RayDashboards
from kubesim.sims.objects import (
    PODS,
    annotations_of,
    api_error_code,
    meta,
    name_of,
    namespace_of,
    spec_of,
    uid_of,
    update_in,
)
from kubesim.sims.options import INSTANT
from schema.ray import conventions

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0
"""How often a head's worker looks for a changed address (Serve starting or stopping)."""
_RAY_HTTP_PORTS = (
    conventions.DEFAULT_DASHBOARD_PORT,
    conventions.DEFAULT_DASHBOARD_AGENT_PORT,
    conventions.DEFAULT_SERVE_PORT,
    conventions.DEFAULT_METRICS_PORT,
)


def head_urls(dashboards: RayDashboards, pod: Mapping[str, Any]) -> dict[str, str]:
    """Container port → base URL of every HTTP port of a head Pod that answers now."""
    ports: set[int] = set(_RAY_HTTP_PORTS)
    containers = spec_of(pod).get("containers") or []
    for entry in (containers[0].get("ports") or []) if containers else []:
        if isinstance(entry, dict) and isinstance(entry.get("containerPort"), int):
            ports.add(int(entry["containerPort"]))
    urls: dict[str, str] = {}
    for port in sorted(ports):
        url = dashboards.resolve_pod_view(pod, str(port))
        if url is not None:
            urls[str(port)] = url
    return urls


async def publish_head_urls(store: Store, pod: Mapping[str, Any], urls: Mapping[str, str]) -> None:
    """Write ``urls`` into the head Pod's annotation unless it holds them already; a conflict or a Pod gone
    meanwhile is left to the next refresh."""
    text = json.dumps(dict(urls), sort_keys=True, separators=(",", ":"))
    if annotations_of(pod).get(HEAD_URLS) == text:
        return
    fresh = store.get(PODS, namespace_of(pod), name_of(pod))
    if fresh is None or uid_of(fresh) != uid_of(pod):
        return
    meta(fresh)["annotations"] = {**annotations_of(fresh), HEAD_URLS: text}
    try:
        await update_in(store, PODS, fresh)
    except Exception as error:
        if api_error_code(error) not in (404, 409):
            raise
        logger.debug("kubesim kubelet: head URLs of %s/%s not written yet: %s", namespace_of(pod), name_of(pod), error)


class RecordedHeads:
    """The proxy resolver of a kubesim that runs no simulator itself: the service and pod proxies and the
    port-forward lead to the heads that simulators attached over HTTP recorded on their Pods."""

    def __init__(self) -> None:
        self._dashboards = RayDashboards(options=INSTANT, clock=SystemClock())
        """A registry without heads of its own: it resolves Services and Pods as usual, then the
        recorded URLs."""

    def attach(self, store: Store) -> None:
        """Read Services and Pods from ``store``."""
        self._dashboards.attach(store)

    def resolve_service(self, namespace: str, service: str, port: str) -> str | None:
        """Base URL behind ``<service>:<port>`` as recorded by its head Pod, or None."""
        return self._dashboards.resolve_service(namespace, service, port)

    def resolve_pod(self, namespace: str, pod: str, port: str) -> str | None:
        """Base URL behind ``<pod>:<port>`` as recorded by its cluster's head Pod, or None."""
        return self._dashboards.resolve_pod(namespace, pod, port)
