"""Defaulting of built-in kinds: what kube-apiserver fills in on write, so clients see real-looking objects.

Covers the fields a controller is likely to compare against: Pod spec/container defaults, initial
Pod status (``Pending`` + QoS class), Service type/ports/clusterIP, Job selector/labels/counters and
Namespace finalizers/phase. Everything else is stored as sent. Defaults run on every write of the
main resource (they are idempotent); status defaults only on create.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kubesim.resources import ResourceInfo

Obj = dict[str, Any]

_SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")


class ClusterIPAllocator:
    """Hands out Service clusterIPs from 10.96.0.0/12 (10.96.0.1 is kubernetes.default's)."""

    def __init__(self) -> None:
        self._next = int(_SERVICE_CIDR.network_address) + 2
        self._in_use: set[str] = set()

    def allocate(self) -> str:
        """A free address."""
        while True:
            candidate = str(ipaddress.ip_address(self._next))
            self._next += 1
            if self._next >= int(_SERVICE_CIDR.broadcast_address):
                self._next = int(_SERVICE_CIDR.network_address) + 2
            if candidate not in self._in_use:
                self._in_use.add(candidate)
                return candidate

    def reserve(self, ip: str) -> None:
        """Mark a client-chosen address as used."""
        self._in_use.add(ip)

    def release(self, ip: str) -> None:
        """Return an address when its Service goes away."""
        self._in_use.discard(ip)


def _default_container(container: Obj) -> None:
    image = str(container.get("image", ""))
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    container.setdefault("imagePullPolicy", "Always" if tag in ("", "latest") and "@" not in image else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def default_pod_spec(spec: Obj) -> None:
    """The Pod spec defaults, shared by Pods and pod templates."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            if isinstance(container, dict):
                _default_container(container)


def _qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    requests_or_limits = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests or limits:
            requests_or_limits = True
        for resource in ("cpu", "memory"):
            if resource not in limits or requests.get(resource, limits[resource]) != limits[resource]:
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_or_limits else "BestEffort"


def _default_pod(obj: Obj, *, create: bool) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    # The deprecated alias the real server still fills in.
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    if create:
        _default_tolerations(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos_class(spec))


# What the DefaultTolerationSeconds admission plugin adds to every new Pod not tolerating these taints.
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _tolerates(tolerations: list[Any], key: str) -> bool:
    for toleration in tolerations:
        if not isinstance(toleration, dict) or toleration.get("effect") not in (None, "", "NoExecute"):
            continue
        if toleration.get("key") == key or (not toleration.get("key") and toleration.get("operator") == "Exists"):
            return True
    return False


def _default_tolerations(spec: Obj) -> None:
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    for key in _DEFAULT_TOLERATIONS:
        if not _tolerates(tolerations, key):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    spec["tolerations"] = tolerations


def _default_service(obj: Obj, ips: ClusterIPAllocator, old: Obj | None) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    if spec["type"] == "ExternalName":
        return
    old_ip = (old or {}).get("spec", {}).get("clusterIP")
    if not spec.get("clusterIP"):
        spec["clusterIP"] = old_ip or ips.allocate()
    elif old is None and spec["clusterIP"] != "None":
        ips.reserve(spec["clusterIP"])
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] != "None" or spec.get("selector"):
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    obj.setdefault("status", {"loadBalancer": {}})


def _default_job(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    uid = obj["metadata"]["uid"]
    name = obj["metadata"]["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    generated = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if not spec.get("manualSelector"):
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **generated}
    template_spec = spec.setdefault("template", {}).setdefault("spec", {})
    default_pod_spec(template_spec)


def _default_namespace(obj: Obj, *, create: bool) -> None:
    meta = obj["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    if create:
        obj["status"] = {"phase": "Active"}


def apply_builtin_defaults(info: ResourceInfo, obj: Obj, *, ips: ClusterIPAllocator, old: Obj | None) -> None:
    """Default ``obj`` in place for a create (``old`` None) or an update of the main resource."""
    key = info.storage_key
    create = old is None
    if key == ("", "pods"):
        _default_pod(obj, create=create)
    elif key == ("", "services"):
        _default_service(obj, ips, old)
    elif key == ("batch", "jobs"):
        _default_job(obj)
    elif key == ("", "namespaces"):
        _default_namespace(obj, create=create)
