"""What the watch side keeps of a Pod: the part the applier's checks, the prober and the key map read.

Pods are the bulk of what the watch side holds (thousands per cluster) and most of a Pod (its spec's
containers, volumes, the status's conditions) is never read there: the projection and the KV-fed facts
keep only identity, labels, controller ownership and deletion state (``authorize``'s ownership checks,
``keymap``'s rules), the pod IP and the first container's ports (the Serve proxy health probe). What goes
to KV and to the reconcilers is the whole object, from its JSON bytes.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

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


# What ``decode_slim_pod`` decodes of a Pod's JSON; every other field is skipped by msgspec without being
# built. A field absent from the JSON stays UNSET, so absent and null are told apart as ``slim_pod`` does.
_Metadata = msgspec.defstruct("_Metadata", [(field, Any, msgspec.UNSET) for field in _POD_METADATA])


class _Container(msgspec.Struct):
    name: Any = msgspec.UNSET
    ports: Any = msgspec.UNSET


class _Spec(msgspec.Struct):
    containers: list[_Container] | None = None


class _Status(msgspec.Struct):
    podIP: Any = None


class _SlimPod(msgspec.Struct):
    apiVersion: Any = None
    kind: Any = None
    metadata: _Metadata | None = None  # type: ignore[valid-type]  # built from _POD_METADATA above
    spec: _Spec | None = None
    status: _Status | None = None


_slim_decoder: Final[msgspec.json.Decoder[_SlimPod]] = msgspec.json.Decoder(_SlimPod)
_full_decoder: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])


def decode_slim_pod(data: bytes) -> dict[str, Any]:
    """``slim_pod`` of the Pod whose JSON is ``data``, without building the rest of it (the KV-fed facts
    read every Pod write: decoding the whole object was most of their cost).

    A Pod of an unexpected shape (a field of another type, a first container without a name or ports)
    is decoded whole and slimmed, so the answer is always ``slim_pod``'s.

    Raises:
        msgspec.DecodeError: ``data`` is not JSON, or not a JSON object.
    """
    try:
        pod = _slim_decoder.decode(data)
    except msgspec.ValidationError:
        return slim_pod(_full_decoder.decode(data))
    containers = pod.spec.containers if pod.spec is not None else None
    first = containers[0] if containers else None
    if first is not None and first.name is msgspec.UNSET and first.ports is msgspec.UNSET:
        return slim_pod(_full_decoder.decode(data))  # whether it has other fields decides: rare, decode it all
    metadata = pod.metadata
    slim: dict[str, Any] = {
        "apiVersion": pod.apiVersion,
        "kind": pod.kind,
        "metadata": {}
        if metadata is None
        else {field: value for field in _POD_METADATA if (value := getattr(metadata, field)) is not msgspec.UNSET},
    }
    if first is not None:
        name = None if first.name is msgspec.UNSET else first.name
        ports = None if first.ports is msgspec.UNSET else first.ports
        slim["spec"] = {"containers": [{"name": name, "ports": ports or []}]}
    pod_ip = text(pod.status.podIP) if pod.status is not None else ""
    if pod_ip:
        slim["status"] = {"podIP": pod_ip}
    return slim
