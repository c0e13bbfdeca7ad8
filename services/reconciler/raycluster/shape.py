"""Shape checks of the embedded pod templates and Services before anything reads them.

Role: raybus's CRDs keep pod templates free-form (``x-kubernetes-preserve-unknown-fields``), so the API
server does not check their structure as it does for KubeRay's CRDs. The parts reconcile reads
(containers, env, ports, resources, volumes, command/args, init containers, the user ``headService``)
are checked here, so a malformed manifest becomes an ``InvalidRayClusterSpec`` Warning instead of a crash.

Invariants: returns the first problem as a message naming the field path, or "".

Not here: semantic rules (``validation``).
"""

from __future__ import annotations

from typing import Any

from services.reconciler.raycluster.quantity import is_quantity


def _list_of_dicts(value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return f"{path} must be a list of objects"
    return ""


def _strings(value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return f"{path} must be a list of strings"
    return ""


def _container(container: dict[str, Any], path: str) -> str:
    if not isinstance(container.get("name"), str) or not container["name"]:
        return f"{path}.name must be a non-empty string"
    image = container.get("image")
    if image is not None and not isinstance(image, str):
        return f"{path}.image must be a string"
    for key in ("command", "args"):
        if problem := _strings(container.get(key), f"{path}.{key}"):
            return problem
    for key in ("env", "ports", "volumeMounts", "envFrom"):
        if problem := _list_of_dicts(container.get(key), f"{path}.{key}"):
            return problem
    for i, env in enumerate(container.get("env") or []):
        if not isinstance(env.get("name"), str):
            return f"{path}.env[{i}].name must be a string"
        if env.get("value") is not None and not isinstance(env["value"], str):
            return f"{path}.env[{i}].value must be a string"
    for i, port in enumerate(container.get("ports") or []):
        number = port.get("containerPort")
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 65536:
            return f"{path}.ports[{i}].containerPort must be an integer between 1 and 65535"
        if port.get("name") is not None and not isinstance(port["name"], str):
            return f"{path}.ports[{i}].name must be a string"
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if not isinstance(mount.get("mountPath"), str) or not isinstance(mount.get("name"), str):
            return f"{path}.volumeMounts[{i}] must have a string name and mountPath"
    resources = container.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            return f"{path}.resources must be an object"
        for section in ("limits", "requests"):
            values = resources.get(section)
            if values is None:
                continue
            if not isinstance(values, dict):
                return f"{path}.resources.{section} must be an object"
            for name, raw in values.items():
                if not is_quantity(raw):
                    return f"{path}.resources.{section}[{name}]: quantities must match the regular expression"
    for key in ("securityContext", "livenessProbe", "readinessProbe"):
        if container.get(key) is not None and not isinstance(container[key], dict):
            return f"{path}.{key} must be an object"
    return ""


def template_problem(template: object, path: str) -> str:
    """The first structural problem of a pod template, or ""."""
    if not isinstance(template, dict):
        return f"{path} must be an object"
    meta = template.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            return f"{path}.metadata must be an object"
        for key in ("labels", "annotations"):
            values = meta.get(key)
            if values is not None and (
                not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
            ):
                return f"{path}.metadata.{key} must map strings to strings"
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return f"{path}.spec must be an object"
    for key in ("containers", "initContainers", "volumes"):
        if problem := _list_of_dicts(spec.get(key), f"{path}.spec.{key}"):
            return problem
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume.get("name"), str):
            return f"{path}.spec.volumes[{i}].name must be a string"
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            if problem := _container(container, f"{path}.spec.{key}[{i}]"):
                return problem
    for key in ("serviceAccountName", "restartPolicy"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            return f"{path}.spec.{key} must be a string"
    return ""


def service_problem(service: object, path: str) -> str:
    """The first structural problem of the user's ``headService``, or ""."""
    if service is None:
        return ""
    if not isinstance(service, dict):
        return f"{path} must be an object"
    for key in ("metadata", "spec"):
        if service.get(key) is not None and not isinstance(service[key], dict):
            return f"{path}.{key} must be an object"
    meta = service.get("metadata") or {}
    for key in ("labels", "annotations"):
        values = meta.get(key)
        if values is not None and (
            not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
        ):
            return f"{path}.metadata.{key} must map strings to strings"
    if meta.get("name") is not None and not isinstance(meta["name"], str):
        return f"{path}.metadata.name must be a string"
    spec = service.get("spec") or {}
    if problem := _list_of_dicts(spec.get("ports"), f"{path}.spec.ports"):
        return problem
    if spec.get("type") is not None and not isinstance(spec["type"], str):
        return f"{path}.spec.type must be a string"
    return ""
