"""A Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager, started the way
controller-runtime's envtest starts them, with real authentication (client certificates, ServiceAccount
tokens) and authorization (Node, RBAC).

There is no scheduler and no kubelet: Pods are stored and stay Pending.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from realkube import commands
from realkube.api import AdminApi, answers_ok, etcd_request, tls_context
from realkube.binaries import KubeBinaries, find_binaries
from realkube.commands import HOST
from realkube.errors import RealKubeError
from realkube.kubeconfigs import write_cert_kubeconfig, write_token_kubeconfig
from realkube.pki import CertificateAuthority, signing_key
from realkube.programs import Program

ADMIN_USER = "realkube-admin"
STARTUP_TIMEOUT = 240.0
POLL_INTERVAL = 0.2
# What start() owns in the state folder and clears first: every start is a fresh, empty cluster.
OWNED = (
    "pki",
    "etcd",
    "logs",
    "serviceaccounts",
    "kubeconfig",
    "controller-manager.kubeconfig",
    "audit-policy.yaml",
)


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager for one state folder.

    ``start()`` returns the admin kubeconfig; ``stop()`` ends every program (also on a failed start). As a
    context manager the plane is started on entry and stopped on exit. Without ``state_dir`` a temporary
    folder is used and removed by ``stop()``; a given folder is kept (with the logs) but cleared of an
    earlier plane's files on start.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        bin_dir: Path | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self._own_state = state_dir is None
        self.state_dir = Path(tempfile.mkdtemp(prefix="realkube-")) if state_dir is None else Path(state_dir)
        self._bin_dir = bin_dir
        self._startup_timeout = startup_timeout
        self._programs: list[Program] = []
        self._abandoned: str | None = None
        self._admin_api: AdminApi | None = None
        self.server = ""
        self.etcd_url = ""
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.ca_file = self.state_dir / "pki" / "ca.crt"
        self.audit_log = self.state_dir / "logs" / "audit.log"
        """The API server's audit log: one JSON line per answered request, at level Metadata."""

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Path:
        """Start the three programs, wait until the API server is ready and the controllers work, and return
        the path of a cluster-admin kubeconfig.

        Raises:
            RealKubeError: a binary is missing or a program failed or did not get ready in time (the message
                carries the end of its log); whatever had started is stopped again.
        """
        if self._programs:
            raise RealKubeError("the control plane is already started")
        self._abandoned = None
        try:
            self._start(find_binaries(self._bin_dir))
        except BaseException:
            self.stop()
            raise
        return self.kubeconfig

    def stop(self) -> None:
        """Stop the programs, newest first, and wait for each to exit; remove the state folder if it was a
        temporary one. Idempotent."""
        for program in reversed(self._programs):
            program.stop()
        self._programs.clear()
        self._admin_api = None
        if self._own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def abandon(self, reason: str) -> None:
        """Make a start under way give up at its next check (within a fraction of a second) and stop what it
        had started. Safe to call from a signal handler: it only sets a flag."""
        self._abandoned = reason

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, and return that revision.

        Every earlier revision is then gone from etcd; the API server keeps serving what its watch cache
        still holds (watches and continued lists within the cache's window) and answers 410 Gone beyond it.
        """
        if not self.etcd_url:
            raise RealKubeError("the control plane is not started")
        revision = int(etcd_request(self.etcd_url, "/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        etcd_request(self.etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def failed(self) -> str | None:
        """How a program of the running plane ended, if one did; None while all run."""
        for program in self._programs:
            ended = program.exited()
            if ended is not None:
                return ended
        return None

    @property
    def pids(self) -> dict[str, int]:
        """Program name → process id of the running programs."""
        return {p.name: p.pid for p in self._programs if p.pid is not None and p.running()}

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, path: Path | None = None, expiration_seconds: int = 3600
    ) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a token from the
        TokenRequest API (the ServiceAccount must exist); returns its path (by default under
        ``serviceaccounts/`` of the state folder).

        Raises:
            RealKubeError: the plane is not running or the API server refused the TokenRequest.
        """
        if self._admin_api is None:
            raise RealKubeError("the control plane is not running")
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        answer = self._admin_api.request(
            "POST",
            f"/api/v1/namespaces/{_quote(namespace)}/serviceaccounts/{_quote(name)}/token",
            request,
        )
        target = path or self.state_dir / "serviceaccounts" / f"{namespace}.{name}.kubeconfig"
        return write_token_kubeconfig(
            target, server=self.server, ca_file=self.ca_file, token=answer["status"]["token"], namespace=namespace
        )

    def _start(self, binaries: KubeBinaries) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for entry in OWNED:
            target = self.state_dir / entry
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        etcd_port, api_port, kcm_port = _free_ports(3)
        self.server = f"https://{HOST}:{api_port}"
        pki = self.state_dir / "pki"
        ca = CertificateAuthority(pki)
        admin = ca.client("admin", ADMIN_USER, ["system:masters"])
        kcm_client = ca.client("kube-controller-manager-client", "system:kube-controller-manager")
        service_accounts = signing_key(pki, "service-account")
        write_cert_kubeconfig(
            self.kubeconfig, server=self.server, ca_file=ca.files.cert, cert_file=admin.cert, key_file=admin.key
        )
        kcm_kubeconfig = write_cert_kubeconfig(
            self.state_dir / "controller-manager.kubeconfig",
            server=self.server,
            ca_file=ca.files.cert,
            cert_file=kcm_client.cert,
            key_file=kcm_client.key,
        )

        etcd_url = self.etcd_url = f"http://{HOST}:{etcd_port}"
        etcd = self._launch("etcd", commands.etcd(binaries.etcd, data_dir=self.state_dir / "etcd", client_url=etcd_url))
        self._wait(lambda: answers_ok(f"{etcd_url}/health"), f"etcd to answer on {etcd_url}/health", etcd)

        audit_policy = self.state_dir / "audit-policy.yaml"
        audit_policy.write_text(commands.AUDIT_POLICY)
        apiserver_tls = ca.serving(
            "kube-apiserver", [HOST, "localhost", commands.KUBERNETES_SERVICE_IP, *commands.KUBERNETES_NAMES]
        )
        apiserver = self._launch(
            "kube-apiserver",
            commands.apiserver(
                binaries.apiserver,
                etcd_url=etcd_url,
                port=api_port,
                tls=apiserver_tls,
                ca=ca.files,
                service_accounts=service_accounts,
                audit_policy=audit_policy,
                audit_log=self.audit_log,
            ),
        )
        admin_api = self._admin_api = AdminApi(self.server, ca.files.cert, admin)
        self._wait(
            lambda: admin_api.exists("/readyz"), f"kube-apiserver to be ready at {self.server}/readyz", apiserver
        )

        kcm = self._launch(
            "kube-controller-manager",
            commands.controller_manager(
                binaries.controller_manager,
                kubeconfig=kcm_kubeconfig,
                port=kcm_port,
                tls=ca.serving("kube-controller-manager", [HOST, "localhost"]),
                ca=ca.files,
                service_accounts=service_accounts,
            ),
        )
        kcm_health = f"https://{HOST}:{kcm_port}/healthz"
        kcm_context = tls_context(ca.files.cert)
        self._wait(
            lambda: answers_ok(kcm_health, kcm_context), f"kube-controller-manager to be healthy at {kcm_health}", kcm
        )
        # The ServiceAccount controller creates every namespace's "default" account: once it exists, the
        # controllers run with their credentials and Pods can be created.
        self._wait(
            lambda: admin_api.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            "the ServiceAccount controller to create default/default",
            kcm,
        )

    def _launch(self, name: str, argv: list[str]) -> Program:
        if self._abandoned is not None:
            raise RealKubeError(f"start abandoned before {name}: {self._abandoned}")
        program = Program(name, argv, self.state_dir / "logs" / f"{name}.log")
        self._programs.append(program)
        program.start()
        return program

    def _wait(self, probe: Callable[[], bool], what: str, program: Program) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while not probe():
            if self._abandoned is not None:
                raise RealKubeError(f"start abandoned while waiting for {what}: {self._abandoned}")
            ended = self.failed()
            if ended is not None:
                raise RealKubeError(f"while waiting for {what}: {ended}")
            if time.monotonic() > deadline:
                raise RealKubeError(
                    f"timed out after {self._startup_timeout:.0f}s waiting for {what}; the end of {program.log}:\n"
                    f"{program.log_tail()}"
                )
            time.sleep(POLL_INTERVAL)


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
