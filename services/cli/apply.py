"""``raybus up --apply FILE``: apply a manifest like ``kubectl apply`` and follow its ray.io objects.

Objects are created, or merge-patched when they exist, through the official client's dynamic client.
Then each custom resource's status is shown live on one line per object (redrawn in place on a
terminal, printed on change otherwise) until every one is ready: a RayCluster ``ready``, a RayJob
``Complete``/``Failed``, a RayService ``Running``, a RayCronJob after its first schedule.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config, dynamic
from kubernetes.client.exceptions import ApiException

from schema.ray.conventions import GROUP

Progress = tuple[str, bool]
"""A one-line summary and whether the object is done."""


def summarize(obj: dict[str, Any]) -> Progress:
    """One line describing a ray.io object's status, and whether it reached its goal."""
    kind = obj.get("kind", "")
    name = obj.get("metadata", {}).get("name", "")
    status = obj.get("status") or {}
    if kind == "RayCluster":
        state = status.get("state") or "pending"
        ready, desired = status.get("readyWorkerReplicas", 0), status.get("desiredWorkerReplicas", 0)
        return f"RayCluster {name}: {state}, workers ready {ready}/{desired}", state == "ready"
    if kind == "RayJob":
        deployment = status.get("jobDeploymentStatus") or "New"
        job = status.get("jobStatus") or "-"
        return f"RayJob {name}: {deployment}, job {job}", deployment in ("Complete", "Failed", "ValidationFailed")
    if kind == "RayService":
        service = status.get("serviceStatus") or "Initializing"
        endpoints = status.get("numServeEndpoints", 0)
        return f"RayService {name}: {service}, serve endpoints {endpoints}", service == "Running"
    if kind == "RayCronJob":
        last = status.get("lastScheduleTime") or "not yet"
        return f"RayCronJob {name}: last schedule {last}", bool(status.get("lastScheduleTime"))
    return f"{kind} {name}: applied", True


def apply_documents(client: dynamic.DynamicClient, docs: list[dict[str, Any]]) -> list[tuple[Any, str, str]]:
    """Create or merge-patch each document; return (resource, namespace, name) of each."""
    applied = []
    for doc in docs:
        resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        meta = doc.setdefault("metadata", {})
        namespace = meta.get("namespace", "default") if resource.namespaced else None
        try:
            created = resource.create(body=doc, namespace=namespace)
        except ApiException as exc:
            if exc.status != 409 or not meta.get("name"):
                raise
            created = resource.patch(
                body=doc, name=meta["name"], namespace=namespace, content_type="application/merge-patch+json"
            )
        applied.append((resource, namespace or "", created.metadata.name))
        print(f"{doc['kind']} {created.metadata.name} applied", flush=True)
    return applied


def apply_and_follow(
    path: Path, kubeconfig: str, *, stop: Callable[[], bool], alive: Callable[[], None], interval: float = 0.5
) -> None:
    """Apply ``path`` and show live status until every ray.io object is done or ``stop()``."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    client = dynamic.DynamicClient(config.new_client_from_config(kubeconfig))  # type: ignore[no-untyped-call]
    applied = apply_documents(client, docs)
    followed = [(r, ns, name) for r, ns, name in applied if r.group == GROUP]
    tty = sys.stdout.isatty()
    shown: list[str] = []
    while followed and not stop():
        alive()
        lines: list[str] = []
        done = True
        for resource, namespace, name in followed:
            obj = resource.get(name=name, namespace=namespace or None).to_dict()
            line, finished = summarize(obj)
            lines.append(("✔ " if finished else "… ") + line)
            done = done and finished
        if lines != shown:
            if tty and shown:
                sys.stdout.write(f"\x1b[{len(shown)}F\x1b[J")
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
            shown = lines
        if done:
            return
        time.sleep(interval)
