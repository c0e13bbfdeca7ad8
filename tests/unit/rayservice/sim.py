"""A small pure simulation of the API server and the other actors around one RayService key.

It applies a Decision's commands to an in-memory object dict (``tests.unit.apiserver``: resourceVersion
checks, finalizers and deletionTimestamp, owner-reference cascade, JSON/merge patches, the status
subresource), records Events and dashboard PUTs, and plays the actors a RayService depends on: the
RayCluster controller (head and worker pods, ``HeadPodReady``), the Ray dashboard (Serve applications
from the submitted config), the prober (``obs-serve`` / ``obs-servehealth`` observations, via
``schema.probes.snapshot_targets``), the EndpointSlice controller, and a Gateway controller. Nothing sleeps,
threads or does I/O; time moves only when a test says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from schema.config import OperatorConfig
from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH, Decision, Snapshot
from schema.keys import ReconcileKey
from schema.messages import (
    Command,
    EmitEvent,
    PatchStatus,
    PutServeConfig,
    Transition,
)
from schema.probes import snapshot_targets
from services.reconciler.rayservice import reconcile
from tests.unit.apiserver import NAMESPACE, ApiServer
from tests.unit.apiserver import stamp as stamp  # the tests take it from here

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def labels(obj: dict[str, Any]) -> dict[str, str]:
    """An object's labels."""
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _with_status(status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A change that sets an object's status to ``status``."""

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = status

    return change


class World(ApiServer):
    """Objects of one namespace, the Ray dashboards, and the log of what reconcile asked for."""

    def __init__(self, *, config: OperatorConfig | None = None, now: datetime = NOW) -> None:
        super().__init__(now=now)
        self.config = config or OperatorConfig()
        self.observations: dict[str, dict[str, dict[str, Any]]] = {OBS_SERVE: {}, OBS_SERVE_HEALTH: {}}
        self.puts: list[PutServeConfig] = []
        self.failed_puts: list[PutServeConfig] = []
        self.unreachable_dashboards: set[str] = set()  # clusters whose dashboard refuses every PUT
        self.transitions: list[Transition] = []
        self.history: list[tuple[Snapshot, datetime, Decision]] = []
        # Dashboard state per cluster: the last config PUT, and how its applications behave.
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.app_status: dict[str, str] = {}  # cluster -> status its apps report ("RUNNING" default)
        self.auto_ready = True  # play the RayCluster controller when a cluster appears
        self.gateway_controller = True

    # -- applying commands --------------------------------------------------------------------------
    def apply_command(self, command: Command) -> None:
        """Apply one command: a Serve config PUT reaches the dashboard, API writes go to the store."""
        match command:
            case PutServeConfig():
                if command.dashboard.cluster in self.unreachable_dashboards:
                    self.failed_puts.append(command)  # the applier reports it failed; the record is not applied
                    return
                self.puts.append(command)
                self.dashboards[command.dashboard.cluster] = copy.deepcopy(command.config)
                if command.record is not None:
                    self.apply_command(command.record)
            case _:
                super().apply_command(command)

    def apply_patch_status(self, command: PatchStatus) -> bool:
        """Merge into the status subresource, keeping the transitions of each applied write."""
        applied = super().apply_patch_status(command)
        if applied:
            self.transitions.extend(command.transitions)
        return applied

    # -- the other actors ---------------------------------------------------------------------------
    def make_cluster_ready(self, name: str, *, workers: int | None = None) -> None:
        """Play the RayCluster controller: head Service, head pod (label ray.io/serve=false), workers,
        HeadPodReady."""
        cluster = self.get("RayCluster", name)
        assert cluster is not None, name
        owner = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name, "uid": cluster["metadata"]["uid"]}]
        if self.get("Service", f"{name}-head-svc") is None:
            self.add(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": f"{name}-head-svc",
                        "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                        "ownerReferences": owner,
                    },
                    "spec": {"ports": [{"name": "dashboard", "port": 8265}]},
                }
            )
        ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        head_spec = cluster["spec"]["headGroupSpec"]["template"]["spec"]
        self.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-head",
                    "labels": {"ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/serve": "false"},
                    "ownerReferences": owner,
                },
                "spec": copy.deepcopy(head_spec),
                "status": {**ready, "podIP": f"10.0.{self._uid % 250}.1"},
            }
        )
        count = workers
        if count is None:
            count = sum(
                int(g.get("replicas", g.get("minReplicas", 1)) or 0)
                for g in cluster["spec"].get("workerGroupSpecs") or []
            )
        for index in range(count):
            self.add(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-worker-{index}",
                        "labels": {"ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/serve": "true"},
                        "ownerReferences": owner,
                    },
                    "status": dict(ready),
                }
            )
        self.update(
            "RayCluster",
            name,
            lambda o: o.__setitem__(
                "status",
                {
                    "state": "ready",
                    "conditions": [{"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady"}],
                    "head": {"podName": f"{name}-head"},
                },
            ),
        )

    def _apps_of(self, cluster: str) -> dict[str, Any]:
        config = self.dashboards.get(cluster)
        if config is None:
            return {}
        status = self.app_status.get(cluster, "RUNNING")
        apps: dict[str, Any] = {}
        for app in config.get("applications") or []:
            deployments = {
                d["name"]: {"status": "HEALTHY" if status == "RUNNING" else "UPDATING", "message": ""}
                for d in app.get("deployments") or []
            }
            apps[app.get("name", "")] = {"status": status, "message": "", "deployments": deployments}
        return apps

    def play_actors(self, rayservice: str) -> bool:
        """Clusters, prober, EndpointSlices and Gateway controller react; True when anything changed."""
        changed = False
        if self.auto_ready:
            for cluster in self.of_kind("RayCluster"):
                name = cluster["metadata"]["name"]
                if not cluster.get("status") and not cluster["metadata"].get("deletionTimestamp"):
                    self.make_cluster_ready(name)
                    changed = True
        changed |= self.observe(rayservice)
        changed |= self.refresh_endpoints()
        if self.gateway_controller:
            changed |= self.accept_gateway_objects()
        return changed

    def observe(self, rayservice: str) -> bool:
        """Play the prober: publish observations that changed (``snapshot_targets`` says what to poll)."""
        changed = False
        for target in snapshot_targets(self.snapshot(rayservice)):
            if target.entry_kind == OBS_SERVE:
                data: dict[str, Any] = {"applications": self._apps_of(target.entry_name)}
            else:
                assert target.pod is not None
                pod = self.get("Pod", target.pod.name)
                apps = self._apps_of(pod["metadata"]["labels"]["ray.io/cluster"] if pod else "")
                healthy = bool(apps) and all(a["status"] == "RUNNING" for a in apps.values())
                data = {"healthy": healthy, "http_status": 200 if healthy else 503, "pod_uid": target.pod.uid}
            if self.observations[target.entry_kind].get(target.entry_name) != data:
                self.observations[target.entry_kind][target.entry_name] = data
                changed = True
        return changed

    def refresh_endpoints(self) -> bool:
        """Play the EndpointSlice controller for every Service with a selector."""
        changed = False
        wanted: dict[str, dict[str, Any]] = {}
        for service in self.of_kind("Service"):
            selector = (service.get("spec") or {}).get("selector") or {}
            if not selector:
                continue
            name = service["metadata"]["name"]
            endpoints = []
            for pod in self.of_kind("Pod"):
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                if all(labels(pod).get(k) == v for k, v in selector.items()):
                    ready = any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (pod.get("status") or {}).get("conditions") or []
                    )
                    endpoints.append(
                        {"conditions": {"ready": ready}, "targetRef": {"kind": "Pod", "uid": pod["metadata"]["uid"]}}
                    )
            wanted[f"{name}-slice"] = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-slice", "labels": {"kubernetes.io/service-name": name}},
                "endpoints": endpoints,
            }
        for name, body in wanted.items():
            current = self.get("EndpointSlice", name)
            if current is None or current.get("endpoints") != body["endpoints"]:
                if current is not None:
                    self.objects.pop(("EndpointSlice", name))
                self.add(body)
                changed = True
        for current in self.of_kind("EndpointSlice"):
            if current["metadata"]["name"] not in wanted:
                self.objects.pop(("EndpointSlice", current["metadata"]["name"]))
                changed = True
        return changed

    def accept_gateway_objects(self) -> bool:
        """Play a Gateway controller: Accepted/Programmed Gateways, Accepted/ResolvedRefs HTTPRoutes."""
        changed = False
        for gateway in self.of_kind("Gateway"):
            if not gateway.get("status"):
                conditions = [{"type": t, "status": "True"} for t in ("Accepted", "Programmed")]
                self.update("Gateway", gateway["metadata"]["name"], _with_status({"conditions": conditions}))
                changed = True
        for route in self.of_kind("HTTPRoute"):
            if not route.get("status"):
                parent = route["spec"]["parentRefs"][0]
                status = {
                    "parents": [
                        {
                            "parentRef": parent,
                            "conditions": [{"type": t, "status": "True"} for t in ("Accepted", "ResolvedRefs")],
                        }
                    ]
                }
                self.update("HTTPRoute", route["metadata"]["name"], _with_status(status))
                changed = True
        return changed

    # -- snapshots and driving ----------------------------------------------------------------------
    def snapshot(self, name: str) -> Snapshot:
        """What the watcher would project under the key: every object, plus observations."""
        entries: dict[str, dict[str, dict[str, Any]]] = {}
        for (k, n), obj in self.objects.items():
            entries.setdefault(k, {})[n] = copy.deepcopy(obj)
        for kind, found in self.observations.items():
            for entry, data in found.items():
                entries.setdefault(kind, {})[entry] = copy.deepcopy(data)
        return Snapshot(key=ReconcileKey(kind="RayService", namespace=NAMESPACE, name=name), entries=entries)

    def reconcile(self, name: str) -> Decision:
        """One pass at ``self.now``, applied."""
        snapshot = self.snapshot(name)
        decision = reconcile(snapshot, self.now, self.config)
        self.history.append((snapshot, self.now, decision))
        self.apply(decision, snapshot.key)
        return decision

    def settle(self, name: str, *, limit: int = 60) -> Decision:
        """Reconcile and let the actors react until nothing changes (each change is an event)."""
        for _ in range(limit):
            decision = self.reconcile(name)
            changed = self.play_actors(name)
            # An Event is not watched for the key: a pass that only records Events triggers nothing.
            if all(isinstance(c, EmitEvent) for c in decision.commands) and not changed:
                return decision
        raise AssertionError(f"no quiescence after {limit} passes: {self.decisions[-1]}")

    def run_timers(self, name: str, *, limit: int = 200) -> Decision:
        """Settle, then keep jumping to each requested wake-up and settling, until none is left."""
        decision = self.settle(name)
        for _ in range(limit):
            if decision.wake_at is None:
                return decision
            self.advance_to(decision.wake_at)
            decision = self.settle(name)
        raise AssertionError("timers never stopped")

    # -- reading -------------------------------------------------------------------------------------
    def status(self, name: str) -> dict[str, Any]:
        """The RayService's status."""
        obj = self.get("RayService", name)
        assert obj is not None
        return dict(obj.get("status") or {})

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        """One condition of the RayService."""
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == type_), None)

    def steps(self, field: str) -> list[Transition]:
        """Confirmed transitions of one field, in order."""
        return [t for t in self.transitions if t.field == field]
