"""rayStartParams completion and the ``ray start`` command line (docs/behaviour.md#3.2, #3.5).

Role: turn a group's ``rayStartParams`` (plus its ``resources``/``labels`` and the Ray container's
resources) into the exact ``ray start ...`` string KubeRay generates, byte for byte: keys sorted, flags
written as ``" --k=v "`` (so they are separated by two spaces), "true" as a bare flag, "false" dropped
except for ``log-color``/``include-dashboard``/``include-log-monitor``.

Invariants: inputs are never mutated (every function returns a new dict); the steps run in the order of
docs/behaviour.md#3.2, so a later step sees what an earlier one set.

Not here: the container command wrapping (``pod_bodies``), validation of conflicting params (``validation``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from schema.ray import conventions
from services.reconciler.raycluster.quantity import try_parse_quantity

DEFAULT_METRICS_PORT: Final = conventions.DEFAULT_METRICS_PORT
DEFAULT_DASHBOARD_AGENT_PORT: Final = conventions.DEFAULT_DASHBOARD_AGENT_PORT
DEFAULT_DASHBOARD_PORT: Final = conventions.DEFAULT_DASHBOARD_PORT

_MIG: Final = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb$")
_ALWAYS_VALUED: Final = frozenset({"log-color", "include-dashboard", "include-log-monitor"})
_ACCELERATORS: Final = {"google.com/tpu": "TPU", "aws.amazon.com/neuroncore": "neuron_cores"}


def is_gpu(resource_name: str) -> bool:
    """A resource name counts as a GPU (``*gpu`` or ``nvidia.com/mig-<N>g.<M>gb``)."""
    return resource_name.endswith("gpu") or _MIG.match(resource_name) is not None


def go_float(value: float) -> str:
    """A float64 as Go's encoding/json prints it (integral values without a decimal point)."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _resources_json(resources: dict[str, float]) -> str:
    body = ",".join(f"{json.dumps(k)}:{go_float(resources[k])}" for k in sorted(resources))
    return "'{" + body + "}'"


def parse_resources_param(raw: str) -> dict[str, float] | None:
    """The JSON object of a ``resources`` rayStartParam (surrounding quotes stripped), or None."""
    text = raw.strip().strip("'").strip('"')
    try:
        loaded: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(loaded, dict):
        return None
    out: dict[str, float] = {}
    for key, value in loaded.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        out[str(key)] = float(value)
    return out


def complete_start_params(
    params: dict[str, str] | None,
    *,
    head: bool,
    group_resources: dict[str, str] | None,
    group_labels: dict[str, str] | None,
    head_address: str,
    autoscaling: bool,
    redis_username: bool = False,
    redis_password: bool = False,
) -> dict[str, str]:
    """docs/behaviour.md#3.2 steps 1-7 (everything not derived from the container's resources).

    Args:
        params: the group's rayStartParams (None means ``{}``).
        head: head group (else worker group).
        group_resources: the group's ``resources`` (Ray logical resources, Quantities).
        group_labels: the group's ``labels`` (Ray node labels).
        head_address: ``<FQDN of head svc>:<headPort>`` (workers' ``address``).
        autoscaling: in-tree autoscaling on (the head gets ``no-monitor``).
        redis_username / redis_password: GCS FT credentials are configured (head only).

    Returns:
        A new map.
    """
    out = dict(params or {})
    if group_resources:
        custom: dict[str, float] = {}
        for name, raw in group_resources.items():
            quantity = try_parse_quantity(raw)
            if quantity is None:
                continue
            if name.lower() == "cpu":
                out["num-cpus"] = str(quantity.ceil())
            elif name.lower() == "memory":
                out["memory"] = str(quantity.ceil())
            elif is_gpu(name):
                out["num-gpus"] = str(quantity.ceil())
            else:
                custom[name] = quantity.as_float()
        if custom:
            out["resources"] = _resources_json(custom)
    if group_labels:
        out["labels"] = ",".join(f"{k}={group_labels[k]}" for k in sorted(group_labels))
    if not head and "address" not in out:
        out["address"] = head_address
    if head and "dashboard-host" not in out:
        out["dashboard-host"] = "0.0.0.0"
    if head and autoscaling:
        out["no-monitor"] = "true"
    out.setdefault("metrics-export-port", str(DEFAULT_METRICS_PORT))
    out["block"] = "true"
    out.setdefault("dashboard-agent-listen-port", str(DEFAULT_DASHBOARD_AGENT_PORT))
    if head and redis_username:
        out["redis-username"] = "$REDIS_USERNAME"
    if head and redis_password:
        out["redis-password"] = "$REDIS_PASSWORD"
    return out


def _limits_and_requests(resources: object) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(resources, dict):
        return {}, {}
    limits = resources.get("limits")
    requests = resources.get("requests")
    return (limits if isinstance(limits, dict) else {}, requests if isinstance(requests, dict) else {})


def add_container_resources(params: dict[str, str], container_resources: object) -> dict[str, str]:
    """docs/behaviour.md#3.2 step 8: fill num-cpus / memory / num-gpus / accelerators from the Ray container.

    Returns:
        A new map.
    """
    out = dict(params)
    limits, requests = _limits_and_requests(container_resources)
    if "num-cpus" not in out:
        cpu = try_parse_quantity(limits.get("cpu")) if "cpu" in limits else None
        if cpu is None or cpu.is_zero():
            cpu = try_parse_quantity(requests.get("cpu")) if "cpu" in requests else None
        if cpu is not None and not cpu.is_zero():
            out["num-cpus"] = str(cpu.ceil())
    if "memory" not in out:
        memory = try_parse_quantity(limits.get("memory")) if "memory" in limits else None
        if memory is not None and not memory.is_zero():
            out["memory"] = str(memory.ceil())
    if "num-gpus" not in out:
        for name in sorted(limits):
            if not is_gpu(name):
                continue
            gpu = try_parse_quantity(limits[name])
            if gpu is not None and not gpu.is_zero():
                out["num-gpus"] = str(gpu.ceil())
                break
    existing = out.get("resources")
    resources_map = parse_resources_param(existing) if existing is not None else {}
    if resources_map is not None and not any(v in resources_map for v in _ACCELERATORS.values()):
        for name in sorted(limits):
            ray_name = _ACCELERATORS.get(name)
            if ray_name is None:
                continue
            amount = try_parse_quantity(limits[name])
            if amount is None or amount.is_zero():
                continue
            resources_map[ray_name] = amount.as_float()
            out["resources"] = _resources_json(resources_map)
            break
    return out


def render_flags(params: dict[str, str]) -> str:
    """The flags part: sorted keys, each written as ``" --k=v "`` / ``" --k "``."""
    parts: list[str] = []
    for key in sorted(params):
        value = params[key]
        lowered = value.lower()
        if key in _ALWAYS_VALUED:
            parts.append(f" --{key}={value} ")
        elif lowered == "true":
            parts.append(f" --{key} ")
        elif lowered == "false":
            continue
        else:
            parts.append(f" --{key}={value} ")
    return "".join(parts)


def ray_start_command(params: dict[str, str], *, head: bool) -> str:
    """``ray start --head <flags>`` or ``ray start <flags>`` (KUBERAY_GEN_RAY_START_CMD)."""
    if head:
        return f"ray start --head {render_flags(params)}"
    return f"ray start {render_flags(params)}"
