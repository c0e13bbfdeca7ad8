"""URL → resource coordinates, following kube-apiserver's path layout.

``/api/v1/...`` and ``/apis/<group>/<version>/...`` then
``[watch/][namespaces/<ns>/]<plural>[/<name>[/<subresource>[/<rest>]]]``. ``/api/v1/namespaces/<n>``
itself (and its ``/status`` / ``/finalize``) addresses the Namespace object. Pure: no store access.
"""

from __future__ import annotations

from typing import NamedTuple


class Target(NamedTuple):
    """What a resource URL addresses."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    rest: str
    """For proxy subresources: the path after ``/proxy`` (with its leading slash, may be empty)."""
    watch_prefix: bool


def parse(path: str) -> Target | None:
    """Parse a resource path; None when it is not one (discovery paths included)."""
    parts = path.split("/")
    # parts[0] is "" (leading slash).
    if len(parts) >= 4 and parts[1] == "api":
        group, version, rest = "", parts[2], parts[3:]
    elif len(parts) >= 5 and parts[1] == "apis":
        group, version, rest = parts[2], parts[3], parts[4:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":
        watch = True
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace = rest[1]
        rest = rest[2:]
    if not rest or not rest[0]:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 and rest[1] != "" else None
    subresource = rest[2] if len(rest) > 2 and rest[2] != "" else None
    tail = "/" + "/".join(rest[3:]) if len(rest) > 3 else ""
    if name is None and len(rest) > 2:
        return None
    return Target(group, version, plural, namespace, name, subresource, tail, watch)
