"""Lenient readers of Kubernetes objects held as plain JSON (untrusted: any field may be missing or of
the wrong type).

Role: the one set of helpers that reads a field without trusting its type, so that no reader of a
malformed object raises: a wrong type reads as absent.

Invariants: pure; never raise; never mutate their argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def text(value: object) -> str:
    """``value`` if it is a string, else ""."""
    return value if isinstance(value, str) else ""


def integer(value: object) -> int | None:
    """An int from JSON (a numeric string is accepted, as the lenient decoders do); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        stripped = value[1:] if value[:1] in ("-", "+") else value
        if stripped.isdigit() and stripped.isascii() and len(stripped) < 20:
            return int(value)
    return None


def string_map(value: object) -> dict[str, str]:
    """A ``map[string]string``: entries that are not string to string are dropped."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def metadata_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata``."""
    return mapping(mapping(obj).get("metadata"))


def name_of(obj: Mapping[str, Any] | None) -> str:
    """``metadata.name``."""
    return text(metadata_of(obj).get("name"))


def namespace_of(obj: Mapping[str, Any] | None) -> str:
    """``metadata.namespace``."""
    return text(metadata_of(obj).get("namespace"))


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.labels`` (non-string values dropped)."""
    return string_map(metadata_of(obj).get("labels"))


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.annotations`` (non-string values dropped)."""
    return string_map(metadata_of(obj).get("annotations"))


def being_deleted(obj: Mapping[str, Any] | None) -> bool:
    """The object carries a deletionTimestamp."""
    return bool(metadata_of(obj).get("deletionTimestamp"))


def condition_true(conditions: object, type_: str) -> bool:
    """A ``metav1.Condition`` list has ``type_`` with status ``True``."""
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True" for c in conditions
    )


def container_port(container: Mapping[str, Any], name: str) -> int | None:
    """The ``containerPort`` of the port called ``name`` in a container, or None."""
    ports = container.get("ports")
    for port in ports if isinstance(ports, list) else ():
        number = mapping(port).get("containerPort")
        if mapping(port).get("name") == name and isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


def service_port(service: Mapping[str, Any] | None, name: str) -> int | None:
    """The ``port`` of the Service port called ``name``, or None."""
    ports = mapping(mapping(service).get("spec")).get("ports")
    for port in ports if isinstance(ports, list) else ():
        number = mapping(port).get("port")
        if mapping(port).get("name") == name and isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


def first_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``containers[0]`` of a pod spec (the Ray container), or an empty mapping."""
    containers = pod_spec.get("containers")
    if isinstance(containers, list) and containers:
        return mapping(containers[0])
    return {}


def head_container(cluster_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Ray container of a RayClusterSpec's head template, or an empty mapping."""
    template = mapping(mapping(cluster_spec.get("headGroupSpec")).get("template"))
    return first_container(mapping(template.get("spec")))
