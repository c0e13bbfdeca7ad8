"""Running a service: signals, health server, graceful shutdown, and loud failure.

A service is an async ``run(stop: asyncio.Event)`` that returns after draining once ``stop`` is set.
SIGTERM/SIGINT set ``stop``; a crash of the service propagates and the process exits non-zero so its
supervisor restarts it (kopf's "no object stops being processed without anyone noticing").

Stopping is bounded: a service that has not drained :data:`SHUTDOWN_GRACE` seconds after the first
signal is cancelled and the process exits non-zero (whatever it had not acknowledged is redelivered),
and a second signal exits at once: an operator who asks twice means now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Final

from services.runtime.collector import tune_collector
from services.runtime.health import HealthServer
from services.runtime.logs import setup_logging
from services.runtime.metrics import setup_metrics
from services.runtime.settings import RaybusSettings
from services.runtime.tracing import setup_tracing

log = logging.getLogger(__name__)

ServiceMain = Callable[[asyncio.Event, HealthServer], Awaitable[None]]

SHUTDOWN_GRACE: Final = 25.0
"""Seconds a service gets to drain after the first signal: inside the 30 s terminationGracePeriodSeconds
of its Deployment, so it exits on its own before the kubelet kills it."""
CANCEL_GRACE: Final = 2.0
"""Seconds a service cut at the end of its grace gets to unwind its cancellation."""
EXIT_GRACE: Final = 3.0
"""Seconds after that for the interpreter's own teardown (the event loop's executor waits for its
threads, which may sit in a blocking call) before the process exits regardless."""


async def run_service(name: str, settings: RaybusSettings, main: ServiceMain, *, grace: float = SHUTDOWN_GRACE) -> int:
    """Run ``main`` until SIGTERM/SIGINT, with health endpoints; return the exit code."""
    setup_logging(settings.telemetry.log_level)
    setup_tracing(f"raybus-{name}")
    setup_metrics(f"raybus-{name}")
    tune_collector()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, name, sig, stop, grace)
    telemetry = settings.telemetry
    health = HealthServer(host=telemetry.health_host, port=telemetry.health_port, metrics_port=telemetry.metrics_port)
    await health.start()
    log.info("%s started; health and metrics on http://%s:%d", name, settings.telemetry.health_host, health.port)
    try:
        if not await _run_bounded(name, main(stop, health), stop, grace):
            health.set_alive(False)
            return 1
    except Exception:
        log.exception("%s crashed", name)
        health.set_alive(False)
        return 1
    finally:
        await health.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("%s stopped", name)
    return 0


def _on_signal(name: str, sig: signal.Signals, stop: asyncio.Event, grace: float) -> None:
    if not stop.is_set():
        log.info("%s stopping on %s (a second signal exits at once)", name, sig.name)
        stop.set()
        # the last resort: whatever hangs (a thread in a blocking call, a teardown), the process goes
        watchdog = threading.Timer(grace + CANCEL_GRACE + EXIT_GRACE, _exit_now, (name,))
        watchdog.daemon = True
        watchdog.start()
        return
    log.warning("%s: second signal (%s), exiting at once", name, sig.name)
    logging.shutdown()
    os._exit(128 + sig)


async def _run_bounded(name: str, main: Awaitable[None], stop: asyncio.Event, grace: float) -> bool:
    """Run ``main``; once ``stop`` is set, give it ``grace`` seconds. Returns False when it had to be cut."""
    task = asyncio.ensure_future(main)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=grace)
        if task.done():
            task.result()  # a crash propagates
            return True
        log.error("%s did not stop within %.0f s of the signal; cancelling it", name, grace)
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE)
        if task.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
        return False
    finally:
        stopping.cancel()


def _exit_now(name: str) -> None:
    log.error("%s did not exit in time after the signal; exiting now", name)
    logging.shutdown()
    os._exit(1)
