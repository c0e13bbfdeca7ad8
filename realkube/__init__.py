"""A real Kubernetes control plane for tests and local runs: etcd, kube-apiserver and
kube-controller-manager of one pinned Kubernetes release (built by ``tools/kube/build``), on loopback.

    with ControlPlane() as plane:
        ...  # plane.kubeconfig is a cluster-admin kubeconfig

``python -m realkube --state-dir DIR`` runs one until SIGTERM and prints its kubeconfig path.
"""

from realkube.binaries import BIN_DIR_ENV, KubeBinaries, find_binaries
from realkube.errors import RealKubeError
from realkube.plane import ControlPlane

__all__ = ["BIN_DIR_ENV", "ControlPlane", "KubeBinaries", "RealKubeError", "find_binaries"]
