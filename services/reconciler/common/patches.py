"""Patch bodies: JSON merge-patch diffs (RFC 7386), omitempty status bodies, and the JSON patches for
finalizers, for every kind.

Role: turn "old status, new status" into the smallest merge patch that makes the server's copy equal
to the new one, and add/remove one finalizer with a ``test`` guard so a stale patch fails instead of
removing the wrong list element.

Invariants: :func:`merge_diff` never mutates its inputs; applying its result to ``old`` with merge-patch
semantics yields ``new`` (keys missing from ``new`` become ``null``).

Not here: deciding *whether* to write (each kind's ``status`` module owns KubeRay's write rule).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new``; empty when they are equal."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if key not in old:
            if value is not None:
                patch[key] = copy.deepcopy(value)
            continue
        before = old[key]
        if before == value:
            continue
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            nested = merge_diff(before, value)
            if nested:
                patch[key] = nested
        else:
            patch[key] = copy.deepcopy(value)
    for key in old:
        if key not in new and old[key] is not None:
            patch[key] = None
    return patch


def add_finalizer_patch(finalizers: list[str], finalizer: str) -> list[dict[str, Any]]:
    """JSON patch appending ``finalizer`` (creating the list when absent)."""
    if not finalizers:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
    return [{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]


def remove_finalizer_patch(finalizers: list[str], finalizer: str) -> list[dict[str, Any]]:
    """JSON patch removing ``finalizer``: a ``test`` of the element, then its ``remove``."""
    index = finalizers.index(finalizer)
    path = f"/metadata/finalizers/{index}"
    return [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]


def compact(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` without empty values (recursively for nested objects), as Go's omitempty writes it."""
    out: dict[str, Any] = {}
    for key, value in status.items():
        if isinstance(value, Mapping):
            value = compact(value)
        if not is_empty(value):
            out[key] = value
    return out


def is_empty(value: object) -> bool:
    """Go's zero value of a JSON field: omitted by omitempty."""
    return value is None or value == "" or value == {} or value == []
