"""A guard for catching library errors without swallowing a cancellation.

nats-py turns a cancellation that arrives during a request into its own ``TimeoutError`` (it uses
``asyncio.wait_for`` inside). A loop that catches ``TimeoutError`` to retry would then swallow the
cancellation and never stop. Every ``except`` that retries calls :func:`raise_if_cancelling` first.
Worse, nats-py's publish path swallows ``CancelledError`` outright (``except CancelledError: pass``), so
every loop also checks :func:`raise_if_cancelling` once per iteration, and shutdown uses
:func:`cancel_and_wait`, which cancels again and never waits without a bound. A fetch can also lose a
cancel that races with an arriving message (``Subscription.next_msg`` waits in an inner task) and
return normally, so consumers check after every fetch too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


def raise_if_cancelling() -> None:
    """Re-raise ``CancelledError`` when the current task has been asked to stop.

    Raises:
        asyncio.CancelledError: the current task is being cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], *, timeout: float) -> list[asyncio.Task[Any]]:
    """Cancel tasks and wait for them, cancelling again while they linger (a library may swallow one
    cancellation); returns the tasks still running after ``timeout`` seconds (logged by the caller).
    """
    pending = {task for task in tasks if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while pending:
        for task in pending:
            task.cancel()
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(remaining, 0.2))
    return list(pending)
