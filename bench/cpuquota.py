"""CPU quotas for bench processes: one cgroup v1 ``cpu`` group per process, as a Kubernetes CPU limit.

A group ``/sys/fs/cgroup/cpu/raybus-bench-<name>`` gets ``cpu.cfs_quota_us`` out of every
``cpu.cfs_period_us`` (100 ms, the kubelet's period); the process joins it before it executes, so its
start-up already runs under the quota. The groups are removed once their processes have exited.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

CPU_CONTROLLER = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000
PREFIX = "raybus-bench-"


class CpuQuotas:
    """The bench's cpu groups, each limited to ``share`` of one core."""

    def __init__(self, share: float) -> None:
        if not (CPU_CONTROLLER / "cpu.cfs_quota_us").exists():
            raise RuntimeError(f"no cgroup v1 cpu controller at {CPU_CONTROLLER}")
        self.share = share
        self.groups: list[Path] = []

    def group(self, name: str) -> Callable[[], None]:
        """Create the group for ``name``; the returned function, run in the child before it executes
        (``subprocess.Popen(preexec_fn=…)``), moves the child into it."""
        path = CPU_CONTROLLER / f"{PREFIX}{name}"
        path.mkdir(exist_ok=True)
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(round(self.share * PERIOD_US)))
        self.groups.append(path)
        procs = str(path / "cgroup.procs")

        def join() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return join

    def remove(self) -> None:
        """Remove the groups (each is empty once its process has exited)."""
        for path in self.groups:
            with contextlib.suppress(OSError):
                path.rmdir()
        self.groups.clear()
