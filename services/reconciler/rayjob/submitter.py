"""How a RayJob's Ray job gets submitted (docs/behaviour.md#5.3): the K8sJobMode submitter Job, the SidecarMode
container, the submit script they run, and the HTTPMode request body.

Role: builders only. Each returns plain Kubernetes/dashboard JSON or raises :class:`SubmitterError`
with KubeRay's message when KubeRay's builder would return an error.

Invariants: pure and deterministic; the script is assembled token by token exactly as KubeRay joins it
(``strings.Join(cmd, " ")``), JSON values are Go-quoted (``strconv.Quote``) and Go-marshalled (sorted
keys, compact, HTML-escaped).

Not here: when to submit (``rayjob.reconcile`` / ``rayjob.running``).

Known approximation: KubeRay's ``BasePythonHealthCommand`` text (ray-operator/controllers/ray/common/job.go) is not
copied; raybus's :data:`PYTHON_HEALTH_COMMAND` has the same behaviour (GET with a 10 s timeout, success when the body
contains ``success``) but not necessarily the same characters.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

from schema.config import OperatorConfig
from schema.objects import container_port, head_container
from schema.probes import token_auth_secret
from schema.ray import conventions
from schema.ray.conventions import DEFAULT_DASHBOARD_PORT, PORT_DASHBOARD
from schema.ray.rayjob import SIDECAR_MODE, RayJobSpec
from services.reconciler.rayjob.names import SUBMITTER_CONTAINER

GCS_HEALTH_PATH: Final = "api/gcs_healthz"
GCS_HEALTH_TIMEOUT_SECONDS: Final = 10
PYTHON_HEALTH_COMMAND: Final = (
    'python3 -c "import sys, urllib.request; '
    "sys.exit(0 if b'success' in urllib.request.urlopen('%s', timeout=%d).read() else 1)\""
)
DEFAULT_SUBMITTER_BACKOFF_LIMIT: Final = 2
_SEMVER: Final = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


class SubmitterError(ValueError):
    """A submitter could not be built (KubeRay returns an error and retries)."""


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote``: a double-quoted literal with Go escapes."""
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def go_json(value: object) -> str:
    """Go's ``json.Marshal`` of maps: sorted keys, compact, ``<``/``>``/``&`` escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def runtime_env(spec: RayJobSpec) -> dict[str, Any] | None:
    """``runtimeEnvYAML`` parsed (None when empty). Raises SubmitterError on invalid YAML."""
    if not spec.runtime_env_yaml:
        return None
    try:
        loaded = yaml.safe_load(spec.runtime_env_yaml)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        raise SubmitterError(f"failed to unmarshal RuntimeEnvYAML: {spec.runtime_env_yaml}: {exc}") from exc
    if loaded is None:
        return None
    if not isinstance(loaded, dict):
        raise SubmitterError(f"failed to unmarshal RuntimeEnvYAML: {spec.runtime_env_yaml}: not a mapping")
    return loaded


def _version_at_least_2_6(ray_version: str) -> bool:
    """Masterminds semver ``>= 2.6.0`` (a pre-release never satisfies it). Raises SubmitterError."""
    match = _SEMVER.match(ray_version.strip())
    if match is None:
        raise SubmitterError(f"failed to parse Ray version: {ray_version}: Invalid Semantic Version")
    major, minor, patch = (int(part) if part else 0 for part in match.group(1, 2, 3))
    if match.group(4):
        return False
    return (major, minor, patch) >= (2, 6, 0)


def metadata_json(spec: RayJobSpec) -> str:
    """``--metadata-json`` value; needs rayVersion ≥ 2.6.0 when rayVersion is set. Raises SubmitterError."""
    ray_version = spec.ray_cluster_spec.ray_version if spec.ray_cluster_spec is not None else ""
    if ray_version and not _version_at_least_2_6(ray_version):
        raise SubmitterError("the Ray version must be at least 2.6.0 to use the metadata field")
    return go_json(spec.metadata or {})


def container_command(config: OperatorConfig) -> list[str]:
    """KubeRay's ``GetContainerCommand(["e"])``: ``/bin/bash -ce --`` (``-lce`` with a login shell)."""
    options = "lce" if config.switches.enable_login_shell else "ce"
    return ["/bin/bash", f"-{options}", "--"]


