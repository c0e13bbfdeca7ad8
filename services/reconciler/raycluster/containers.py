"""Containers and probes the operator adds to Ray pods (docs/behaviour.md#3.7, #3.9, #3.10).

Role: build the ``autoscaler`` sidecar (with ``autoscalerOptions`` overrides), the workers'
``wait-gcs-ready`` init container and the liveness/readiness probes of the Ray container.

Invariants: pure builders returning new dicts; the shell scripts and probe commands are KubeRay's texts.

Not here: where they go in the pod (``pod_bodies``).
"""

from __future__ import annotations

from typing import Any, Final

from schema.ray import AutoscalerOptions

AUTOSCALER_NAME: Final = "autoscaler"
INIT_CONTAINER_NAME: Final = "wait-gcs-ready"
AUTOSCALER_ARGS: Final = (
    "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
)
_WGET: Final = "wget --tries 1 -T {timeout} -q -O- http://localhost:{port}/{path} | grep success"


def field_env(name: str, field_path: str) -> dict[str, Any]:
    """An env var read from a pod field (``valueFrom.fieldRef``)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def shell_command(*, login_shell: bool) -> list[str]:
    """``/bin/bash -c --`` (``-cl`` with operator switch ENABLE_LOGIN_SHELL)."""
    return ["/bin/bash", "-cl" if login_shell else "-c", "--"]


def fixed_resources(cpu: str, memory: str) -> dict[str, Any]:
    """Requests equal to limits."""
    return {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}}


def autoscaler_container(image: str, options: AutoscalerOptions | None) -> dict[str, Any]:
    """The ``autoscaler`` sidecar of the head pod, with ``autoscalerOptions`` applied.

    Resources, image, pull policy, securityContext, command and args are replaced by the options;
    env, envFrom and volumeMounts are appended.
    """
    container: dict[str, Any] = {
        "name": AUTOSCALER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", "-c", "--"],
        "args": [AUTOSCALER_ARGS],
        "env": [
            field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"),
            field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
            field_env("RAY_HEAD_POD_NAME", "metadata.name"),
            {"name": "KUBERAY_CRD_VER", "value": "v1"},
            {"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": AUTOSCALER_ARGS},
        ],
        "resources": fixed_resources("500m", "512Mi"),
    }
    if options is None:
        return container
    if options.resources is not None:
        container["resources"] = dict(options.resources)
    if options.image:
        container["image"] = options.image
    if options.image_pull_policy:
        container["imagePullPolicy"] = options.image_pull_policy
    if options.security_context is not None:
        container["securityContext"] = dict(options.security_context)
    if options.command:
        container["command"] = list(options.command)
    if options.args:
        container["args"] = list(options.args)
    if options.env:
        container["env"].extend(dict(e) for e in options.env)
    if options.env_from:
        container["envFrom"] = [dict(e) for e in options.env_from]
    if options.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in options.volume_mounts]
    return container


def wait_gcs_ready_script(address: str) -> str:
    """The init container's loop: quiet health checks for 120 s, verbose afterwards, every 5 s."""
    return (
        "\n"
        "SECONDS=0\n"
        "while true; do\n"
        "  if (( SECONDS <= 120 )); then\n"
        f"    if ray health-check --address {address} > /dev/null 2>&1; then\n"
        '      echo "GCS is ready."\n'
        "      break\n"
        "    fi\n"
        '    echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."\n'
        "  else\n"
        f"    if ray health-check --address {address}; then\n"
        '      echo "GCS is ready. Any error messages above can be safely ignored."\n'
        "      break\n"
        "    fi\n"
        '    echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, '
        'refer to the FAQ at https://github.com/ray-project/kuberay/blob/master/docs/guidance/FAQ.md."\n'
        "  fi\n"
        "  sleep 5\n"
        "done\n"
    )


def wait_gcs_ready_container(ray_container: dict[str, Any], *, address: str, login_shell: bool) -> dict[str, Any]:
    """The workers' ``wait-gcs-ready`` init container.

    Args:
        ray_container: the Ray container as the user wrote it (before operator injection): its image,
            pull policy, securityContext, env and volumeMounts are copied.
        address: ``<FQDN>:<headPort>``.
        login_shell: operator switch ENABLE_LOGIN_SHELL.
    """
    container: dict[str, Any] = {
        "name": INIT_CONTAINER_NAME,
        "image": ray_container.get("image", ""),
        "command": shell_command(login_shell=login_shell),
        "args": [wait_gcs_ready_script(address)],
        "resources": fixed_resources("200m", "256Mi"),
    }
    if ray_container.get("imagePullPolicy"):
        container["imagePullPolicy"] = ray_container["imagePullPolicy"]
    if ray_container.get("securityContext") is not None:
        container["securityContext"] = ray_container["securityContext"]
    env = ray_container.get("env")
    container["env"] = [dict(e) for e in env] if isinstance(env, list) else []
    mounts = ray_container.get("volumeMounts")
    if isinstance(mounts, list) and mounts:
        container["volumeMounts"] = [dict(m) for m in mounts]
    return container


def _probe_timing(*, liveness: bool, head: bool) -> dict[str, int]:
    if liveness:
        return {
            "initialDelaySeconds": 30,
            "timeoutSeconds": 5 if head else 2,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 120,
        }
    return {
        "initialDelaySeconds": 10,
        "timeoutSeconds": 5 if head else 2,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 10,
    }


def inject_probes(
    container: dict[str, Any],
    *,
    head: bool,
    http: bool,
    agent_port: int,
    dashboard_port: int,
    serve_port: int | None,
) -> None:
    """Set liveness/readiness probes on the Ray container where the user set none (docs/behaviour.md#3.7).

    Args:
        container: the Ray container (mutated).
        head: head pod.
        http: rayVersion ≥ 2.53.0 (HTTP GET /api/healthz on the agent port), else exec wget checks.
        agent_port: ``dashboard-agent-listen-port``.
        dashboard_port: the head's dashboard port (GCS health check).
        serve_port: RayService workers: the serve port (readiness is then always exec, threshold 1).
    """
    raylet = _WGET.format(timeout=2, port=agent_port, path="api/local_raylet_healthz")
    commands = [raylet]
    if head:
        commands.append(_WGET.format(timeout=10, port=dashboard_port, path="api/gcs_healthz"))

    def action() -> dict[str, Any]:
        if http:
            return {"httpGet": {"path": "/api/healthz", "port": agent_port}}
        return {"exec": {"command": ["bash", "-c", " && ".join(commands)]}}

    if container.get("livenessProbe") is None:
        container["livenessProbe"] = {**action(), **_probe_timing(liveness=True, head=head)}
    if container.get("readinessProbe") is None:
        if serve_port is not None and not head:
            serve = _WGET.format(timeout=10, port=serve_port, path="-/healthz")
            readiness: dict[str, Any] = {
                "exec": {"command": ["bash", "-c", " && ".join([*commands, serve])]},
                **_probe_timing(liveness=False, head=head),
            }
            readiness["failureThreshold"] = 1
            container["readinessProbe"] = readiness
        else:
            container["readinessProbe"] = {**action(), **_probe_timing(liveness=False, head=head)}
