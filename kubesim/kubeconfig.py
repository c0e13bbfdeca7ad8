"""Kubeconfig files pointing at a kubesim server.

Plain HTTP with a dummy bearer token: the official Python client and kubectl both accept it, and
kubesim ignores credentials (it does not emulate authentication or RBAC enforcement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONTEXT = "kubesim"


def kubeconfig(url: str, *, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig document for ``url``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": "kubesim"}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path | str, url: str, *, namespace: str = "default") -> Path:
    """Write a kubeconfig for ``url`` to ``path`` (parents created); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a client polling for the file never reads it half-written.
    partial = target.with_name(target.name + ".partial")
    partial.write_text(yaml.safe_dump(kubeconfig(url, namespace=namespace), sort_keys=False))
    partial.replace(target)
    return target
