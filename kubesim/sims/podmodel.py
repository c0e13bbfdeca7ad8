"""The kubelet simulator's in-memory picture of one pod, and its rendering into ``Pod.status``.

The kubelet keeps what it "runs" here (container states, restarts, start and finish times) and writes
the rendered status after each change. Rendering follows the real kubelet's rules: the phase comes from
the containers and the restart policy, conditions (PodScheduled, PodReadyToStartContainers, Initialized,
ContainersReady, Ready) keep their lastTransitionTime until their status really changes, and conditions
this simulator does not own (readiness gates set by someone else) are carried over untouched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kubesim.sims.objects import rfc3339

ContainerState = Literal["waiting", "running", "terminated"]
OWNED_CONDITIONS = ("PodReadyToStartContainers", "PodScheduled", "Initialized", "ContainersReady", "Ready")


@dataclass(kw_only=True)
class ContainerSim:
    """One simulated container."""

    name: str
    image: str
    restart_policy: str
    """The effective restart policy (container-level if set, else the pod's)."""
    state: ContainerState = "waiting"
    reason: str | None = "ContainerCreating"
    """Waiting or terminated reason."""
    message: str | None = None
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    ready: bool = False
    restart_count: int = 0
    last_terminated: dict[str, Any] | None = None
    sidecar: bool = False
    """A native sidecar (init container with restartPolicy Always): keeps running."""

    def container_id(self) -> str:
        """A stable fake containerd id (changes with each restart)."""
        digest = hashlib.sha256(f"{self.name}/{self.restart_count}".encode()).hexdigest()
        return f"containerd://{digest}"

    def start(self, now: float) -> None:
        """The container process starts."""
        self.state, self.reason, self.message = "running", None, None
        self.exit_code, self.finished_at = None, None
        self.started_at = now
        self.ready = False

    def terminate(self, exit_code: int, now: float, *, reason: str | None = None) -> None:
        """The container process exits."""
        self.state = "terminated"
        self.exit_code = exit_code
        self.reason = reason or ("Completed" if exit_code == 0 else "Error")
        self.finished_at = now
        self.ready = False

    def restart(self, now: float) -> None:
        """Keep the last run as ``lastState`` and start again."""
        self.last_terminated = self._terminated_dict()
        self.restart_count += 1
        self.start(now)

    def wait(self, reason: str, message: str | None = None) -> None:
        """Put the container in a waiting state."""
        if self.state == "terminated":
            self.last_terminated = self._terminated_dict()
        self.state, self.reason, self.message = "waiting", reason, message
        self.ready = False

    def will_restart(self) -> bool:
        """Whether the kubelet restarts this container after it terminated."""
        if self.restart_policy == "Always":
            return True
        return self.restart_policy == "OnFailure" and self.exit_code not in (None, 0)

    def _terminated_dict(self) -> dict[str, Any]:
        return {
            "terminated": {
                "exitCode": self.exit_code if self.exit_code is not None else 0,
                "reason": self.reason or "Completed",
                "startedAt": rfc3339(self.started_at) if self.started_at is not None else None,
                "finishedAt": rfc3339(self.finished_at) if self.finished_at is not None else None,
                "containerID": self.container_id(),
            }
        }

    def render(self) -> dict[str, Any]:
        """This container's entry of ``containerStatuses`` / ``initContainerStatuses``."""
        state: dict[str, Any]
        if self.state == "running":
            state = {"running": {"startedAt": rfc3339(self.started_at or 0.0)}}
        elif self.state == "terminated":
            state = self._terminated_dict()
        else:
            waiting: dict[str, Any] = {"reason": self.reason or "ContainerCreating"}
            if self.message:
                waiting["message"] = self.message
            state = {"waiting": waiting}
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.state == "running",
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_terminated or {},
        }
        if self.started_at is not None:
            out["containerID"] = self.container_id()
            out["imageID"] = f"docker.io/{self.image}"
        return out


