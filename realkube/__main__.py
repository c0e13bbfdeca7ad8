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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m realkube", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="folder for certificates, data, logs, kubeconfigs"
    )
    parser.add_argument("--bin-dir", type=Path, help="folder holding etcd, kube-apiserver, kube-controller-manager")
    args = parser.parse_args(argv)

    plane = ControlPlane(args.state_dir, bin_dir=args.bin_dir)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        # Only flags are set here: raising from a handler could interrupt the start between launching a
        # program and recording it, and leave that program running. A start under way gives up at its
        # next check and stops what it had started.
        plane.abandon(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        kubeconfig = plane.start()
        print(kubeconfig, flush=True)
        while not stopping.wait(WATCH_INTERVAL):
            ended = plane.failed()
            if ended is not None:
                print(f"realkube: {ended}", file=sys.stderr)
                return 1
        return 0
    except RealKubeError as exc:
        print(f"realkube: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
