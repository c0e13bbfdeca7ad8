"""Migrating the status database at start, in a child process.

Alembic (with Mako and Pygments) is needed only to migrate, and what a process imports stays resident
for its life: about 9 MB of the status service's memory. So ``raybus status`` runs ``raybus migrate
upgrade`` (:mod:`services.status.migrate`) as a child and waits for it. The database URL reaches the
child in its environment, never on its command line, which other users of the host can read.
"""

from __future__ import annotations

import asyncio
import os
import sys

from services.runtime.errors import PermanentError, RetryableError

RETRY_LATER = 75
"""The exit code of ``raybus migrate upgrade`` when the database failed in a way worth retrying
(``EX_TEMPFAIL``)."""
REASON_PREFIX = "raybus: "
"""How ``raybus migrate`` starts the line that says why it failed."""


async def upgrade_in_child(db_url: str) -> None:
    """Migrate the database at ``db_url`` to head in a child interpreter and wait for it.

    Raises:
        RetryableError: the child found the database unreachable.
        PermanentError: the migration failed otherwise; the child's last line of error output says why.
    """
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.status.migrate",
        "upgrade",
        env={**os.environ, "RAYBUS_DB_URL": db_url},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await child.communicate()
    finally:
        if child.returncode is None:  # cancelled while migrating: the child does not outlive the service
            child.kill()
            await child.wait()
    if child.returncode == 0:
        return
    lines = stderr.decode(errors="replace").strip().splitlines()
    # The child's own reason, not a traceback a thread of it may print after it while exiting.
    said = [line for line in lines if line.startswith(REASON_PREFIX)] or lines
    reason = said[-1] if said else f"exit code {child.returncode}"
    if child.returncode == RETRY_LATER:
        raise RetryableError(f"migrating the status database: {reason}")
    raise PermanentError(f"migrating the status database: {reason}")
