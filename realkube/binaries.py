"""Where the control plane's programs are: a folder named by ``RAYBUS_KUBE_BIN_DIR`` that holds them, else
the folder ``tools/kube/build`` of the checkout builds (or finds already built) and prints."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from realkube.errors import RealKubeError

BIN_DIR_ENV = "RAYBUS_KUBE_BIN_DIR"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "kube" / "build"


@dataclass(frozen=True)
class KubeBinaries:
    """The three programs of the control plane."""

    etcd: Path
    apiserver: Path
    controller_manager: Path

    @classmethod
    def in_folder(cls, folder: Path) -> KubeBinaries:
        """The programs of ``folder``, which may not all exist (see :meth:`missing`)."""
        return cls(folder / "etcd", folder / "kube-apiserver", folder / "kube-controller-manager")

    def missing(self) -> list[Path]:
        """The programs that are not executable files."""
        return [p for p in (self.etcd, self.apiserver, self.controller_manager) if not os.access(p, os.X_OK)]


def find_binaries(bin_dir: Path | None = None) -> KubeBinaries:
    """The programs of ``bin_dir`` if given, else of ``$RAYBUS_KUBE_BIN_DIR`` when it holds them all, else
    those ``tools/kube/build`` prints (building them first when its cache is cold: many minutes).

    Raises:
        RealKubeError: a folder lacks a program, or the build script is absent or failed.
    """
    if bin_dir is not None:
        return _complete(KubeBinaries.in_folder(bin_dir))
    named = os.environ.get(BIN_DIR_ENV)
    if named and not KubeBinaries.in_folder(Path(named)).missing():
        return KubeBinaries.in_folder(Path(named))
    if not BUILD_SCRIPT.is_file():
        raise RealKubeError(
            f"no Kubernetes binaries: set {BIN_DIR_ENV} to a folder holding etcd, kube-apiserver and "
            "kube-controller-manager, or run from a checkout that has tools/kube/build"
        )
    # The build's progress goes to our standard error; its stdout is the folder and nothing else.
    result = subprocess.run(
        [str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, check=False
    )
    lines = result.stdout.split()
    if result.returncode != 0 or not lines:
        raise RealKubeError(f"{BUILD_SCRIPT} failed with exit status {result.returncode} (its output is above)")
    return _complete(KubeBinaries.in_folder(Path(lines[-1])))


def _complete(binaries: KubeBinaries) -> KubeBinaries:
    missing = binaries.missing()
    if missing:
        raise RealKubeError(f"missing Kubernetes binaries: {', '.join(str(p) for p in missing)}")
    return binaries
