"""What a container would see: its environment resolved from the Pod, Secrets and ConfigMaps.

Used for the scripted programs (a submitter's ``RAY_DASHBOARD_ADDRESS`` and ``RAY_AUTH_TOKEN``, the
head's ``RAY_AUTH_MODE``) and for the kubelet's start check: like the real kubelet, a container whose
non-optional ``secretKeyRef``/``configMapKeyRef``/``envFrom`` source is missing does not start
(``CreateContainerConfigError``), and a pod whose non-optional Secret/ConfigMap volume is missing stays
in ``ContainerCreating``. It reads only; nothing here writes to the store.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from kubesim.hooks import Store
from kubesim.sims.objects import CONFIGMAPS, SECRETS, meta, name_of, namespace_of, spec_of, status_of

_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _secret_values(secret: Mapping[str, Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, raw in (secret.get("data") or {}).items():
        try:
            values[str(key)] = base64.b64decode(str(raw)).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            values[str(key)] = str(raw)
    # The real API server folds stringData into data on write; tolerate a store that keeps it apart.
    for key, raw in (secret.get("stringData") or {}).items():
        values[str(key)] = str(raw)
    return values


def _configmap_values(configmap: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (configmap.get("data") or {}).items()}


def _field_value(pod: Mapping[str, Any], path: str) -> str:
    match = _FIELD_KEY.match(path)
    if match:
        source = meta(pod).get(match.group(1)) or {}
        return str(source.get(match.group(2), ""))
    simple = {
        "metadata.name": name_of(pod),
        "metadata.namespace": namespace_of(pod),
        "metadata.uid": str(meta(pod).get("uid", "")),
        "spec.nodeName": str(spec_of(pod).get("nodeName", "")),
        "spec.serviceAccountName": str(spec_of(pod).get("serviceAccountName", "")),
        "status.podIP": str(status_of(pod).get("podIP", "")),
        "status.hostIP": str(status_of(pod).get("hostIP", "")),
    }
    return simple.get(path, "")


class _Sources:
    """Secrets and ConfigMaps of one namespace, fetched once per resolution."""

    def __init__(self, store: Store, namespace: str) -> None:
        self._store = store
        self.namespace = namespace
        self._cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def values(self, kind: str, name: str) -> dict[str, str] | None:
        key = (kind, name)
        if key not in self._cache:
            gvr = SECRETS if kind == "secret" else CONFIGMAPS
            obj = self._store.get(gvr, self.namespace, name)
            if obj is None:
                self._cache[key] = None
            else:
                self._cache[key] = _secret_values(obj) if kind == "secret" else _configmap_values(obj)
        return self._cache[key]


def _ref_value(sources: _Sources, ref: Mapping[str, Any], *, kind: str) -> tuple[str | None, str | None]:
    """(value, error); error is None when the reference is optional or satisfied."""
    name = str(ref.get("name", ""))
    key = str(ref.get("key", ""))
    optional = bool(ref.get("optional"))
    values = sources.values(kind, name)
    if values is None:
        return None, None if optional else f'{kind} "{name}" not found'
    if key not in values:
        return (
            None,
            None if optional else f"couldn't find key {key} in {kind.capitalize()} {sources.namespace}/{name}",
        )
    return values[key], None


def resolve_env(
    store: Store, pod: Mapping[str, Any], *, container: Mapping[str, Any]
) -> tuple[dict[str, str], str | None]:
    """Resolve a container's environment.

    Args:
        store: where Secrets and ConfigMaps are read.
        pod: the pod (for fieldRefs and the namespace).
        container: one entry of ``spec.containers`` / ``spec.initContainers``.

    Returns:
        The variables that resolved, and the first blocking error (the kubelet's
        ``CreateContainerConfigError`` message) or None.
    """
    sources = _Sources(store, namespace_of(pod))
    env: dict[str, str] = {}
    error: str | None = None
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        for kind, field in (("secret", "secretRef"), ("configmap", "configMapRef")):
            ref = source.get(field)
            if not isinstance(ref, dict):
                continue
            values = sources.values(kind, str(ref.get("name", "")))
            if values is None:
                if not ref.get("optional") and error is None:
                    error = f'{kind} "{ref.get("name", "")}" not found'
                continue
            env.update({prefix + k: v for k, v in values.items()})
    for var in container.get("env") or []:
        if not isinstance(var, dict) or "name" not in var:
            continue
        name = str(var["name"])
        if "value" in var:
            env[name] = _expand(str(var["value"]), env)
            continue
        value_from = var.get("valueFrom") or {}
        value: str | None = None
        problem: str | None = None
        if isinstance(value_from.get("secretKeyRef"), dict):
            value, problem = _ref_value(sources, value_from["secretKeyRef"], kind="secret")
        elif isinstance(value_from.get("configMapKeyRef"), dict):
            value, problem = _ref_value(sources, value_from["configMapKeyRef"], kind="configmap")
        elif isinstance(value_from.get("fieldRef"), dict):
            value = _field_value(pod, str(value_from["fieldRef"].get("fieldPath", "")))
        if problem and error is None:
            error = problem
        if value is not None:
            env[name] = value
    return env, error


def missing_volume(store: Store, pod: Mapping[str, Any]) -> str | None:
    """The mount error of the first non-optional Secret/ConfigMap volume that does not exist, or None."""
    sources = _Sources(store, namespace_of(pod))
    for volume in spec_of(pod).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        for kind, field, name_key in (("secret", "secret", "secretName"), ("configmap", "configMap", "name")):
            ref = volume.get(field)
            if isinstance(ref, dict) and not ref.get("optional"):
                target = str(ref.get(name_key, ""))
                if sources.values(kind, target) is None:
                    return (
                        f'MountVolume.SetUp failed for volume "{volume.get("name", "")}" : {kind} "{target}" not found'
                    )
    return None


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(text: str, env: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return env.get(name, match.group(0))

    return _VAR.sub(replace, text)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Substitute ``$(VAR)`` (Kubernetes), ``${VAR}`` and ``$VAR`` (shell) from ``env``; unknown names stay."""
    return _expand(text, env)
