"""Decoding bus messages with and without the byte-level bounds check (``schema.bounds``).

Figures, each the best of ``--repeat`` timed loops: ``check_bounds`` alone, msgspec's decode alone, and
``schema.codec.decode_input`` (check + decode) on a WatchEvent carrying a Pod the watcher projects for a
RayCluster head (``tests/golden`` sample's head pod, ~5 KB); the time to refuse 10 KB nested 2000 deep; and
what the KV-fed facts of the applier and prober pay per Pod write: the same Pod's JSON decoded whole and
slimmed (``podfacts.slim_pod``), against decoding only the slim part (``podfacts.decode_slim_pod``); and
what the projection pays to hold a Pod (``watcher.packing``): that head pod under another name, uid and IP
packed against the first Pod of the kind, its size and the time to pack and unpack it.

Run: ``.venv/bin/python bench/codec_bench.py [--seconds 1] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import msgspec  # noqa: E402
import yaml  # noqa: E402

from schema.bounds import TooComplex, check_bounds  # noqa: E402
from schema.codec import _input_decoder, decode_input, encode  # noqa: E402
from schema.keys import ReconcileKey  # noqa: E402
from schema.messages import WatchEvent  # noqa: E402
from services.edge.watch.packing import Packer  # noqa: E402
from services.edge.watch.podfacts import decode_slim_pod, slim_pod  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "raycluster" / "ray-cluster.complete.yaml"


def head_pod() -> dict[str, object]:
    docs = [d for d in yaml.safe_load_all(GOLDEN.read_text()) if isinstance(d, dict)]
    return next(d for d in _walk(docs) if d.get("kind") == "Pod")


def head_pod_event() -> bytes:
    pod = head_pod()
    key = ReconcileKey(kind="RayCluster", namespace="default", name="bench")
    now = datetime(2025, 3, 1, tzinfo=UTC)
    event = WatchEvent(key=key, event_type="ADDED", entry_kind="Pod", object=pod, resource_version="1", observed_at=now)
    return encode(event)


def another_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as a sibling of it would read: another name, uid and IP."""
    other: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(pod), type=dict[str, Any])
    metadata = other.setdefault("metadata", {})
    metadata.update(name=f"{metadata.get('name', 'pod')}-2", uid="0b6f3c2e-9d41-4c7a-8e55-2f1d9a6b7c80")
    other.setdefault("status", {})["podIP"] = "10.0.7.23"
    return other


def _walk(value: object) -> list[dict[str, object]]:
    if isinstance(value, dict):
        return [value, *[d for v in value.values() for d in _walk(v)]]
    if isinstance(value, list):
        return [d for v in value for d in _walk(v)]
    return []


def per_call(fn: Callable[[], object], seconds: float, repeat: int) -> float:
    """Best seconds per call over ``repeat`` loops of about ``seconds`` each."""
    best = float("inf")
    for _ in range(repeat):
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(100):
                fn()
            calls += 100
        best = min(best, elapsed / calls)
    return best


def refuse(data: bytes) -> None:
    try:
        check_bounds(data)
    except TooComplex:
        return
    raise AssertionError("not refused")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    event = head_pod_event()
    deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
    pod = msgspec.json.encode(head_pod())
    whole: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, Any])
    packer = Packer()
    packer.pack("Pod", pod)  # the first Pod of the kind: the dictionary
    sibling = msgspec.json.encode(another_pod(head_pod()))
    packed = packer.pack("Pod", sibling)
    print(f"{platform.platform()}, python {platform.python_version()}, msgspec {msgspec.__version__}")
    print(f"watch event of a head pod: {len(event)} bytes")
    print(f"a sibling Pod packed against the first: {len(sibling)} -> {len(packed)} bytes")
    for name, fn in [
        ("check_bounds", lambda: check_bounds(event)),
        ("msgspec decode", lambda: _input_decoder.decode(event)),
        ("decode_input (both)", lambda: decode_input(event)),
        ("refuse 10 KB nested 2000 deep", lambda: refuse(deep)),
        (f"Pod ({len(pod)} B): whole + slim_pod", lambda: slim_pod(whole.decode(pod))),
        ("Pod: decode_slim_pod", lambda: decode_slim_pod(pod)),
        ("Pod: Packer.pack", lambda: packer.pack("Pod", sibling)),
        ("Pod: Packer.unpack", lambda: packer.unpack("Pod", packed)),
    ]:
        print(f"  {name:<30} {per_call(fn, args.seconds, args.repeat) * 1e6:8.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