def build_submit_command(
    spec: RayJobSpec, *, job_id: str, dashboard_url: str, mode: str, head_dashboard_port: int, restartable: bool
) -> list[str]:
    """KubeRay's ``BuildJobSubmitCommand`` token list (joined with spaces into the container args).

    Args:
        spec: the RayJob spec (entrypoint, runtime env, metadata, entrypoint resources).
        job_id: the submission id (``status.jobId``).
        dashboard_url: ``status.dashboardURL`` (K8sJobMode).
        mode: ``K8sJobMode`` or ``SidecarMode``.
        head_dashboard_port: the head container's dashboard port (SidecarMode).
        restartable: SidecarMode with gate SidecarSubmitterRestart (adds the status check and log follow).

    Raises:
        SubmitterError: invalid runtime env YAML or a Ray version too old for metadata.
    """
    if mode == SIDECAR_MODE:
        address = f"http://127.0.0.1:{head_dashboard_port}"
        health_url = f"http://localhost:{head_dashboard_port}/{GCS_HEALTH_PATH}"
    else:
        address = dashboard_url if dashboard_url.startswith("http://") else "http://" + dashboard_url
        health_url = f"{address}/{GCS_HEALTH_PATH}"
    health = PYTHON_HEALTH_COMMAND % (health_url, GCS_HEALTH_TIMEOUT_SECONDS)
    cmd = ["until", health, ">/dev/null", "2>&1", ";"]
    cmd += ["do", "echo", go_quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."), ";"]
    cmd += ["sleep", "2", ";", "done", ";"]
    needs_status_check = mode != SIDECAR_MODE or restartable
    if needs_status_check:
        cmd += ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then"]
    cmd += ["ray", "job", "submit", "--address", address]
    if needs_status_check:
        cmd.append("--no-wait")
    env = runtime_env(spec)
    if env is not None:
        cmd += ["--runtime-env-json", go_quote(go_json(env))]
    if spec.metadata:
        cmd += ["--metadata-json", go_quote(metadata_json(spec))]
    if job_id:
        cmd += ["--submission-id", job_id]
    if spec.entrypoint_num_cpus > 0:
        cmd += ["--entrypoint-num-cpus", f"{spec.entrypoint_num_cpus:f}"]
    if spec.entrypoint_num_gpus > 0:
        cmd += ["--entrypoint-num-gpus", f"{spec.entrypoint_num_gpus:f}"]
    if spec.entrypoint_resources:
        cmd += ["--entrypoint-resources", go_quote(spec.entrypoint_resources)]
    cmd += ["--", spec.entrypoint.strip(), ";"]
    if needs_status_check:
        cmd += ["fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return cmd


def default_submitter_container(cluster_spec: Mapping[str, Any]) -> dict[str, Any]:
    """KubeRay's default submitter container: the head's Ray image, 500m/200Mi requests, 1/1Gi limits."""
    return {
        "name": SUBMITTER_CONTAINER,
        "image": head_container(cluster_spec).get("image", ""),
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }


def _append_env_if_absent(container: dict[str, Any], *, name: str, entry: dict[str, Any]) -> None:
    env = container.setdefault("env", [])
    if not any(isinstance(e, Mapping) and e.get("name") == name for e in env):
        env.append(entry)


def configure_submitter_container(
    container: dict[str, Any],
    *,
    spec: RayJobSpec,
    job_id: str,
    dashboard_url: str,
    mode: str,
    cluster_name: str,
    cluster_spec: Mapping[str, Any],
    config: OperatorConfig,
) -> dict[str, Any]:
    """KubeRay's ``configureSubmitterContainer``: command/args (unless the user set a command in
    K8sJobMode), then ``PYTHONUNBUFFERED``, ``RAY_DASHBOARD_ADDRESS``, ``RAY_JOB_SUBMISSION_ID`` and the
    token-auth env. Returns a new container. Raises SubmitterError."""
    out = copy.deepcopy(container)
    restartable = mode == SIDECAR_MODE and config.gates.sidecar_submitter_restart
    command = build_submit_command(
        spec,
        job_id=job_id,
        dashboard_url=dashboard_url,
        mode=mode,
        head_dashboard_port=container_port(head_container(cluster_spec), PORT_DASHBOARD) or DEFAULT_DASHBOARD_PORT,
        restartable=restartable,
    )
    if not out.get("command") or mode == SIDECAR_MODE:
        out["command"] = container_command(config)
        out["args"] = [" ".join(command)]
    env = out.get("env")
    out["env"] = list(env) if isinstance(env, list) else []
    out["env"].append({"name": "PYTHONUNBUFFERED", "value": "1"})
    out["env"].append({"name": "RAY_DASHBOARD_ADDRESS", "value": dashboard_url})
    out["env"].append({"name": "RAY_JOB_SUBMISSION_ID", "value": job_id})
    secret = token_auth_secret(cluster_name, cluster_spec)
    if secret:
        _append_env_if_absent(out, name="RAY_AUTH_MODE", entry={"name": "RAY_AUTH_MODE", "value": "token"})
        _append_env_if_absent(
            out,
            name="RAY_AUTH_TOKEN",
            entry={
                "name": "RAY_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": conventions.AUTH_TOKEN_SECRET_KEY}},
            },
        )
    if restartable:
        out["restartPolicy"] = "OnFailure"
    return out