@dataclass(kw_only=True)
class PodSim:
    """The kubelet's view of one pod."""

    uid: str
    namespace: str
    name: str
    restart_policy: str
    init_containers: list[ContainerSim]
    containers: list[ContainerSim]
    scheduled: bool = False
    unschedulable: str | None = None
    """Why the pod cannot be scheduled (PodScheduled False), or None."""
    pod_ip: str | None = None
    host_ip: str | None = None
    start_time: float | None = None
    qos_class: str = "BestEffort"
    readiness_passed: bool = False
    """The first readiness probe passed (set after the readiness delay)."""
    never_ready: bool = False
    condition_times: dict[str, tuple[str, float]] = field(default_factory=dict)

    def initialized(self) -> bool:
        """Every init container completed (or, for a native sidecar, started)."""
        return all(
            (c.sidecar and c.state == "running") or (c.state == "terminated" and c.exit_code == 0)
            for c in self.init_containers
        )

    def phase(self) -> str:
        """The pod phase, by the kubelet's rules."""
        if not self.scheduled or not self.initialized():
            return "Pending"
        ended = [c for c in self.containers if c.state == "terminated" and not c.will_restart()]
        if self.containers and len(ended) == len(self.containers):
            return "Succeeded" if all(c.exit_code == 0 for c in ended) else "Failed"
        if any(c.state == "running" or c.restart_count > 0 or c.state == "terminated" for c in self.containers):
            return "Running"
        return "Pending"

    def _condition(self, kind: str, ok: bool, *, now: float, reason: str | None, message: str | None) -> dict[str, Any]:
        status = "True" if ok else "False"
        previous = self.condition_times.get(kind)
        if previous is None or previous[0] != status:
            self.condition_times[kind] = (status, now)
        out: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(self.condition_times[kind][1]),
        }
        if not ok and reason:
            out["reason"] = reason
        if not ok and message:
            out["message"] = message
        return out

    def render(self, *, now: float, previous: dict[str, Any]) -> dict[str, Any]:
        """The full ``status`` to write; ``previous`` is the stored status (foreign conditions are kept)."""
        phase = self.phase()
        conditions: list[dict[str, Any]] = []
        if self.scheduled:
            terminal = phase in ("Succeeded", "Failed")
            conditions.append(
                self._condition("PodReadyToStartContainers", not terminal, now=now, reason=None, message=None)
            )
            pending_init = [
                c.name
                for c in self.init_containers
                if not ((c.sidecar and c.state == "running") or (c.state == "terminated" and c.exit_code == 0))
            ]
            conditions.append(
                self._condition(
                    "Initialized",
                    not pending_init,
                    now=now,
                    reason="ContainersNotInitialized",
                    message=f"containers with incomplete status: [{' '.join(pending_init)}]",
                )
            )
            unready = [c.name for c in self.containers if not c.ready]
            reason = "PodCompleted" if terminal else "ContainersNotReady"
            message = None if terminal else f"containers with unready status: [{' '.join(unready)}]"
            conditions.append(self._condition("ContainersReady", not unready, now=now, reason=reason, message=message))
            conditions.append(self._condition("Ready", not unready, now=now, reason=reason, message=message))
        if self.scheduled or self.unschedulable:
            conditions.append(
                self._condition(
                    "PodScheduled",
                    self.scheduled,
                    now=now,
                    reason="Unschedulable",
                    message=self.unschedulable,
                )
            )
        foreign = [
            c for c in previous.get("conditions") or [] if isinstance(c, dict) and c.get("type") not in OWNED_CONDITIONS
        ]
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions + foreign,
            "qosClass": self.qos_class,
        }
        if self.host_ip:
            status["hostIP"] = self.host_ip
            status["hostIPs"] = [{"ip": self.host_ip}]
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time is not None:
            status["startTime"] = rfc3339(self.start_time)
        if self.scheduled:
            if self.init_containers:
                status["initContainerStatuses"] = [c.render() for c in self.init_containers]
            status["containerStatuses"] = [c.render() for c in self.containers]
        return status


def qos_class(spec: dict[str, Any]) -> str:
    """Kubernetes' QoS class of a pod spec (Guaranteed, Burstable or BestEffort)."""
    containers = [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or []) if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        if limits or requests:
            any_set = True
        for resource in ("cpu", "memory"):
            if resource not in limits or requests.get(resource) != limits.get(resource):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def build_pod_sim(pod: Mapping[str, Any]) -> PodSim:
    """A fresh model of a pod (nothing started yet)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    policy = str(spec.get("restartPolicy") or "Always")

    def container(raw: dict[str, Any], *, init: bool) -> ContainerSim:
        own = raw.get("restartPolicy")
        sidecar = init and own == "Always"
        return ContainerSim(
            name=str(raw.get("name", "")),
            image=str(raw.get("image", "")),
            restart_policy=str(own) if own and not init else ("Never" if init and not sidecar else policy),
            reason="PodInitializing" if not init else None,
            sidecar=sidecar,
        )

    return PodSim(
        uid=str(metadata.get("uid", "")),
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        restart_policy=policy,
        init_containers=[container(c, init=True) for c in spec.get("initContainers") or [] if isinstance(c, dict)],
        containers=[container(c, init=False) for c in spec.get("containers") or [] if isinstance(c, dict)],
        qos_class=qos_class(spec),
    )
