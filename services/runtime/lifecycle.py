"""Running a service: signals, health server, graceful shutdown, and loud failure.

A service is an async ``run(stop: asyncio.Event)`` that returns after draining once ``stop`` is set.
SIGTERM/SIGINT set ``stop``; a crash of the service propagates and the process exits non-zero so its
supervisor restarts it (kopf's "no object stops being processed without anyone noticing").
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from services.runtime.health import HealthServer
from services.runtime.logs import setup_logging
from services.runtime.metrics import setup_metrics
from services.runtime.settings import RaybusSettings
from services.runtime.tracing import setup_tracing

log = logging.getLogger(__name__)

ServiceMain = Callable[[asyncio.Event, HealthServer], Awaitable[None]]


async def run_service(name: str, settings: RaybusSettings, main: ServiceMain) -> int:
    """Run ``main`` until SIGTERM/SIGINT, with health endpoints; return the exit code."""
    setup_logging(settings.telemetry.log_level)
    setup_tracing(f"raybus-{name}")
    setup_metrics(f"raybus-{name}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    telemetry = settings.telemetry
    health = HealthServer(host=telemetry.health_host, port=telemetry.health_port, metrics_port=telemetry.metrics_port)
    await health.start()
    log.info("%s started; health and metrics on http://%s:%d", name, settings.telemetry.health_host, health.port)
    try:
        await main(stop, health)
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
