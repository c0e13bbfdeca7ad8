"""The command lines of the three programs: envtest's choices (loopback only, a throwaway etcd) plus real
authentication and authorization, and controllers that act as their own ServiceAccounts."""

from __future__ import annotations

from pathlib import Path

from realkube.pki import KeyPair, SigningKey

HOST = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
# The ClusterIP of the ``kubernetes`` Service: the first address of SERVICE_CIDR.
KUBERNETES_SERVICE_IP = "10.0.0.1"
KUBERNETES_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The audit log rotates past this size (megabytes), keeping one old file.
AUDIT_LOG_MAX_MB = 200
# Who did what, without bodies: a line per answered request, and one when a watch starts streaming.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""


def etcd(binary: Path, *, data_dir: Path, client_url: str) -> list[str]:
    """A single-member etcd serving ``client_url``, not syncing to disk (its data is thrown away)."""
    return [
        str(binary),
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        # A single member: its peer port is never dialled, so any free one will do.
        f"--listen-peer-urls=http://{HOST}:0",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver(
    binary: Path,
    *,
    etcd_url: str,
    port: int,
    tls: KeyPair,
    ca: KeyPair,
    service_accounts: SigningKey,
    audit_policy: Path,
    audit_log: Path,
) -> list[str]:
    """kube-apiserver on ``HOST:port``: client certificates signed by ``ca`` and ServiceAccount tokens
    authenticate, Node and RBAC authorize, tokens are signed with ``service_accounts``; every request is
    audited to ``audit_log`` (JSON lines) as ``audit_policy`` says."""
    return [
        str(binary),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        # The endpoint reconciler refuses a loopback address; nothing runs in-cluster to reach the
        # ``kubernetes`` Service's endpoints, so it is off.
        "--endpoint-reconciler-type=none",
        f"--secure-port={port}",
        f"--tls-cert-file={tls.cert}",
        f"--tls-private-key-file={tls.key}",
        f"--client-ca-file={ca.cert}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={service_accounts.public}",
        f"--service-account-signing-key-file={service_accounts.private}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        f"--audit-policy-file={audit_policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}",
        "--audit-log-maxbackup=1",
    ]


def controller_manager(
    binary: Path, *, kubeconfig: Path, port: int, tls: KeyPair, ca: KeyPair, service_accounts: SigningKey
) -> list[str]:
    """kube-controller-manager with its default controllers, serving health on ``HOST:port``."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={port}",
        f"--tls-cert-file={tls.cert}",
        f"--tls-private-key-file={tls.key}",
        "--leader-elect=false",
        # Each controller acts as its own ServiceAccount, bound by the API server's bootstrap RBAC policy,
        # as in a kubeadm cluster; the controller manager's own identity only mints their tokens.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={service_accounts.private}",
        f"--root-ca-file={ca.cert}",
        f"--cluster-signing-cert-file={ca.cert}",
        f"--cluster-signing-key-file={ca.key}",
        "--profiling=false",
    ]
