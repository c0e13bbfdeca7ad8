"""Child processes of the kubelet simulator (real Ray heads, real submitter scripts): start, stop, reap.

Every process starts in a session (and process group) of its own. Stopping signals that group and every
descendant found under ``/proc``, because some of Ray's children (job drivers) start sessions of their own
and would survive a signal to the group alone. Nothing here ever signals a process it did not start or
one of their descendants (never ``ray stop``, which kills every Ray on the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

STOP_GRACE_SECONDS = 3.0
"""Time between SIGTERM and SIGKILL when stopping a process tree."""


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: the fields start after the last ')'.
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found: set[int] = set()
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def _signal_tree(pid: int, members: set[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for member in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)


async def stop_tree(process: asyncio.subprocess.Process, *, grace: float = STOP_GRACE_SECONDS) -> int:
    """Stop a process started with ``start_new_session=True`` and all its descendants; return its exit code."""
    members = descendants(process.pid)
    if process.returncode is None:
        _signal_tree(process.pid, members, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            pass
    # Descendants that outlived the parent (or ignored SIGTERM) get SIGKILL, also when it already exited.
    members |= descendants(process.pid)
    _signal_tree(process.pid, {m for m in members if _alive(m)}, signal.SIGKILL)
    return await process.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2 :][:1] != "Z"
