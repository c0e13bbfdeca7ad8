"""Decoding Kubernetes JSON (as builtins) into the typed ray.io views, and back.

Role: the only way reconcile code turns a projected object (a ``dict`` from the snapshot) into a typed
RayCluster / RayJob / RayService / RayCronJob.

Invariants: decoding is lenient the way the API server is (unknown fields are ignored, strings such as
``"3"`` are accepted for numbers), and fails with :class:`msgspec.ValidationError` (message and JSON
path) on anything the types cannot hold; the caller turns that into a validation status or Event (docs/behaviour.md#8).
``to_builtins`` omits fields equal to their default, except ``apiVersion``/``kind``/``metadata``/
``status`` of the top-level objects.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from schema.ray.common import RayStruct
from schema.ray.raycluster import RayCluster
from schema.ray.raycronjob import RayCronJob
from schema.ray.rayjob import RayJob
from schema.ray.rayservice import RayService

RayObject = RayCluster | RayJob | RayService | RayCronJob

T = TypeVar("T", bound=RayStruct)


def decode_as(obj: dict[str, Any], type_: type[T]) -> T:
    """Decode a builtins object into ``type_``.

    Raises:
        msgspec.ValidationError: ``obj`` does not fit the type (the message names the JSON path).
    """
    return msgspec.convert(obj, type_, strict=False)


def decode_raycluster(obj: dict[str, Any]) -> RayCluster:
    """Decode a RayCluster object. Raises msgspec.ValidationError."""
    return decode_as(obj, RayCluster)


def decode_rayjob(obj: dict[str, Any]) -> RayJob:
    """Decode a RayJob object. Raises msgspec.ValidationError."""
    return decode_as(obj, RayJob)


def decode_rayservice(obj: dict[str, Any]) -> RayService:
    """Decode a RayService object. Raises msgspec.ValidationError."""
    return decode_as(obj, RayService)


def decode_raycronjob(obj: dict[str, Any]) -> RayCronJob:
    """Decode a RayCronJob object. Raises msgspec.ValidationError."""
    return decode_as(obj, RayCronJob)


def decode_ray_object(obj: dict[str, Any]) -> RayObject:
    """Decode any of the four kinds, chosen by ``obj["kind"]``.

    Raises:
        msgspec.ValidationError: unknown kind, or ``obj`` does not fit the kind's type.
    """
    match obj.get("kind"):
        case "RayCluster":
            return decode_raycluster(obj)
        case "RayJob":
            return decode_rayjob(obj)
        case "RayService":
            return decode_rayservice(obj)
        case "RayCronJob":
            return decode_raycronjob(obj)
        case other:
            raise msgspec.ValidationError(f"not a ray.io kind: {other!r}")


def to_builtins(value: RayStruct) -> dict[str, Any]:
    """Encode a ray.io struct as JSON builtins (camelCase keys, defaults omitted, lists not tuples)."""
    # Through JSON rather than msgspec.to_builtins, which keeps tuples: callers hand the result to
    # YAML dumpers and patch builders that expect plain lists.
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(value))
    return out
