"""``python -m realkube --state-dir DIR``: start a control plane, print its admin kubeconfig path on
standard output, and run until SIGTERM or SIGINT, then stop it. Exits non-zero if a program of the plane
ends on its own."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from realkube.errors import RealKubeError
from realkube.plane import ControlPlane

# How often the plane's programs are checked while it runs.
WATCH_INTERVAL = 1.0


class _StoppedWhileStarting(Exception):
    def __init__(self, signal_name: str) -> None:
        super().__init__(f"{signal_name} before the control plane was ready; stopped it")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m realkube", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="folder for certificates, data, logs, kubeconfigs"
    )
    parser.add_argument("--bin-dir", type=Path, help="folder holding etcd, kube-apiserver, kube-controller-manager")
    args = parser.parse_args(argv)

    plane = ControlPlane(args.state_dir, bin_dir=args.bin_dir)
    ready, stopping = threading.Event(), threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if not ready.is_set():
            # Still starting: abandon the start, whose clean-up stops what had started.
            raise _StoppedWhileStarting(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        kubeconfig = plane.start()
        ready.set()
        print(kubeconfig, flush=True)
        while not stopping.wait(WATCH_INTERVAL):
            ended = plane.failed()
            if ended is not None:
                print(f"realkube: {ended}", file=sys.stderr)
                return 1
        return 0
    except (RealKubeError, _StoppedWhileStarting) as exc:
        print(f"realkube: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
