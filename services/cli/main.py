"""``raybus`` entry point: dispatches to the services, the embedded stack and the tools.

Service modules are imported only when their command runs, so ``raybus kubesim`` or ``raybus crds``
never import the Kubernetes client or SQLAlchemy they do not need.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from services.cli import flags
from services.runtime.settings import RaybusSettings

TOPOLOGY_TIMEOUT = 120.0
"""Seconds ``raybus topology`` keeps trying: a cluster that is starting elects its JetStream leader first."""
PASSTHROUGH = {
    "kubesim": ("kubesim.cli", "run the embedded Kubernetes API server emulator (a simulator)"),
    "crds": ("schema.crd", "generate the ray.io CRDs from schema/ (raybus crds --out deploy/crds)"),
    "rbac": ("services.edge.rbac_manifests", "generate the watcher's RBAC in deploy/ from its permissions"),
    "history": ("services.status.history_cli", "print a custom resource's recorded state transitions"),
    "migrate": ("services.status.migrate", "run the status database migrations"),
    "get": ("services.cli.get", "list ray.io custom resources with KubeRay's columns (-n NS | -A, -o wide|json)"),
    "replay": ("services.replay.cli", "replay a key's recorded history through today's reconcile; export it"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raybus", description="The KubeRay operator as an event-sourced controller on NATS JetStream."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    watcher = sub.add_parser(
        "watcher", help="the watch side, the applier and the dashboard prober, or some of them (has K8s credentials)"
    )
    flags.add_common(watcher)
    flags.add_kube(watcher)
    flags.add_operator(watcher)  # the applier derives what a command may contain with the reconcilers' options
    reconciler = sub.add_parser("reconciler", help="a stateless reconcile worker (NATS only)")
    flags.add_common(reconciler)
    flags.add_operator(reconciler)
    flags.add_identity(reconciler)
    flags.add_liveness(reconciler)
    status = sub.add_parser("status", help="persist transitions and the command audit trail; serve the history API")
    flags.add_common(status)
    flags.add_status(status)
    topology = sub.add_parser("topology", help="create or update the streams, consumers and KV buckets, then exit")
    flags.add_common(topology)
    topology.add_argument("--stream-replicas", type=int, help="replicas of each stream and bucket (3 on a cluster)")
    topology.add_argument(
        "--timeout",
        type=float,
        default=TOPOLOGY_TIMEOUT,
        help=f"seconds to keep trying while the NATS cluster does not answer (default {TOPOLOGY_TIMEOUT:.0f})",
    )
    from services.cli.up import add_arguments as add_up_arguments

    add_up_arguments(sub.add_parser("up", help="run the whole stack on loopback (nats-server, kubesim, services)"))
    for name, (_, text) in PASSTHROUGH.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a raybus command; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASSTHROUGH:
        module_name = PASSTHROUGH[args_list[0]][0]
        module = __import__(module_name, fromlist=["main"])
        try:
            return int(module.main(args_list[1:]))
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # a tool's last resort: one line, never a traceback
            print(f"raybus {args_list[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    args = _parser().parse_args(args_list)
    if args.command == "up":
        from services.cli.up import run_up

        return run_up(args)
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from services.runtime.errors import RaybusError
    from services.runtime.lifecycle import run_service

    try:
        settings = flags.settings_from(args)
    except RaybusError as exc:
        print(f"raybus {args.command}: {exc}", file=sys.stderr)
        return 2
    if args.command == "topology":
        return await _topology(settings, args.stream_replicas, args.timeout)
    if args.command == "watcher":
        from services.edge.service import run_watcher

        return await run_service("watcher", settings, lambda stop, health: run_watcher(settings, stop, health))
    if args.command == "reconciler":
        from services.reconciler.worker.service import run_reconciler

        return await run_service("reconciler", settings, lambda stop, health: run_reconciler(settings, stop, health))
    from services.status.service import run_status

    return await run_service("status", settings, lambda stop, health: run_status(settings, stop, health))


async def _topology(settings: RaybusSettings, replicas: int | None, timeout: float) -> int:
    """``raybus topology``: what the admin Job of deploy/ runs before the services start."""
    import dataclasses

    from services.runtime.errors import TopologyError
    from services.runtime.topology import provision

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


if __name__ == "__main__":
    raise SystemExit(main())
