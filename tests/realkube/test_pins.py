"""tools/kube/go.mod pins one Kubernetes release: every staging module of k8s.io/kubernetes is replaced by its
published version of that release, and etcd's server is the version of the etcd client the release uses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

GO_MOD = Path(__file__).resolve().parents[2] / "tools" / "kube" / "go.mod"


def _module() -> dict[str, Any]:
    result = subprocess.run(["go", "mod", "edit", "-json", str(GO_MOD)], capture_output=True, text=True, check=True)
    module: dict[str, Any] = json.loads(result.stdout)
    return module


def test_every_staging_module_is_the_release_of_k8s_io_kubernetes() -> None:
    module = _module()
    required = {r["Path"]: r["Version"] for r in module["Require"]}
    release = required["k8s.io/kubernetes"]
    staging_version = "v0." + release.removeprefix("v1.")
    replaced = {r["Old"]["Path"]: r["New"] for r in module["Replace"]}
    # Staging modules are versioned v0.<minor>.<patch> (v0.0.0 in k8s.io/kubernetes's own requirements);
    # klog, kube-openapi, utils and the like have versions of their own.
    staging = {path for path, version in required.items() if path.startswith("k8s.io/") and version.count("-") == 0}
    staging -= {"k8s.io/kubernetes", "k8s.io/klog/v2", "k8s.io/system-validators"}
    assert staging <= replaced.keys()
    for path, target in replaced.items():
        assert target == {"Path": path, "Version": staging_version}, path


def test_etcd_is_the_version_of_the_releases_etcd_client() -> None:
    required = {r["Path"]: r["Version"] for r in _module()["Require"]}
    assert required["go.etcd.io/etcd/server/v3"] == required["go.etcd.io/etcd/client/v3"]
