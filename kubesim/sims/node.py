"""The simulated node's own objects: its ``Node`` (registered at start, Ready) and its heartbeat ``Lease``.

A kubelet registers the Node its Pods are bound to and renews a Lease in ``kube-node-lease`` so the node
lifecycle controller (where one runs) keeps it Ready. kubesim's core reads the registered Node as "a
kubelet finishes this node's Pod deletions" (graceful termination). The Node is left in place when the
simulator stops, as a real kubelet leaves it; capacity is nominal (nothing schedules against it).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kubesim.dashboard import Clock
from kubesim.hooks import Store
from kubesim.sims.objects import LEASES, NODES, api_error_code, rfc3339, uid_of
from kubesim.sims.options import SimOptions

logger = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
"""The Lease's duration, as a real kubelet's (``nodeLeaseDurationSeconds``)."""
RENEW_INTERVAL = 10.0
"""Seconds between Lease renewals (a quarter of its duration, as a real kubelet)."""
KUBELET_VERSION = "v1.33.0-kubesim"


def _micro_time(epoch_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(options: SimOptions, *, now: str) -> dict[str, Any]:
    """The status a Ready simulated node reports."""
    resources = {"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"}
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind, reason, message in pressure
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return {
        "capacity": resources,
        "allocatable": dict(resources),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": options.host_ip},
            {"type": "Hostname", "address": options.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": "kubesim",
            "systemUUID": "kubesim",
            "bootID": "kubesim",
            "kernelVersion": "kubesim",
            "osImage": "kubesim",
            "containerRuntimeVersion": "kubesim://1",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def register_node(store: Store, options: SimOptions, clock: Clock) -> dict[str, Any]:
    """Create the simulated Node (or take over an existing one) and report it Ready; returns the Node."""
    name = options.node_name
    node = store.get(NODES, None, name)
    if node is None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "spec": {},
        }
        try:
            node = store.create(NODES, body)
        except Exception as error:
            if api_error_code(error) != 409:
                raise
            node = store.get(NODES, None, name)
            if node is None:
                raise
    node["status"] = node_status(options, now=rfc3339(clock.time()))
    store.update(NODES, node, subresource="status")
    return node


def renew_lease(store: Store, options: SimOptions, clock: Clock, *, node_uid: str) -> None:
    """Create or renew the node's heartbeat Lease."""
    name = options.node_name
    now = _micro_time(clock.time())
    lease = store.get(LEASES, LEASE_NAMESPACE, name)
    if lease is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
        }
        store.create(LEASES, body)
        return
    lease["spec"] = {**(lease.get("spec") or {}), "holderIdentity": name, "renewTime": now}
    store.update(LEASES, lease)


async def heartbeat(store: Store, options: SimOptions, clock: Clock, *, node: dict[str, Any]) -> None:
    """Renew the node's Lease every :data:`RENEW_INTERVAL` seconds until cancelled (failures are logged)."""
    while True:
        try:
            renew_lease(store, options, clock, node_uid=uid_of(node))
        except Exception as error:  # a missing kube-node-lease namespace or a conflict: try again next round
            logger.warning("kubesim kubelet: cannot renew the Lease of node %s: %s", options.node_name, error)
        await asyncio.sleep(RENEW_INTERVAL)
