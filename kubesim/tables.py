"""Server-side printing (``Accept: application/json;as=Table``) so ``kubectl get`` shows real columns.

Built-in kinds get the columns kubectl users expect (a subset of the real printers); custom
resources get Name plus their CRD's ``additionalPrinterColumns`` (simple ``.a.b.c`` JSONPaths only);
everything else Name and Age. Rows carry ``PartialObjectMetadata`` as the real server's default
``includeObject=Metadata`` does.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from typing import Any

from kubesim.resources import ResourceInfo

Obj = dict[str, Any]
Column = tuple[str, str, Callable[[Obj, float], Any], int]
"""(name, type, render(obj, now), priority): priority > 0 columns only show with ``-o wide``."""


def _path(obj: Any, json_path: str) -> Any:
    cur = obj
    for part in json_path.strip().lstrip("{").rstrip("}").lstrip(".").split("."):
        if not part:
            continue
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def age(timestamp: str | None, now: float) -> str:
    """kubectl's short relative age (``5s``, ``3m``, ``2h``, ``4d``)."""
    if not timestamp:
        return "<unknown>"
    seconds = max(0, int(now - calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 2 * 3600:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _age(obj: Obj, now: float) -> str:
    return age(obj["metadata"].get("creationTimestamp"), now)


def _name(obj: Obj, _: float) -> str:
    return str(obj["metadata"]["name"])


def _pod_ready(obj: Obj, _: float) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Obj, _: float) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _pod_restarts(obj: Obj, _: float) -> int:
    return sum(int(s.get("restartCount", 0)) for s in (obj.get("status") or {}).get("containerStatuses") or ())


def _svc_ports(obj: Obj, _: float) -> str:
    ports = (obj.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _job_status(obj: Obj, _: float) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed", "Suspended"):
            return str(cond["type"])
    return "Running"


def _job_completions(obj: Obj, _: float) -> str:
    return f"{(obj.get('status') or {}).get('succeeded', 0)}/{(obj.get('spec') or {}).get('completions', 1)}"


_BUILTIN: dict[tuple[str, str], list[tuple[str, str, Callable[[Obj, float], Any]]]] = {
    ("", "pods"): [
        ("Ready", "string", _pod_ready),
        ("Status", "string", _pod_status),
        ("Restarts", "integer", _pod_restarts),
    ],
    ("", "services"): [
        ("Type", "string", lambda o, _: (o.get("spec") or {}).get("type", "")),
        ("Cluster-IP", "string", lambda o, _: (o.get("spec") or {}).get("clusterIP", "")),
        ("External-IP", "string", lambda o, _: "<none>"),
        ("Port(s)", "string", _svc_ports),
    ],
    ("", "namespaces"): [("Status", "string", lambda o, _: (o.get("status") or {}).get("phase", ""))],
    ("batch", "jobs"): [("Status", "string", _job_status), ("Completions", "string", _job_completions)],
}


def _path_column(json_path: str, type_: str) -> Callable[[Obj, float], Any]:
    if type_ == "date":
        # Like the real CRD table convertor, dates are shown as ages.
        return lambda obj, now: age(_path(obj, json_path), now) if _path(obj, json_path) else None
    return lambda obj, _: _path(obj, json_path)


def _columns(info: ResourceInfo) -> list[Column]:
    if info.custom and info.printer_columns:
        cols: list[Column] = [("Name", "string", _name, 0)]
        for spec in info.printer_columns:
            type_ = str(spec.get("type", "string"))
            render = _path_column(str(spec.get("jsonPath", "")), type_)
            cols.append((str(spec.get("name", "")), type_, render, int(spec.get("priority", 0))))
        return cols
    builtin = [(name, type_, render, 0) for name, type_, render in _BUILTIN.get(info.storage_key, [])]
    return [("Name", "string", _name, 0), *builtin, ("Age", "string", _age, 0)]


def to_table(info: ResourceInfo, objs: list[Obj], *, resource_version: str, now: float) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objs``."""
    columns = _columns(info)
    definitions = [
        {"name": name, "type": type_, "format": "name" if name == "Name" else "", "description": name, "priority": prio}
        for name, type_, _, prio in columns
    ]
    rows = [
        {
            "cells": [render(obj, now) for _, _, render, _ in columns],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]},
        }
        for obj in objs
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def wants_table(accept: str) -> bool:
    """Whether the client asked for server-side printing."""
    return "as=Table" in accept
