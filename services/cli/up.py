"""``raybus up``: the whole stack on loopback for a newcomer, supervised by this process.

It starts, each as a child process with its log under ``STATE/logs/``: its own nats-server (JetStream
store under ``STATE/nats``), kubesim (kubelet ``instant``, the ray.io CRDs generated from ``schema/``;
``--ray real`` makes it run a real Ray head for each head Pod),
and the raybus services, one process per stage as ``deploy/`` runs them: the watch side, the applier, the
prober, the reconciler and the status service (SQLite under ``STATE``). It writes ``STATE/kubeconfig``
and ``STATE/endpoints.json`` (read by ``raybus history``, ``replay`` and ``get``), prints what runs where,
and on Ctrl-C stops everything: the raybus services at once (each drains within its own grace), then
kubesim and nats-server; a second Ctrl-C (or SIGTERM) kills every child and exits at once.
``--kubeconfig``, ``--nats-url`` and ``--db-url`` use existing ones instead. With ``--kubeconfig`` (a real
cluster's credentials act on what the bus carries) its nats-server takes only the stack's own processes,
each stage as its own user with deploy/'s permissions (``deploy/base/nats/auth.conf``, fresh passwords in
the environment only): the streams are created first by ``raybus topology`` as ``admin``, and a
reconciler cannot write the projection the applier checks commands against.
``--apply FILE`` applies a manifest and shows the objects' status live until they are ready.

A child that dies stops the stack with its log's tail: a half-running stack helps nobody.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final
from urllib.parse import urlsplit

from services.runtime import endpoints
from services.runtime.lifecycle import CANCEL_GRACE, EXIT_GRACE, SHUTDOWN_GRACE
from services.runtime.natsbin import nats_server_binary, nats_server_environment
from services.runtime.private import OWNER_ONLY_UMASK, open_private_log, private_dir, write_private
from services.runtime.settings import (
    NATS_PASSWORD_ENV,
    NATS_URL_ENV,
    NATS_USER_ENV,
    RESULT_BATCHES_ENV,
    ROLE_COMMANDS,
    STATUS_AUTH_ENV,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``raybus up``."""
    parser.add_argument("--state-dir", help=f"state folder [{endpoints.STATE_DIR_ENV}, {endpoints.DEFAULT_STATE_DIR}]")
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting kubesim")
    parser.add_argument(
        "--kube",
        choices=("sim", "real"),
        default="sim",
        help="the cluster to start: sim (kubesim) or real (kube-apiserver with deploy/'s RBAC; see README)",
    )
    parser.add_argument("--nats-url", help="use this NATS instead of starting nats-server")
    parser.add_argument("--db-url", help="use this database instead of SQLite under the state folder")
    parser.add_argument("--apply", metavar="FILE", help="apply a manifest and follow its objects until ready")
    parser.add_argument(
        "--feature-gates", default="RayCronJob=true", help="KubeRay feature gates for reconcile (and the applier)"
    )
    parser.add_argument("--status-port", type=int, default=0, help="history API port (0 = a free port)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each component")
    parser.add_argument(
        "--nats-nodes", type=int, default=1, help="nats-servers of the stack's own JetStream cluster (3: as deploy/)"
    )
    parser.add_argument(
        "--ray",
        choices=("sim", "real"),
        default="sim",
        help="what kubesim runs for a Ray head pod: sim (a simulator) or real (ray start --head; raybus[realray])",
    )


FREE_PORTS = range(20000, 32768)
"""Where :func:`free_port` looks: below Linux's ephemeral range (32768-60999 by default), so no outgoing
connection's own port takes a port that was chosen and is not bound yet."""
PORT_SHARES: Final = 16
""":data:`FREE_PORTS` is cut into this many shares; a process picks from the one its pid names first."""
_handed_out: deque[int] = deque(maxlen=1024)
"""The ports this process chose lately: not chosen again while their server may still be starting."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1, chosen at random from this process's share of :data:`FREE_PORTS`
    (then from all of it), never one this process chose lately.

    A chosen port stays free until its server binds it, seconds later for a process being started: two
    processes choosing at once (`raybus up`'s, a test run's parallel workers, a bench beside them) pick
    from different shares, so they hardly ever choose the same port in that window.
    """
    size = len(FREE_PORTS) // PORT_SHARES
    start = FREE_PORTS.start + os.getpid() % PORT_SHARES * size
    for pool in (range(start, start + size), FREE_PORTS):
        for _ in range(len(pool)):
            port = random.choice(pool)
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.append(port)
            return port
    raise OSError(f"no free port on 127.0.0.1 in {FREE_PORTS.start}-{FREE_PORTS.stop - 1}")


