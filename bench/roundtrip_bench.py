"""Round-trip benchmark: what one round trip costs when the processes on both ends slept, and when they did not.

One change to an idle cluster makes three acknowledged publishes and two deliveries on the bus
(``latency_bench.py``): each wakes a process that slept in its event loop, whose code then runs cold. A
burst seldom pays that: its processes seldom sleep. Three round trips, each timed
back to back (busy) and after a pause of ``--pause`` seconds (idle), N times:

- a JetStream publish until its acknowledgement (nats-py, a file stream on nats-server, 3 KB: a Pod's size);
- a Pod create on kubesim with the official client (the API call that ends a change);
- a Pod patch on kubesim until a watch stream shows it (how a change begins).

With ``--cpus 0`` the bench and every server it starts run on one vCPU: an idle round trip then wakes no
other vCPU, which tells how much of its cost is that wake and how much the sleeping processes' own.

Run: ``.venv/bin/python bench/roundtrip_bench.py [--times 60] [--pause 0.5] [--cpus 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from kubernetes import client, config
from kubesim_bench import _pod, kubesim_process
from timing import percentile, watch_events

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fixtures.nats import NatsServer  # noqa: E402

PAYLOAD = b"x" * 3000


def summary(label: str, values: list[float]) -> str:
    """One line: the label, then the p50 and p90 of ``values`` (ms)."""
    return f"{label:<10} p50 {statistics.median(values):6.3f} ms   p90 {percentile(values, 0.9):6.3f} ms"


def timed(times: int, pause: float, trip: Callable[[str], None]) -> list[float]:
    """``times`` round trips in ms, each ``pause`` seconds after the one before (``trip`` gets a unique name)."""
    found = []
    for i in range(times):
        time.sleep(pause)
        start = time.perf_counter()
        trip(f"{pause}-{i}")
        found.append((time.perf_counter() - start) * 1e3)
    return found


def publish_round_trips(times: int, pause: float) -> tuple[list[float], list[float]]:
    """``times`` JetStream publishes until acknowledged back to back, then ``times`` each ``pause`` seconds
    after the one before, in ms: what a host makes of a wake (``latency_bench.py --pairs`` reports it)."""
    with tempfile.TemporaryDirectory() as workdir:
        server = NatsServer(Path(workdir))
        server.start()
        loop = asyncio.new_event_loop()
        try:
            nc = loop.run_until_complete(nats.connect(server.url))
            js = nc.jetstream()
            loop.run_until_complete(js.add_stream(name="ROUNDTRIP", subjects=["roundtrip.>"]))

            def publish(name: str) -> None:
                loop.run_until_complete(js.publish("roundtrip.a", PAYLOAD, headers={"Nats-Msg-Id": name}))

            busy, idle = timed(times, 0.0, publish), timed(times, pause, publish)
            loop.run_until_complete(nc.close())
            return busy, idle
        finally:
            loop.close()
            server.stop()  # also when a round trip failed: the server must not outlive the bench


def jetstream(times: int, pause: float) -> None:
    """Print the JetStream publish round trips, back to back and after ``pause`` seconds of quiet."""
    busy, idle = publish_round_trips(times, pause)
    print("JetStream publish → acknowledgement")
    print("  " + summary("busy", busy))
    print("  " + summary("idle", idle))


class LabelWatch:
    """The value of one Pod's ``trip`` label as a raw watch stream last showed it (a daemon thread)."""

    def __init__(self, core: client.CoreV1Api, name: str) -> None:
        self._shown = ""
        self._changed = threading.Condition()
        response: Any = core.list_namespaced_pod(
            "default", field_selector=f"metadata.name={name}", watch=True, _preload_content=False
        )
        threading.Thread(target=self._run, args=(response,), daemon=True).start()

    def _run(self, response: Any) -> None:
        for _, event in watch_events(response):
            labels = event["object"]["metadata"].get("labels") or {}
            with self._changed:
                self._shown = labels.get("trip", "")
                self._changed.notify_all()

    def wait_for(self, value: str) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._shown == value, 30):
                raise RuntimeError(f"the watch never showed trip={value}")


def kube(times: int, pause: float) -> None:
    """Print a Pod create on kubesim, and a Pod patch until a watch shows it, back to back and idle."""
    with tempfile.TemporaryDirectory() as workdir, kubesim_process(Path(workdir), kubelet="instant") as (kubeconfig, _):
        core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))  # type: ignore[no-untyped-call]

        def create(name: str) -> None:
            core.create_namespaced_pod("default", _pod(f"trip-{name}"))  # type: ignore[arg-type]

        create("watched")
        print("kubesim Pod create (the official client)")
        print("  " + summary("busy", timed(times, 0.0, create)))
        print("  " + summary("idle", timed(times, pause, create)))
        watch = LabelWatch(core, "trip-watched")

        def relabel(name: str) -> None:
            core.patch_namespaced_pod("trip-watched", "default", {"metadata": {"labels": {"trip": name}}})
            watch.wait_for(name)

        print("kubesim Pod patch → its MODIFIED on a watch (the official client)")
        print("  " + summary("busy", timed(times, 0.0, relabel)))
        print("  " + summary("idle", timed(times, pause, relabel)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=60)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds of quiet before each idle round trip")
    parser.add_argument("--cpus", help="pin the bench and its servers to these CPUs, comma-separated")
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})  # the servers it starts inherit it
    print(f"machine: {platform.platform()}, {len(os.sched_getaffinity(0))} cpus, python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    jetstream(args.times, args.pause)
    kube(args.times, args.pause)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
