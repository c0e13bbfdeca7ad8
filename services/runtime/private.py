"""Files only their owner may read: exports of a key's history and the state of ``raybus up``
(database, kubeconfig with its token, logs) hold what other users of the machine must not see."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Final

OWNER_ONLY: Final = 0o600
OWNER_ONLY_DIR: Final = 0o700
OWNER_ONLY_UMASK: Final = 0o077
"""For child processes whose files land in a private directory (a database, a kubeconfig)."""


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and make it the owner's only (also when it existed)."""
    path.mkdir(mode=OWNER_ONLY_DIR, parents=True, exist_ok=True)
    path.chmod(OWNER_ONLY_DIR)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``path`` atomically, readable by its owner only from the first byte."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, OWNER_ONLY)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), OWNER_ONLY)  # the file may have existed with a wider mode
        out.write(data)
    tmp.replace(path)


def open_private_log(path: Path) -> IO[bytes]:
    """Open ``path`` for appending, readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, OWNER_ONLY)
    os.fchmod(fd, OWNER_ONLY)
    return os.fdopen(fd, "ab")