def port_open(port: int) -> bool:
    """Whether 127.0.0.1:port accepts connections."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def http_ok(url: str) -> bool:
    """Whether GET url answers 200."""
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:  # loopback only
        return bool(response.status == 200)
    return False


SERVICE_STOP_TIMEOUT = SHUTDOWN_GRACE + CANCEL_GRACE + EXIT_GRACE + 2.0
"""Seconds a raybus service gets after SIGTERM before it is killed (it exits on its own before that)."""
NATS_USER = "raybus"
"""The one user of the stack's own nats-server guarding a real cluster when deploy/'s users are not at hand."""
DEPLOY_AUTH = Path(__file__).resolve().parents[2] / "deploy" / "base" / "nats" / "auth.conf"
"""deploy/'s NATS users and their permissions (present in a source checkout, not in an installed wheel)."""
STAGE_USERS: Final[Mapping[str, str]] = {
    "topology": "admin",
    "watch": "watcher",
    "applier": "watcher",
    "prober": "watcher",
    "reconciler": "reconciler",
    "status": "status",
}
"""The NATS user of each child of a stack guarding a real cluster, as deploy/ gives them."""
INFRA_STOP_TIMEOUT = 10.0
"""Seconds kubesim and nats-server get after SIGTERM before they are killed."""


class StackError(Exception):
    """A component did not start or died."""


