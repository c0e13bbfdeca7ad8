"""What each raybus process holds before any object: the peak RSS of a fresh interpreter after importing
what the process runs.

Each module is imported in an interpreter of its own (``python -c``), so nothing is shared between rows:
the bare interpreter, nats-py (which imports aiohttp, when it may, for its websocket transport), the services' runtime
(``services.runtime.lifecycle``), the official ``kubernetes`` client alone (its package imports every part
of it, ``kubernetes.config`` included), and each service's entry module, the modules its command goes
``without`` (``services.cli.commands``) kept out as its process keeps them; beside each, the count of
modules in ``sys.modules``.
Five services with different powers are five such interpreters (``docs/architecture.md``, "Memory").

Run: ``.venv/bin/python bench/baseline_bench.py``.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from services.cli.commands import COMMANDS, Service

REPO = Path(__file__).resolve().parent.parent

MODULES = (
    ("bare interpreter", "", ""),
    ("nats-py", "nats", ""),
    ("services' runtime", "services.runtime.lifecycle", ""),
    ("the CLI's entry point", "services.cli.main", ""),
    ("official kubernetes client", "kubernetes", ""),
    ("its config loaders only", "kubernetes.config", ""),
    ("reconciler", "services.reconciler.worker.service", "reconciler"),
    ("status service", "services.status.service", "status"),
    ("watcher, before its role", "services.edge.service", "watcher"),
    ("the watch", "services.edge.service, services.edge.watch.projection, services.edge.watch.election", "watch"),
    ("the applier", "services.edge.service, services.edge.apply.applier", "applier"),
    ("the prober", "services.edge.service, services.edge.probe.prober", "prober"),
)
"""Each row: its name, the modules imported, and the ``raybus`` command whose ``without`` applies. A watcher
process imports its role's modules where the role starts (``services.edge.service``): each role's row
imports them after the service's."""

PROBE = (
    "import sys\n"
    "for name in {without!r}: sys.modules[name] = None\n"
    "{imports}\n"
    "hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM:'))\n"
    "print(hwm.split()[1], len(sys.modules))"
)
"""Prints the peak RSS (kB) and the modules' count. The peak is the kernel's ``VmHWM``, which starts again at
``exec``, where ``ru_maxrss`` would carry over the parent's size at the fork."""


def imported(module: str, command: str = "") -> tuple[float, int]:
    """Peak RSS, in MB, of a fresh interpreter that imported ``module`` (nothing when empty) as ``command``'s
    process does, and how many modules it then holds."""
    spec = COMMANDS[command] if command else None
    without = spec.without if isinstance(spec, Service) else ()
    code = PROBE.format(without=without, imports=f"import {module}" if module else "")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    rss, modules = done.stdout.split()
    return int(rss) / 1024, int(modules)


def main() -> int:
    print(f"{platform.platform()}, python {platform.python_version()}")
    for name, module, command in MODULES:
        rss, modules = imported(module, command)
        print(f"  {name:<28} {rss:6.1f} MB {modules:5d} modules   ({module or 'nothing imported'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