def sidecar_container(
    spec: RayJobSpec,
    *,
    job_id: str,
    dashboard_url: str,
    cluster_name: str,
    cluster_spec: Mapping[str, Any],
    config: OperatorConfig,
) -> dict[str, Any]:
    """The ``ray-job-submitter`` container appended to the head pod in SidecarMode. Raises SubmitterError."""
    return configure_submitter_container(
        default_submitter_container(cluster_spec),
        spec=spec,
        job_id=job_id,
        dashboard_url=dashboard_url,
        mode=SIDECAR_MODE,
        cluster_name=cluster_name,
        cluster_spec=cluster_spec,
        config=config,
    )


def build_submitter_job(
    rayjob: Mapping[str, Any],
    spec: RayJobSpec,
    *,
    raw_spec: Mapping[str, Any],
    job_id: str,
    dashboard_url: str,
    cluster_name: str,
    cluster_spec: Mapping[str, Any],
    owner_reference: dict[str, Any],
    config: OperatorConfig,
) -> dict[str, Any]:
    """The K8sJobMode submitter: batch/v1 Job ``<rj>`` (docs/behaviour.md#5.3). Raises SubmitterError."""
    metadata = rayjob.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = str(metadata.get("name", ""))
    labels = {
        conventions.LABEL_ORIGIN_NAME: name,
        conventions.LABEL_ORIGIN_CRD: "RayJob",
        conventions.LABEL_CREATED_BY: conventions.CREATED_BY,
    }
    user_template = raw_spec.get("submitterPodTemplate")
    if isinstance(user_template, Mapping):
        template: dict[str, Any] = copy.deepcopy(dict(user_template))
    else:
        template = {"spec": {"containers": [default_submitter_container(cluster_spec)], "restartPolicy": "Never"}}
    pod_spec = template.get("spec")
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not isinstance(pod_spec, dict) or not isinstance(containers, list) or not containers:
        raise SubmitterError("the submitter pod template has no containers")
    if not isinstance(containers[0], Mapping):
        raise SubmitterError("the submitter pod template's first container is not an object")
    containers[0] = configure_submitter_container(
        dict(containers[0]),
        spec=spec,
        job_id=job_id,
        dashboard_url=dashboard_url,
        mode="K8sJobMode",
        cluster_name=cluster_name,
        cluster_spec=cluster_spec,
        config=config,
    )
    template_metadata = template.get("metadata")
    template_metadata = dict(template_metadata) if isinstance(template_metadata, Mapping) else {}
    template_labels = template_metadata.get("labels")
    template_labels = dict(template_labels) if isinstance(template_labels, Mapping) else {}
    template_labels.update(labels)
    template_metadata["labels"] = template_labels
    template["metadata"] = template_metadata
    backoff = DEFAULT_SUBMITTER_BACKOFF_LIMIT
    if spec.submitter_config is not None and spec.submitter_config.backoff_limit is not None:
        backoff = spec.submitter_config.backoff_limit
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": str(metadata.get("namespace", "")),
            "labels": labels,
            "ownerReferences": [owner_reference],
        },
        "spec": {"backoffLimit": backoff, "template": template},
    }


def build_submit_request(spec: RayJobSpec, *, job_id: str) -> dict[str, Any]:
    """The HTTPMode ``POST /api/jobs/`` body (Go ``omitempty`` fields dropped). Raises SubmitterError."""
    request: dict[str, Any] = {"entrypoint": spec.entrypoint}
    if job_id:
        request["submission_id"] = job_id
    if spec.metadata:
        request["metadata"] = dict(spec.metadata)
    env = runtime_env(spec)
    if env:
        request["runtime_env"] = env
    if spec.entrypoint_num_cpus:
        request["entrypoint_num_cpus"] = spec.entrypoint_num_cpus
    if spec.entrypoint_num_gpus:
        request["entrypoint_num_gpus"] = spec.entrypoint_num_gpus
    if spec.entrypoint_resources:
        try:
            resources = json.loads(spec.entrypoint_resources)
        except (ValueError, RecursionError) as exc:
            raise SubmitterError(f"invalid entrypointResources: {exc}") from exc
        if not isinstance(resources, dict):
            raise SubmitterError("invalid entrypointResources: not a JSON object")
        if resources:
            request["entrypoint_resources"] = resources
    return request
