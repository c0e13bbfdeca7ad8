"""Publish benchmark: client CPU per acknowledged JetStream publish, nats-py's against raybus's.

Each publish goes through ``services.runtime.bus.publish`` (trace headers and a message id, as every
raybus publish), to a file stream on a local nats-server, 300 bytes, ``--publishes`` of them: one at a
time (an idle change) and ``--concurrency`` at once (a burst), alternating nats-py's
``JetStreamContext.publish`` and ``services.runtime.publishing.AckedJetStream``. It prints the client
process's CPU time per publish (the server's is not counted) and the wall time per publish.

Run: ``.venv/bin/python bench/publish_bench.py [--publishes 5000] [--concurrency 32] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js import JetStreamContext

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from services.runtime.bus import publish  # noqa: E402
from services.runtime.publishing import AckedJetStream  # noqa: E402
from tests.fixtures.nats import NatsServer  # noqa: E402

PAYLOAD = b"x" * 300


async def run(publishes: int, concurrency: int, rounds: int, url: str) -> None:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name="PUBLISH", subjects=["publish.>"])
    contexts: dict[str, JetStreamContext] = {"nats-py": nc.jetstream(), "raybus": AckedJetStream(nc)}
    ids = itertools.count()

    async def one_by_one(js: JetStreamContext, count: int) -> None:
        for _ in range(count):
            n = next(ids)
            await publish(js, f"publish.{n % 64}", PAYLOAD, msg_id=str(n))

    print(f"{'in flight':>9}  {'client':<8} {'CPU µs/publish':>15} {'wall µs/publish':>16}")
    for flight in (1, concurrency):
        for _ in range(rounds):
            for name, js in contexts.items():
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(one_by_one(js, publishes // flight) for _ in range(flight)))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                print(f"{flight:>9}  {name:<8} {cpu / publishes * 1e6:>15.1f} {wall / publishes * 1e6:>16.1f}")
    await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as workdir:
        server = NatsServer(Path(workdir))
        server.start()
        try:
            asyncio.run(run(args.publishes, args.concurrency, args.rounds, server.url))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
