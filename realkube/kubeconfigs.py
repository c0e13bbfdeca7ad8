"""Kubeconfig files for the control plane: self-contained (certificates embedded), readable by the
official client and kubectl alike, written owner-only since they hold credentials."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "realkube"


def _embedded(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _document(server: str, ca_file: Path, user: dict[str, str], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": _embedded(ca_file)}}
        ],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def _write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written then renamed, so a reader polling for the file never sees half of it.
    partial = path.with_name(path.name + ".partial")
    partial.touch(mode=0o600)
    partial.write_text(yaml.safe_dump(document, sort_keys=False))
    partial.replace(path)
    return path


def write_cert_kubeconfig(
    path: Path, *, server: str, ca_file: Path, cert_file: Path, key_file: Path, namespace: str = "default"
) -> Path:
    """A kubeconfig authenticating with a client certificate; returns ``path``."""
    user = {"client-certificate-data": _embedded(cert_file), "client-key-data": _embedded(key_file)}
    return _write(path, _document(server, ca_file, user, namespace))


def write_token_kubeconfig(path: Path, *, server: str, ca_file: Path, token: str, namespace: str = "default") -> Path:
    """A kubeconfig authenticating with a bearer token; returns ``path``."""
    return _write(path, _document(server, ca_file, {"token": token}, namespace))
