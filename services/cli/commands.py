"""The ``raybus`` subcommands: the one table of their names, what each is for and what runs it.

``main`` builds the parser and dispatches from :data:`COMMANDS`; ``raybus up`` and ``deploy/`` start the
processes by these names. Each edge role has a command of its own (``ROLE_COMMANDS``: ``raybus watch``,
``raybus applier``, ``raybus prober``), the process its Deployment runs with that role's ServiceAccount;
``raybus watcher --roles ...`` runs any set of them in one process.

What a command runs is named by module, imported only when the command runs, so ``raybus kubesim`` or
``raybus crds`` never import the Kubernetes client or SQLAlchemy they do not need.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from services.cli import flags
from services.runtime.settings import ROLE_COMMANDS, WatcherRole

AddFlags = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True, kw_only=True)
class Service:
    """A long-running service: its flags, and ``module:function`` that runs it (settings, stop, health).

    Attributes:
        help: one line for ``raybus --help``.
        flags: what adds its options.
        runs: ``module:function`` of its main coroutine.
        roles: an edge process's roles, fixed by its command (empty: ``--roles`` or the environment say).
        without: modules the process never loads: a library's optional import of one fails instead.
    """

    help: str
    flags: tuple[AddFlags, ...]
    runs: str
    roles: tuple[WatcherRole, ...] = ()
    without: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A command that parses its own arguments: ``module``'s ``main(argv) -> int``."""

    help: str
    module: str


_EDGE: Final = "services.edge.service:run_watcher"
_EDGE_FLAGS: Final[tuple[AddFlags, ...]] = (flags.add_common, flags.add_kube, flags.add_operator)
_NO_AIOHTTP: Final = ("aiohttp",)
"""nats-py imports aiohttp, when installed, for a websocket transport raybus never uses; every service sends
its HTTP with :mod:`kubeaccess.asynchttp` and serves with :mod:`services.runtime.webserver`, so each goes
without (about 12 MB resident)."""

COMMANDS: Final[Mapping[str, Service | Tool]] = {
    ROLE_COMMANDS["watch"]: Service(
        help="the watch role: informers → projection, one active replica elected by a Lease (lists and watches)",
        flags=_EDGE_FLAGS,
        runs=_EDGE,
        roles=("watch",),
        without=_NO_AIOHTTP,
    ),
    ROLE_COMMANDS["apply"]: Service(
        help="the apply role: runs the command batches each key may run (writes Kubernetes objects)",
        flags=_EDGE_FLAGS,
        runs=_EDGE,
        roles=("apply",),
        without=_NO_AIOHTTP,
    ),
    ROLE_COMMANDS["probe"]: Service(
        help="the probe role: polls the Ray dashboards of live RayJobs and RayServices (reads through the proxy)",
        flags=_EDGE_FLAGS,
        runs=_EDGE,
        roles=("probe",),
        without=_NO_AIOHTTP,
    ),
    "watcher": Service(
        help="any of the edge roles in one process: --roles watch,apply,probe (all by default)",
        flags=(*_EDGE_FLAGS, flags.add_roles),
        runs=_EDGE,
        without=_NO_AIOHTTP,
    ),
    "reconciler": Service(
        help="a stateless reconcile worker (NATS only)",
        flags=(flags.add_common, flags.add_operator, flags.add_identity, flags.add_liveness),
        runs="services.reconciler.worker.service:run_reconciler",
        without=_NO_AIOHTTP,
    ),
    "status": Service(
        help="persist transitions and the command audit trail; serve the history API",
        flags=(flags.add_common, flags.add_status),
        runs="services.status.service:run_status",
        without=_NO_AIOHTTP,
    ),
    "topology": Tool(
        help="create or update the streams, consumers and KV buckets, then exit", module="services.cli.topology"
    ),
    "up": Tool(help="run the whole stack on loopback (nats-server, kubesim, services)", module="services.cli.up"),
    "kubesim": Tool(help="run the embedded Kubernetes API server emulator (a simulator)", module="kubesim.cli"),
    "crds": Tool(help="generate the ray.io CRDs from schema/ (raybus crds --out deploy/crds)", module="schema.crd"),
    "rbac": Tool(
        help="generate each edge role's RBAC in deploy/ from its permissions", module="services.edge.rbac_manifests"
    ),
    "history": Tool(help="print a custom resource's recorded state transitions", module="services.status.history_cli"),
    "migrate": Tool(help="run the status database migrations", module="services.status.migrate"),
    "get": Tool(
        help="list ray.io custom resources with KubeRay's columns (-n NS | -A, -o wide|json)", module="services.cli.get"
    ),
    "replay": Tool(
        help="replay a key's recorded history through today's reconcile; export it", module="services.replay.cli"
    ),
}
"""Every ``raybus`` subcommand, in the order ``raybus --help`` lists them."""
