"""The real API server for a bench: etcd, kube-apiserver and kube-controller-manager of the pinned release
(``realkube``), raybus's CRDs installed, and kubesim's node-side simulators attached over HTTP.

The simulators attach as ``raybus up --kube real`` attaches them (``services.cli.realcluster``), without
the controllers kube-controller-manager runs itself: what they add is the kubelet (binding, running and
readying Pods, finishing deleted ones), the simulated Ray dashboards and Gateway status. Unlike ``raybus
up``, every raybus process of a bench uses the admin kubeconfig.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from realkube import ControlPlane  # noqa: E402
from schema.crd import write_crds  # noqa: E402
from services.cli.realcluster import RealCluster, attach_argv  # noqa: E402
from tests.realkube.crds import ensure_crds  # noqa: E402

NODE = "kubesim-node"
"""The Node the attached kubelet registers."""


@contextlib.contextmanager
def real_plane(workdir: Path) -> Iterator[ControlPlane]:
    """A running control plane (state and logs under ``workdir/kube``) serving raybus's ray.io CRDs."""
    with ControlPlane(workdir / "kube") as plane:
        crds = workdir / "crds"
        bodies: list[dict[str, Any]] = []
        for path in sorted(write_crds(crds)):
            documents = yaml.safe_load_all(path.read_text())
            bodies += [d for d in documents if d and d.get("kind") == "CustomResourceDefinition"]
        api = config.new_client_from_config(str(plane.kubeconfig))  # type: ignore[no-untyped-call]
        try:
            ensure_crds(api, bodies)
        finally:
            api.close()
        yield plane


def simulators_argv(plane: ControlPlane) -> list[str]:
    """``kubesim attach`` against the plane as cluster admin, without the controllers it already has."""
    return attach_argv(RealCluster(plane.state_dir), heads_on_pod_ips=False)


def node_registered(kubeconfig: Path) -> bool:
    """Whether the attached kubelet registered its Node."""
    api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        return bool(client.CoreV1Api(api).list_node(field_selector=f"metadata.name={NODE}").items)
    finally:
        api.close()


@contextlib.contextmanager
def bare_plane(workdir: Path) -> Iterator[tuple[Path, int]]:
    """A control plane without simulators (Pods stay Pending, as kubesim's ``--kubelet off``); yields its
    admin kubeconfig and kube-apiserver's pid."""
    with ControlPlane(workdir / "kube") as plane:
        yield plane.kubeconfig, plane.pids["kube-apiserver"]
