"""What the watch side keeps of a Pod: the part the applier's checks, the prober and the key map read.

Pods are the bulk of what the watch side holds (thousands per cluster) and most of a Pod (its spec's
containers, volumes, the status's conditions) is never read there: the projection and the KV-fed facts
keep only identity, labels, controller ownership and deletion state (``authorize``'s ownership checks,
``keymap``'s rules), the pod IP and the first container's ports (the Serve proxy health probe). What goes
to KV and to the reconcilers is the whole object, from its JSON bytes.
"""

from __future__ import annotations

from typing import Any, Final

from schema.objects import first_container, mapping, metadata_of, text

POD: Final = "Pod"

_POD_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "ownerReferences",
    "deletionTimestamp",
)


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The part of a Pod the watch side reads (see the module docstring)."""
    metadata = metadata_of(pod)
    container = first_container(mapping(pod.get("spec")))
    slim: dict[str, Any] = {
        "apiVersion": pod.get("apiVersion"),
        "kind": pod.get("kind"),
        "metadata": {field: metadata[field] for field in _POD_METADATA if field in metadata},
    }
    if container:
        slim["spec"] = {"containers": [{"name": container.get("name"), "ports": container.get("ports") or []}]}
    pod_ip = text(mapping(pod.get("status")).get("podIP"))
    if pod_ip:
        slim["status"] = {"podIP": pod_ip}
    return slim
