"""``raybus topology``: create or update the streams, consumers and KV buckets, then exit.

What the admin Job of ``deploy/`` runs before the services start; ``raybus up`` runs it as the bus's
administrator when its services each have a user of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import Final

from services.cli import flags
from services.runtime.errors import RaybusError, TopologyError
from services.runtime.settings import RaybusSettings
from services.runtime.topology import provision

TOPOLOGY_TIMEOUT: Final = 120.0
"""Seconds ``raybus topology`` keeps trying: a cluster that is starting elects its JetStream leader first."""


def parser() -> argparse.ArgumentParser:
    """The arguments of ``raybus topology``."""
    p = argparse.ArgumentParser(
        prog="raybus topology", description="Create or update the streams, consumers and KV buckets, then exit."
    )
    flags.add_common(p)
    p.add_argument("--stream-replicas", type=int, help="replicas of each stream and bucket (3 on a cluster)")
    p.add_argument(
        "--timeout",
        type=float,
        default=TOPOLOGY_TIMEOUT,
        help=f"seconds to keep trying while the NATS cluster does not answer (default {TOPOLOGY_TIMEOUT:.0f})",
    )
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``raybus topology``; returns the process exit code."""
    args = parser().parse_args(argv)
    try:
        settings = flags.settings_from(args)
    except RaybusError as exc:
        print(f"raybus topology: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_provision(settings, args.stream_replicas, args.timeout))


async def _provision(settings: RaybusSettings, replicas: int | None, timeout: float) -> int:
    def retrying(failure: str, pause: float) -> None:
        print(f"raybus topology: not ready yet ({failure}); trying again in {pause:.1f}s", file=sys.stderr)

    bus = dataclasses.replace(settings.bus, replicas=replicas) if replicas else settings.bus
    try:
        await provision(settings.nats, bus=bus, partitions=settings.partitions, timeout=timeout, on_retry=retrying)
    except TopologyError as exc:
        print(f"raybus topology: {exc}", file=sys.stderr)
        return 1
    print(f"topology ready: {bus.partitions} partitions, {bus.replicas} replica(s)")
    return 0