@dataclass
class Child:
    """One supervised child process."""

    name: str
    argv: list[str]
    log_path: Path
    where: str
    env: dict[str, str] = field(default_factory=dict)
    infra: bool = False
    """nats-server or kubesim: stopped after the raybus services, which need them to drain."""
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> None:
        private_dir(self.log_path.parent)
        self._log = open_private_log(self.log_path)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            umask=OWNER_ONLY_UMASK,  # its database, store, kubeconfig: the owner's only
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
        )

    def wait_ready(self, ready: Callable[[], bool], timeout: float, interrupted: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if interrupted():
                raise StackError(f"interrupted while {self.name} was starting")
            self.check_alive()
            if ready():
                return
            time.sleep(0.05)
        raise StackError(f"{self.name} did not become ready within {timeout:.0f}s\n{self.tail()}")

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise StackError(f"{self.name} exited with code {self.proc.returncode}\n{self.tail()}")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        """Wait for the exit after :meth:`terminate`; kill it when it takes longer than ``timeout``."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Stack:
    """The running components, in start order."""

    state: Path
    children: list[Child] = field(default_factory=list)
    endpoints: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False
    """Set by a signal: a start under way gives up."""

    def add(self, child: Child, ready: Callable[[], bool], timeout: float) -> None:
        self.children.append(child)
        child.start()
        child.wait_ready(ready, timeout, lambda: self.interrupted)

    def check_alive(self) -> None:
        for child in self.children:
            child.check_alive()

    def stop(self) -> None:
        """The services at once (each bounds its own drain), then kubesim and nats-server in reverse order."""
        services = [child for child in reversed(self.children) if not child.infra]
        for child in services:
            child.terminate()
        for child in services:
            child.wait(SERVICE_STOP_TIMEOUT)
        for child in reversed(self.children):
            if child.infra:
                child.terminate()
                child.wait(INFRA_STOP_TIMEOUT)

    def kill(self) -> None:
        """Every child, now."""
        for child in self.children:
            child.kill()


@dataclass(frozen=True)
class PrivateBus:
    """The stack's own nats-server guarding a real cluster: who may use it, with which password.

    ``passwords`` holds one fresh password per deploy/ user (``admin``, ``watcher``, ``reconciler``,
    ``status``), each stage connecting as its own with deploy/'s permissions; or, without deploy/'s file,
    one password for the one user :data:`NATS_USER`.
    """

    url: str
    """The server's URL, without credentials."""
    config: Path
    passwords: Mapping[str, str]

    @property
    def per_stage(self) -> bool:
        """Whether every stage has a user of its own."""
        return NATS_USER not in self.passwords

    def user_of(self, child: str) -> str:
        return STAGE_USERS[child] if self.per_stage else NATS_USER

    def url_of(self, user: str) -> str:
        """The URL with ``user``'s credential (for the owner-only endpoints file and the environment)."""
        return self.url.replace("nats://", f"nats://{user}:{self.passwords[user]}@", 1)

    def server_env(self) -> dict[str, str]:
        """deploy/'s authorization block reads its passwords from nats-server's environment."""
        return {f"RAYBUS_NATS_{user.upper()}_PASSWORD": password for user, password in self.passwords.items()}

    def client_env(self, child: str) -> dict[str, str]:
        """How ``child`` connects: the URL, its user and password, all in the environment."""
        user = self.user_of(child)
        return {NATS_URL_ENV: self.url, NATS_USER_ENV: user, NATS_PASSWORD_ENV: self.passwords[user]}


def new_password() -> str:
    """A fresh bus password. It starts with a letter: nats-server reads a ``$VARIABLE`` of its configuration
    as a value of its own syntax, where a leading digit or ``-`` makes a number (and a parse error)."""
    return "r" + secrets.token_urlsafe(32)


def private_bus(state: Path, port: int) -> PrivateBus:
    """Fresh passwords for the stack's own nats-server and the server configuration requiring them (in the
    owner-only state directory): deploy/'s users and permissions when its file is at hand."""
    url = f"nats://127.0.0.1:{port}"
    config = state / "nats-auth.conf"
    if DEPLOY_AUTH.is_file():
        write_private(config, DEPLOY_AUTH.read_bytes())
        return PrivateBus(url, config, {user: new_password() for user in sorted(set(STAGE_USERS.values()))})
    password = new_password()
    write_private(config, f'authorization {{ user: {NATS_USER}, password: "{password}" }}\n'.encode())
    return PrivateBus(url, config, {NATS_USER: password})


def create_topology(bus: PrivateBus, logs: Path, timeout: float) -> None:
    """Create the streams, consumers and buckets as deploy/'s admin Job does: the stages' own users may
    not (``raybus topology``, run once before them).

    Raises:
        StackError: it failed or took longer than ``timeout``.
    """
    with open_private_log(logs / "topology.log") as log:
        try:
            done = subprocess.run(
                _raybus("topology"),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **bus.client_env("topology")},
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(f"raybus topology did not finish within {timeout:.0f}s") from exc
    if done.returncode != 0:
        tail = "\n".join((logs / "topology.log").read_text(errors="replace").splitlines()[-20:])
        raise StackError(f"raybus topology exited with code {done.returncode}\n{tail}")


def realcluster_namespace() -> str:
    """The namespace raybus's ServiceAccounts live in on the real cluster."""
    from services.cli.realcluster import NAMESPACE

    return NAMESPACE


def _start_real_cluster(stack: Stack, state: Path, timeout: float) -> tuple[str, dict[str, str]]:
    """Start the real control plane and kubesim's attached simulators into ``stack``; return the admin
    kubeconfig and each role's ServiceAccount kubeconfig."""
    from services.cli import realcluster

    logs = state / "logs"
    cluster = realcluster.RealCluster(state / "kube")
    plane = Child("kube-plane", realcluster.plane_argv(cluster), logs / "kube-plane.log", "", infra=True)
    # ``python -m realkube`` prints the admin kubeconfig's path once the plane works.
    ready = functools.partial(_log_mentions, plane.log_path, f"{cluster.admin_kubeconfig}\n")
    stack.add(plane, ready, max(timeout, realcluster.PLANE_STARTUP_TIMEOUT))
    server = realcluster.server_of(cluster.admin_kubeconfig)
    plane.where = f"{server} (etcd, kube-apiserver, kube-controller-manager; audit log {cluster.audit_log})"
    try:
        roles = realcluster.role_kubeconfigs(cluster, lambda: stack.interrupted)
    except realcluster.RealClusterError as exc:
        raise StackError(str(exc)) from None
    attach_log = logs / "kubesim.log"
    unreachable = realcluster.heads_unreachable()
    where = "kubelet and Ray heads on Pod IPs"
    if unreachable is not None:
        where = f"kubelet and Ray heads on loopback: RayJobs and RayServices cannot progress, {unreachable}"
    argv = realcluster.attach_argv(cluster, heads_on_pod_ips=unreachable is None)
    attached = Child("kubesim", argv, attach_log, where, infra=True)
    stack.add(attached, functools.partial(_log_mentions, attach_log, "kubesim attached"), timeout)
    return str(cluster.admin_kubeconfig), {role: str(path) for role, path in roles.items()}


def _log_mentions(log: Path, words: str) -> bool:
    with contextlib.suppress(OSError):
        return words in log.read_text(errors="replace")
    return False


def start_nats_cluster(stack: Stack, state: Path, args: argparse.Namespace) -> str:
    """Start ``--nats-nodes`` nats-servers routed to each other; their URLs, comma-separated."""
    from services.cli.natsnodes import cluster_nodes

    store = state / "nats"
    private_dir(store)
    ports = [free_port() for _ in range(args.nats_nodes)]
    routes = [free_port() for _ in range(args.nats_nodes)]
    for node in cluster_nodes(nats_server_binary(), store, ports, routes):
        where = f"nats://127.0.0.1:{node.port}"
        child = Child(f"nats-{node.name}", node.argv, state / "logs" / f"nats-{node.name}.log", where, infra=True)
        stack.add(child, functools.partial(port_open, node.port), args.timeout)
    return ",".join(f"nats://127.0.0.1:{port}" for port in ports)


def make_topology(logs: Path, bus_flags: list[str], args: argparse.Namespace) -> None:
    """``raybus topology --stream-replicas N`` on the stack's cluster (it waits until the cluster answers).

    Raises:
        StackError: it failed, with its log's tail.
    """
    log_path = logs / "topology.log"
    argv = _raybus("topology", *bus_flags, "--stream-replicas", str(args.nats_nodes))
    with open_private_log(log_path) as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise StackError(f"raybus topology failed:\n{log_path.read_text(errors='replace')[-2000:]}")


def _raybus(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli.main", *args]


def start_stack(args: argparse.Namespace, stack: Stack | None = None) -> Stack:
    """Start every component that was not given (into ``stack`` if given); raise StackError if one fails."""
    state = endpoints.state_dir(args.state_dir).resolve()
    logs = state / "logs"
    private_dir(state)
    if stack is None:
        stack = Stack(state=state)
    try:
        nats_url = args.nats_url
        bus: PrivateBus | None = None
        clustered = not nats_url and args.nats_nodes > 1
        if clustered:
            if args.kubeconfig or args.kube == "real":
                raise StackError("--nats-nodes is for the stack on kubesim: with a real cluster the bus is one server")
            nats_url = start_nats_cluster(stack, state, args)
        if not nats_url:
            port = free_port()
            nats_url = f"nats://127.0.0.1:{port}"
            argv = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(state / "nats")]
            server_env = nats_server_environment()
            if args.kubeconfig or args.kube == "real":
                # A real cluster's credentials act on what this bus carries: only this stack may use it,
                # each stage as its own user with deploy/'s permissions (a reconciler may not write the
                # projection the applier checks commands against).
                bus = private_bus(state, port)
                argv += ["-c", str(bus.config)]
                server_env.update(bus.server_env())
            stack.add(
                Child("nats-server", argv, logs / "nats.log", nats_url, env=server_env, infra=True),
                lambda: port_open(port),
                args.timeout,
            )
            if bus is not None and bus.per_stage:
                create_topology(bus, logs, args.timeout)
        kubeconfig = args.kubeconfig
        # The kubeconfig of each raybus process that talks to Kubernetes (all the same but on a real cluster).
        role_kubeconfigs: dict[str, str] = {}
        if not kubeconfig and args.kube == "real":
            kubeconfig, role_kubeconfigs = _start_real_cluster(stack, state, args.timeout)
        elif not kubeconfig:
            from schema.crd import write_crds

            crds = state / "crds"
            write_crds(crds)
            kubeconfig = str(state / "kubeconfig")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(kubeconfig)
            port = free_port()
            argv = _raybus(
                "kubesim",
                *("--port", str(port), "--kubeconfig", kubeconfig, "--kubelet", "instant", "--crds", str(crds)),
                *("--ray", args.ray),
            )
            where = f"http://127.0.0.1:{port} (a simulator{', real Ray heads' if args.ray == 'real' else ''})"
            child = Child("kubesim", argv, logs / "kubesim.log", where, infra=True)
            stack.add(child, lambda: port_open(port) and Path(kubeconfig).exists(), args.timeout)
        db_url = args.db_url or f"sqlite+aiosqlite:///{state / 'raybus.db'}"
        # A URL with a password goes in the environment, never on a command line (``ps`` shows those).
        secret_url = urlsplit(nats_url).password is not None
        bus_flags, bus_env = ([], {NATS_URL_ENV: nats_url}) if secret_url else (["--nats-url", nats_url], {})
        if bus is not None and bus.per_stage:
            bus_flags = ["--no-ensure-topology"]  # created above, by the admin user
        if clustered:
            make_topology(logs, bus_flags, args)
            bus_flags = [*bus_flags, "--no-ensure-topology"]  # a service would set its own replica count

        # One process per stage, as deploy/ runs them: each scales on its own.
        def kube_flags(role: str) -> list[str]:
            return ["--kubeconfig", role_kubeconfigs.get(role, kubeconfig), "--use-kubernetes-proxy"]

        # On the real cluster the watch side's Lease lives where deploy/ lets it: raybus's own namespace.
        watch_env = {"POD_NAMESPACE": realcluster_namespace()} if role_kubeconfigs else {}
        services: list[tuple[str, list[str], str, dict[str, str]]] = [
            (
                "watch",
                [ROLE_COMMANDS["watch"], *kube_flags("watch")],
                "informers → projection (holds the Lease)",
                watch_env,
            ),
            (
                "applier",
                [ROLE_COMMANDS["apply"], *kube_flags("applier"), "--feature-gates", args.feature_gates],
                "partitions of RAYBUS_COMMANDS",
                {RESULT_BATCHES_ENV: "true"},  # one build reads every message: no earlier status service
            ),
            (
                "prober",
                [ROLE_COMMANDS["probe"], *kube_flags("prober")],
                "Ray dashboards of live RayJobs and RayServices",
                {},
            ),
            ("reconciler", ["reconciler", "--feature-gates", args.feature_gates], "partitions of RAYBUS_EVENTS", {}),
        ]
        status_port = args.status_port or free_port()
        status_url = f"http://127.0.0.1:{status_port}"
        # The history API on loopback is the user's own: no token reviews (an exported variable notwithstanding).
        status_flags = ["--db-url", db_url, "--http-port", str(status_port)]
        services.append(("status", ["status", *status_flags], f"history API {status_url}", {STATUS_AUTH_ENV: "false"}))
        for name, (command, *extra), what, env in services:
            health = free_port()
            argv = _raybus(command, *bus_flags, "--health-port", str(health), *extra)
            ready_url = f"http://127.0.0.1:{health}/readyz"
            client_env = bus.client_env(name) if bus is not None else bus_env
            child = Child(name, argv, logs / f"{name}.log", f"{what}; {ready_url}", env={**client_env, **env})
            stack.add(child, functools.partial(http_ok, ready_url), args.timeout)
        stack.endpoints = {
            # The tools (history, replay, the console's operator) read the bus as its administrator.
            endpoints.NATS_URL: bus.url_of("admin" if bus.per_stage else NATS_USER) if bus is not None else nats_url,
            endpoints.KUBECONFIG: kubeconfig,
            endpoints.STATUS_URL: status_url,
            endpoints.DB_URL: db_url if not args.db_url else "(given)",
        }
        endpoints.write_endpoints(state, stack.endpoints)
    except BaseException:
        stack.stop()
        raise
    return stack


def describe(stack: Stack) -> str:
    """What runs where, and what to try first."""
    rows = [f"raybus is up (state in {stack.state})"]
    rows += [f"  {child.name:<12} {child.where}" for child in stack.children]
    kubeconfig = stack.endpoints[endpoints.KUBECONFIG]
    rows += [
        "",
        "Try:",
        f"  export KUBECONFIG={kubeconfig}",
        "  kubectl apply -f ray-cluster.sample.yaml      # any KubeRay manifest, unchanged",
        "  kubectl get rayclusters",
        "  raybus history raycluster default/raycluster-kuberay",
        "",
        f"Logs in {stack.state / 'logs'}. Ctrl-C stops everything.",
    ]
    return "\n".join(rows)


def run_up(args: argparse.Namespace) -> int:
    """``raybus up``: start, describe, optionally apply and follow, then wait for Ctrl-C."""
    stopping = False
    stack = Stack(state=endpoints.state_dir(args.state_dir).resolve())

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        if stopping:
            stack.kill()
            print("\nraybus killed", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        stopping = True
        stack.interrupted = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        start_stack(args, stack)
    except StackError as exc:
        print(f"raybus up: {exc}", file=sys.stderr)
        return 1
    try:
        print(describe(stack), flush=True)
        if args.apply:
            from services.cli.apply import apply_and_follow

            apply_and_follow(
                Path(args.apply), stack.endpoints[endpoints.KUBECONFIG], stop=lambda: stopping, alive=stack.check_alive
            )
        while not stopping:
            stack.check_alive()
            time.sleep(0.2)
        print("\nstopping raybus ...", flush=True)
        return 0
    except StackError as exc:
        print(f"raybus up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("raybus stopped", flush=True)


def main(argv: Sequence[str]) -> int:
    """``raybus up`` with its command line."""
    parser = argparse.ArgumentParser(
        prog="raybus up", description="Run the whole stack on loopback (nats-server, kubesim, services)."
    )
    add_arguments(parser)
    return run_up(parser.parse_args(argv))
