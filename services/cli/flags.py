"""Command-line flags of the long-running services, applied on top of the environment's settings.

Every flag has an environment variable (``load_settings``); a flag wins over its variable. The
configuration reference in README.md lists both.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

import msgspec

from services.runtime.errors import PermanentError
from services.runtime.settings import (
    CHECK_INTERVAL_ENV,
    RESYNC_PERIOD_ENV,
    ROLES_ENV,
    STALL_AFTER_ENV,
    STATUS_AUTH_ENV,
    WATCHER_ROLES,
    RaybusSettings,
    load_pod_defaults,
    load_settings,
    parse_feature_gates,
    parse_roles,
)


def add_common(parser: argparse.ArgumentParser) -> None:
    """Flags every service takes."""
    parser.add_argument("--nats-url", help="NATS server URL(s), comma-separated [RAYBUS_NATS_URL]")
    parser.add_argument("--nats-creds", help="NATS credentials file [RAYBUS_NATS_CREDS]")
    parser.add_argument("--health-port", type=int, help="port of /healthz, /readyz, /metrics (0 = free port)")
    parser.add_argument("--metrics-port", type=int, help="separate port for /metrics (default: the health port)")
    parser.add_argument(
        "--bind-address", help="address the health, metrics and history servers listen on (default 127.0.0.1)"
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING [RAYBUS_LOG_LEVEL]")
    parser.add_argument("--partitions", type=int, help="partitions of the events stream (default 16)")
    parser.add_argument("--no-ensure-topology", action="store_true", help="do not create streams and buckets")


def add_operator(parser: argparse.ArgumentParser) -> None:
    """KubeRay's operator options, read by reconcile and by the applier's content check (the two must agree)."""
    parser.add_argument(
        "--feature-gates", help="KubeRay feature gates, e.g. RayCronJob=true,... [RAYBUS_FEATURE_GATES]"
    )
    parser.add_argument(
        "--operator-config",
        help="KubeRay Configuration file (defaultContainerEnvs, defaultPodLabels, ...) [RAYBUS_OPERATOR_CONFIG]",
    )


def add_kube(parser: argparse.ArgumentParser) -> None:
    """Flags of the edge processes (the ones whose credentials read or write Kubernetes objects)."""
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube/config)")
    parser.add_argument("--watch-namespace", help="comma-separated namespaces to watch (default: all)")
    parser.add_argument(
        "--use-kubernetes-proxy",
        action="store_true",
        default=None,
        help="reach Ray dashboards through the API server's service proxy",
    )
    parser.add_argument(
        "--qps", type=float, help="API requests per second of the applier, 0 = unlimited (default 100) [RAYBUS_QPS]"
    )
    parser.add_argument("--burst", type=int, help="API requests at once above --qps (default 200) [RAYBUS_BURST]")
    parser.add_argument(
        "--check-interval",
        type=float,
        help=f"mean seconds between drift checks of each watched resource, 0 = none (default 300) "
        f"[{CHECK_INTERVAL_ENV}]",
    )
    add_identity(parser)


def add_roles(parser: argparse.ArgumentParser) -> None:
    """The roles of ``raybus watcher``, which runs any of them in one process (each has a command of its own)."""
    parser.add_argument(
        "--roles",
        help=f"stages this process runs, comma-separated: {','.join(WATCHER_ROLES)} (default: all) [{ROLES_ENV}]",
    )


def add_identity(parser: argparse.ArgumentParser) -> None:
    """The replica identity of a service that shares partitions (and, for the watcher, the Lease)."""
    parser.add_argument(
        "--worker-id", help="stable replica identity in the partition leases and the Lease (default hostname-pid)"
    )


def add_liveness(parser: argparse.ArgumentParser) -> None:
    """Flags of the reconciler's liveness: resync, and when an undecided key counts as stalled."""
    parser.add_argument(
        "--resync-period",
        type=float,
        help=f"seconds within which every key is decided again although no event came, 0 = never "
        f"(default 300) [{RESYNC_PERIOD_ENV}]",
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        help=f"seconds an input may wait undecided before its key is reported stalled, 0 = never "
        f"(default 120) [{STALL_AFTER_ENV}]",
    )


def add_status(parser: argparse.ArgumentParser) -> None:
    """Flags of the status service."""
    parser.add_argument("--db-url", help="SQLAlchemy URL, e.g. postgresql+asyncpg://... [RAYBUS_DB_URL]")
    parser.add_argument("--no-migrate", action="store_true", help="do not run Alembic migrations at start")
    parser.add_argument("--http-port", type=int, help="port of the history API and web console (default 8090)")
    parser.add_argument(
        "--trace-url-template",
        help="the console's link of a trace id, with {trace_id} in it [RAYBUS_TRACE_URL_TEMPLATE]",
    )
    parser.add_argument(
        "--auth",
        action="store_true",
        default=None,
        help="require a bearer token on the history API and console, reviewed by the in-cluster API server "
        f"(TokenReview and SubjectAccessReview) [{STATUS_AUTH_ENV}]",
    )


def settings_from(args: argparse.Namespace, env: dict[str, str] | None = None) -> RaybusSettings:
    """Environment settings with this command's flags applied (a flag that was not given changes nothing)."""
    s = load_settings(env if env is not None else dict(os.environ))
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None and v is not False}

    def pick(*names: str) -> dict[str, Any]:
        return {name: given[name] for name in names if name in given}

    nats = dataclasses.replace(
        s.nats, **{f: given[k] for f, k in (("url", "nats_url"), ("creds_file", "nats_creds")) if k in given}
    )
    if "no_ensure_topology" in given:
        nats = dataclasses.replace(nats, ensure_topology=False)
    telemetry = dataclasses.replace(s.telemetry, **pick("health_port", "metrics_port", "log_level"))
    if "bind_address" in given:
        telemetry = dataclasses.replace(telemetry, health_host=given["bind_address"])
    bus = dataclasses.replace(s.bus, **pick("partitions"))
    partitions = dataclasses.replace(s.partitions, **pick("worker_id", "resync_period", "stall_after"))
    if partitions.resync_period < 0 or partitions.stall_after < 0:
        raise PermanentError("--resync-period and --stall-after must be >= 0")
    kube = dataclasses.replace(s.kube, **pick("kubeconfig", "use_kubernetes_proxy", "qps", "burst", "check_interval"))
    if "roles" in given:
        kube = dataclasses.replace(kube, roles=parse_roles(given["roles"]))
    if "watch_namespace" in given:
        kube = dataclasses.replace(kube, watch_namespaces=tuple(n for n in given["watch_namespace"].split(",") if n))
    status = dataclasses.replace(s.status, **pick("db_url", "http_port", "trace_url_template"))
    if "bind_address" in given:
        status = dataclasses.replace(status, http_host=given["bind_address"])
    if "no_migrate" in given:
        status = dataclasses.replace(status, migrate=False)
    if "auth" in given:
        status = dataclasses.replace(status, auth=dataclasses.replace(status.auth, enabled=True))
    operator = s.operator
    if "feature_gates" in given:
        operator = msgspec.structs.replace(operator, gates=parse_feature_gates(given["feature_gates"], operator.gates))
    if "operator_config" in given:
        operator = msgspec.structs.replace(operator, pod_defaults=load_pod_defaults(given["operator_config"]))
    return dataclasses.replace(
        s, nats=nats, telemetry=telemetry, bus=bus, partitions=partitions, kube=kube, status=status, operator=operator
    )
