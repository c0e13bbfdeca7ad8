"""What the watcher's dashboard prober must poll for RayJobs, and the proposed bus command for it.

Role: the reconcile code assumes the simplest contract that keeps ``schema/messages.py`` unchanged:

    The prober polls ``GET /api/jobs/<status.jobId>`` for every RayJob whose
    ``status.jobDeploymentStatus`` is ``Running`` (and only those), through the dashboard of the
    RayCluster named ``status.rayClusterName`` (:func:`probe_target` computes the target from the
    RayJob and its RayCluster, exactly as reconcile builds its own DashboardRefs). It publishes an
    ``Observation`` with ``entry_name = <jobId>`` under entry kind ``obs-rayjob`` on the RayJob's key
    only when the answer changed: the JSON body on 200; ``{"http_status": 404}`` when the job does not
    exist; ``{"error": "<text>", "http_status": <code or 0>}`` when the dashboard could not be
    reached or answered another error. It stops polling as soon as the RayJob leaves Running
    (its status write is a watch event the prober sees) and may delete the observation then.

:class:`SetProbes` is the explicit alternative (it would belong in ``schema/messages.py``):
reconcile would emit it whenever the set of jobs to poll for a key changes, and the prober would
replace that key's probe set with it. It is not emitted today.

Invariants: pure; ``probe_target`` never raises and returns None for anything not pollable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from schema.decision import Snapshot
from schema.keys import ReconcileKey
from schema.messages import DashboardRef
from services.reconciler.rayjob.cluster import dashboard_ref, mapping, text


class ProbeTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One Ray job the prober should poll, and how to reach its dashboard."""

    key: ReconcileKey
    job_id: str
    dashboard: DashboardRef


class SetProbes(msgspec.Struct, tag="set_probes", tag_field="type", frozen=True, kw_only=True):
    """Proposal: replace the probe set of ``key`` (empty ``probes`` = stop polling this key)."""

    id: str = ""
    key: ReconcileKey
    probes: tuple[ProbeTarget, ...] = ()


def probe_target(
    rayjob: Mapping[str, Any], *, cluster: Mapping[str, Any] | None, snapshot: Snapshot | None = None
) -> ProbeTarget | None:
    """The job the prober should poll for this RayJob, or None.

    Args:
        rayjob: the RayJob object.
        cluster: the RayCluster named by ``status.rayClusterName`` (None if unknown: defaults apply).
        snapshot: the RayJob key's snapshot, to read the head Service's dashboard port (optional).
    """
    metadata = mapping(rayjob.get("metadata"))
    status = mapping(rayjob.get("status"))
    job_id, cluster_name = text(status.get("jobId")), text(status.get("rayClusterName"))
    namespace, name = text(metadata.get("namespace")), text(metadata.get("name"))
    if status.get("jobDeploymentStatus") != "Running" or not job_id or not cluster_name or not name:
        return None
    key = ReconcileKey(kind="RayJob", namespace=namespace, name=name)
    view = snapshot if snapshot is not None else Snapshot(key=key, entries={})
    dashboard = dashboard_ref(view, namespace=namespace, cluster_name=cluster_name, cluster=cluster)
    return ProbeTarget(key=key, job_id=job_id, dashboard=dashboard)
