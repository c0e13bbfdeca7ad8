"""``kubesim`` command line: run the emulated API server in the foreground until Ctrl-C or SIGTERM.

``raybus kubesim`` calls :func:`main`. CRDs from ``--crds DIR`` (default: the project's
``deploy/crds`` when it exists) are registered before the port opens, so the first client already
sees them.

``kubesim attach --kubeconfig FILE`` runs only the node-side simulators (kubelet, Job controller,
EndpointSlices, Gateways, Ray heads) against the API server the kubeconfig names (:mod:`kubesim.attach`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path

from kubesim.apiclient import ApiConnection
from kubesim.collector import tune_collector
from kubesim.server import KubeSim, simulators_for
from kubesim.settings import KubeSimSettings

log = logging.getLogger(__name__)


def default_crds_dir() -> Path | None:
    """``deploy/crds`` of the project (current directory first, then the source tree)."""
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        candidate = base / "deploy" / "crds"
        if candidate.is_dir():
            return candidate
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubesim", description="Kubernetes API server emulator (a simulator).")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="where to write a kubeconfig for clients")
    parser.add_argument(
        "--kubelet",
        choices=("off", "instant", "realistic"),
        default="instant",
        help="kubelet/dashboard simulators: off (API only), instant (tests), realistic (visible delays)",
    )
    parser.add_argument(
        "--ray",
        choices=("sim", "real"),
        default="sim",
        help="Ray head pods: sim (dashboard simulator) or real (ray start --head; needs raybus[realray])",
    )
    parser.add_argument("--crds", type=Path, default=None, help="directory of CRD YAML files to register at start")
    parser.add_argument(
        "--event-window", type=int, default=KubeSimSettings.event_window, help="events kept per resource"
    )
    return parser


def _attach_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubesim attach",
        description="Run kubesim's node-side simulators against an API server (a simulator).",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig of the API server to attach to")
    parser.add_argument(
        "--kubelet",
        choices=("instant", "realistic"),
        default="instant",
        help="simulator timing: instant (tests) or realistic (visible delays)",
    )
    parser.add_argument(
        "--ray",
        choices=("sim", "real"),
        default="sim",
        help="Ray head pods: sim (dashboard simulator) or real (ray start --head; needs raybus[realray])",
    )
    parser.add_argument(
        "--without",
        action="append",
        choices=("endpointslices", "gateways", "jobs"),
        default=[],
        help="leave out a simulator the API server's own controllers already run (repeatable)",
    )
    parser.add_argument(
        "--heads-on-pod-ips",
        action="store_true",
        help="simulated Ray heads listen on their Pod's IP and real ports, so the API server's proxies reach "
        "them (needs the Pod network 10.244.0.0/16 local to this machine)",
    )
    return parser


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _attach(args: argparse.Namespace) -> None:
    # The simulators load only for this command, as in simulators_for.
    from kubesim.attach import Attachment
    from kubesim.sims.options import options_for

    try:
        connection = ApiConnection.from_kubeconfig(str(args.kubeconfig))
    except ValueError as exc:
        raise SystemExit(f"kubesim attach: {exc}") from exc
    options = replace(
        options_for(args.kubelet),
        batch_jobs="jobs" not in args.without,
        endpoint_slices="endpointslices" not in args.without,
        gateway_status="gateways" not in args.without,
    )
    stop = _stop_on_signals()
    try:
        attachment = Attachment(
            connection, kubelet=args.kubelet, ray=args.ray, options=options, heads_on_pod_ips=args.heads_on_pod_ips
        )
    except ValueError as exc:
        await connection.close()
        raise SystemExit(f"kubesim attach: {exc}") from exc
    heads = "Pod IPs" if args.heads_on_pod_ips else "loopback"
    async with attachment:
        print(
            f"kubesim attached to {connection.host} (kubelet {args.kubelet}, ray {args.ray}, heads on {heads})",
            flush=True,
        )
        ended = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(attachment.failed.wait())]
        await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
    if attachment.errors:
        raise SystemExit(f"kubesim attach: a simulator failed: {attachment.errors[0]!r}")
    print("kubesim detached", flush=True)


async def _serve(args: argparse.Namespace) -> None:
    crds = args.crds if args.crds is not None else default_crds_dir()
    if crds is not None and not crds.is_dir():
        raise SystemExit(f"kubesim: --crds {crds} is not a directory")
    controllers, resolvers = simulators_for(args.kubelet, ray=args.ray)
    settings = KubeSimSettings(port=args.port, event_window=args.event_window)
    sim = KubeSim(
        settings=settings, controllers=controllers, proxy_resolvers=resolvers, crd_paths=[crds] if crds else []
    )
    stop = _stop_on_signals()
    async with sim:
        path = sim.write_kubeconfig(args.kubeconfig)
        print(f"kubesim serving {sim.url} (kubelet {args.kubelet}, ray {args.ray}); kubeconfig: {path}", flush=True)
        await stop.wait()
    print("kubesim stopped", flush=True)


def main(argv: list[str]) -> int:
    """Run kubesim (or, with ``attach`` first, its simulators against an API server); returns the exit code."""
    attach = bool(argv) and argv[0] == "attach"
    args = _attach_parser().parse_args(argv[1:]) if attach else _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tune_collector()
    try:
        asyncio.run(_attach(args) if attach else _serve(args))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
