"""``RaybusSettings``: one documented tree of settings for every service (kopf's OperatorSettings).

Every field has a default chosen for ``raybus up`` on a laptop and a docstring giving its unit and why.
Environment parsing happens only in :func:`load_settings`; command-line flags are applied on top by the
CLI; tests build settings directly. KubeRay's own operator switches (``ENABLE_*``, ``CLUSTER_DOMAIN``,
...) and ``--feature-gates`` end up in :class:`schema.config.OperatorConfig`, which reconcile reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import yaml

from schema.config import FeatureGates, OperatorConfig, OperatorSwitches, PodDefaults
from schema.subjects import DEFAULT_PARTITIONS
from services.runtime.errors import PermanentError
from services.runtime.fetching import LINGER_CAP, LINGER_WINDOW

NATS_URL_ENV: Final = "RAYBUS_NATS_URL"
NATS_USER_ENV: Final = "RAYBUS_NATS_USER"
NATS_PASSWORD_ENV: Final = "RAYBUS_NATS_PASSWORD"
STATUS_AUTH_ENV: Final = "RAYBUS_STATUS_AUTH"
ROLES_ENV: Final = "RAYBUS_WATCHER_ROLES"
RESYNC_PERIOD_ENV: Final = "RAYBUS_RESYNC_PERIOD"
STALL_AFTER_ENV: Final = "RAYBUS_STALL_AFTER"
CHECK_INTERVAL_ENV: Final = "RAYBUS_CHECK_INTERVAL"
RESULT_BATCHES_ENV: Final = "RAYBUS_RESULT_BATCHES"
IN_CLUSTER_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
IN_CLUSTER_CA_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


@dataclass(frozen=True, kw_only=True)
class NatsSettings:
    url: str = "nats://127.0.0.1:4222"
    """Comma-separated server URLs."""
    creds_file: str | None = None
    """NATS credentials file (JWT + nkey); never logged."""
    user: str | None = None
    """User name for user/password auth (password from ``RAYBUS_NATS_PASSWORD``)."""
    password: str | None = dataclasses.field(default=None, repr=False)
    """Password; ``repr=False`` keeps it out of logs and tracebacks."""
    tls_ca_file: str | None = None
    """CA bundle the server's certificate must chain to (``tls://`` URLs); None: the system's CAs."""
    connect_timeout: float = 5.0
    """Seconds per connection attempt."""
    ensure_topology: bool = True
    """Create/update streams and buckets at start (off when an admin provisions them)."""


@dataclass(frozen=True, kw_only=True)
class BusSettings:
    partitions: int = DEFAULT_PARTITIONS
    """Partitions of the events stream: the unit of ownership among reconciler workers."""
    max_age: float = 7 * 24 * 3600.0
    """Seconds the streams keep history: the window of ``raybus replay``."""
    max_deliver: int = 5
    """Deliveries before a message goes to the dead-letter stream."""
    ack_wait: float = 30.0
    """Seconds before an unacknowledged message is redelivered."""
    replicas: int = 1
    """Stream replicas (3 on a NATS cluster)."""
    result_batches: bool = False
    """Publish the results of a batch's run together, one message per run (``ResultBatch``), rather than
    one per command (a quarter as many messages in a burst of new RayClusters). A release that cannot
    decode them dead-letters them, so this is off until every status service reads them (on under
    ``raybus up``, which runs one build)."""


@dataclass(frozen=True, kw_only=True)
class PartitionSettings:
    lease_ttl: float = 20.0
    """Seconds a partition lease lives without renewal; a dead worker's partitions move after this. Long
    enough that one JetStream leader election (4 to 9 s; docs/architecture.md) does not cost the leases."""
    renew_interval: float = 2.0
    """Seconds between lease renewals and membership heartbeats (a failed renewal is retried sooner)."""
    worker_id: str = ""
    """Stable worker identity; empty means hostname + pid."""
    exit_timeout: float = 20.0
    """Seconds in-flight reconciles get to finish on shutdown or partition hand-over."""
    coalesce_window: float = LINGER_WINDOW
    """Seconds a partition waits after a fetch of several inputs to take more before reconciling, so a
    burst of events of one key becomes one reconcile (kopf's batch window; 0 disables). A fetch of one
    input does not wait: on an idle partition the window would only be latency."""
    coalesce_window_max: float = LINGER_CAP
    """Seconds the window widens to while a burst lasts: it doubles after each fetch of several inputs
    and falls back to ``coalesce_window`` after a fetch of one."""
    inflight_grace: float = 2.0
    """Seconds a command stays "in flight" after the applier carried it out: the time its watch event
    takes to reach the KV. Identical commands of the key are withheld meanwhile (the worker's stand-in
    for KubeRay's scale expectations)."""
    inflight_create_hold: float = 10.0
    """Seconds after it was applied that a batch creating objects may stay in flight, until the snapshot
    shows what it created (the watch lags more than the grace under load; KubeRay's expectations wait
    up to 30 s). A create that failed is decided again after this at the latest."""
    inflight_max_age: float = 60.0
    """Seconds after which a command no longer counts as in flight even if the applier has not
    acknowledged it (0 disables withholding); KubeRay lets a create expectation expire after 30 s."""
    resync_period: float = 300.0
    """Seconds within which every live key is decided again from a fresh snapshot although no event came
    (each key at its own point between half of it and all of it; 0 = never). KubeRay requeues every
    RayCluster every 300 s (``RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV``); raybus does that for every kind."""
    stall_after: float = 120.0
    """Seconds an input may wait undecided before its key counts as undecided (a metric), and, when its
    partition has not moved for as long, gets a Warning Event ``ReconcileStalled`` (0 = never)."""


WatcherRole = Literal["watch", "apply", "probe"]
"""A stage a watcher process runs: the watch side (informers → projection), the applier, the prober."""
WATCHER_ROLES: Final[tuple[WatcherRole, ...]] = ("watch", "apply", "probe")
ROLE_COMMANDS: Final[Mapping[WatcherRole, str]] = {"watch": "watch", "apply": "applier", "probe": "prober"}
"""Per role, the ``raybus`` command that runs it alone; ``deploy/`` names the role's component the same (the
``app.kubernetes.io/component`` label, and with the ``raybus-`` prefix its Deployment, ServiceAccount and
ClusterRole)."""


def parse_roles(text: str) -> tuple[WatcherRole, ...]:
    """``"watch,apply"`` → the roles, in :data:`WATCHER_ROLES` order.

    Raises:
        PermanentError: an unknown role, or none.
    """
    given = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(given - set(WATCHER_ROLES))
    if unknown or not given:
        raise PermanentError(f"watcher roles {text!r}: expected a comma-separated subset of {', '.join(WATCHER_ROLES)}")
    return tuple(role for role in WATCHER_ROLES if role in given)


@dataclass(frozen=True, kw_only=True)
class KubeSettings:
    kubeconfig: str | None = None
    """Path to a kubeconfig; None means in-cluster config, then ``~/.kube/config``."""
    watch_namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all."""
    use_kubernetes_proxy: bool = False
    """Reach Ray dashboards through the API server's service proxy, and head pods' Serve proxy
    (``/-/healthz``) through its pod proxy (needed outside the cluster)."""
    qps: float = 100.0
    """API requests per second the applier may send (KubeRay's ``--qps``; 0 disables the limit)."""
    burst: int = 200
    """Requests the applier may send at once above ``qps`` (KubeRay's ``--burst``)."""
    applier_concurrency: int = 32
    """Command batches applied in parallel (one per key at a time)."""
    dashboard_poll_interval: float = 3.0
    """Seconds between dashboard polls of one Running RayJob / RayService."""
    check_interval: float = 300.0
    """Mean seconds between two drift checks of one watched resource (a list compared with the projection,
    jittered by ±20 %); 0 turns them off."""
    roles: tuple[WatcherRole, ...] = WATCHER_ROLES
    """The stages this watcher process runs; each scales on its own (one Deployment per role in deploy/)."""
    election_namespace: str = "default"
    """Namespace of the watch side's Lease: the watcher's own (``POD_NAMESPACE`` in a cluster)."""
    lease_duration: float = 15.0
    """Seconds a standby waits after the leader's last renewal before it takes the Lease (KubeRay's)."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before it gives the watch side up (KubeRay's)."""
    retry_period: float = 2.0
    """Seconds between the Lease's renewals, and between a standby's tries (KubeRay's)."""


@dataclass(frozen=True, kw_only=True)
class StatusAuthSettings:
    enabled: bool = False
    """Require a bearer token on the history API and the console, checked by the Kubernetes API server
    (TokenReview, then SubjectAccessReview of ``get`` on the request's path as a non-resource URL). Off
    by default and under ``raybus up``; for in-cluster use."""
    api_url: str = ""
    """The API server that reviews tokens; "" = in-cluster (``KUBERNETES_SERVICE_HOST``/``_PORT``)."""
    token_file: str = IN_CLUSTER_TOKEN_FILE
    """The status service's own token, sent with each review (re-read, so a rotated token is used)."""
    ca_file: str = IN_CLUSTER_CA_FILE
    """The CA the API server's certificate must chain to (``https`` only)."""
    cache_ttl: float = 10.0
    """Seconds a review's answer (accepted or not) is reused for the same token, user and path."""


@dataclass(frozen=True, kw_only=True)
class StatusSettings:
    db_url: str = "sqlite+aiosqlite:///.raybus/raybus.db"
    """SQLAlchemy async URL; PostgreSQL in production (``postgresql+asyncpg://...``)."""
    migrate: bool = True
    """Run Alembic migrations to head at start."""
    http_host: str = "127.0.0.1"
    http_port: int = 8090
    """The read-only history API (and the web console under ``/console/``)."""
    trace_url_template: str = ""
    """Link of a trace id in the console, e.g. ``https://jaeger.example/trace/{trace_id}`` ("" = no link)."""
    auth: StatusAuthSettings = field(default_factory=StatusAuthSettings)
    """Who may read the history API and the console (nobody is checked by default)."""


@dataclass(frozen=True, kw_only=True)
class TelemetrySettings:
    health_host: str = "127.0.0.1"
    health_port: int = 0
    """/healthz, /readyz (and /metrics unless ``metrics_port`` is set); 0 picks a free port."""
    metrics_port: int | None = None
    """A separate port for /metrics (Prometheus scrapes it apart from the kubelet's probes)."""
    log_level: str = "INFO"
    service_name: str = "raybus"


@dataclass(frozen=True, kw_only=True)
class RaybusSettings:
    nats: NatsSettings = field(default_factory=NatsSettings)
    bus: BusSettings = field(default_factory=BusSettings)
    partitions: PartitionSettings = field(default_factory=PartitionSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    operator: OperatorConfig = field(default_factory=OperatorConfig)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise PermanentError(f"{name}={value!r}: expected true or false")


def _float(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError as exc:
        raise PermanentError(f"{name}={value!r}: expected a number") from exc


def _number(name: str, value: str | None, default: float) -> float:
    if value is None or not value.strip():
        return default
    number = _float(name, value)
    if number < 0:
        raise PermanentError(f"{name}={value!r}: expected a number >= 0")
    return number


def parse_feature_gates(text: str, base: FeatureGates | None = None) -> FeatureGates:
    """Parse KubeRay's ``--feature-gates Name=bool,...`` (unknown names are an error, as in KubeRay).

    Raises:
        PermanentError: an unknown gate or a value that is not a boolean.
    """
    gates = msgspec.to_builtins(base or FeatureGates())
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name not in gates:
            known = ", ".join(sorted(gates))
            raise PermanentError(f"unknown feature gate {name!r} (known: {known})")
        gates[name] = _bool(name, value)
    return msgspec.convert(gates, FeatureGates)


# KubeRay operator environment switches → OperatorSwitches fields.
_SWITCH_ENV: Mapping[str, str] = {
    "ENABLE_INIT_CONTAINER_INJECTION": "enable_init_container_injection",
    "ENABLE_PROBES_INJECTION": "enable_probes_injection",
    "ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": "enable_ray_head_cluster_ip_service",
    "CLUSTER_DOMAIN": "cluster_domain",
    "RAYCLUSTER_DEFAULT_REQUEUE_SECONDS_ENV": "raycluster_default_requeue_seconds",
    "ENABLE_GCS_FT_REDIS_CLEANUP": "enable_gcs_ft_redis_cleanup",
    "ENABLE_ZERO_DOWNTIME": "enable_zero_downtime",
    "DELETE_RAYJOB_CR_AFTER_JOB_FINISHES": "delete_rayjob_cr_after_job_finishes",
    "ENABLE_DETERMINISTIC_HEAD_POD_NAME": "enable_deterministic_head_pod_name",
    "ENABLE_LOGIN_SHELL": "enable_login_shell",
    "ENABLE_RANDOM_POD_DELETE": "enable_random_pod_delete",
    "RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS": (
        "rayjob_deployment_status_transition_grace_period_seconds"
    ),
    "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS": "rayjob_status_check_timeout_seconds",
}


def parse_switches(env: Mapping[str, str]) -> OperatorSwitches:
    """KubeRay's operator environment switches from ``env`` (KubeRay's defaults otherwise)."""
    values: dict[str, Any] = {}
    defaults = OperatorSwitches()
    for env_name, attr in _SWITCH_ENV.items():
        if env_name not in env:
            continue
        raw = env[env_name]
        default = getattr(defaults, attr)
        if isinstance(default, bool):
            values[attr] = _bool(env_name, raw)
        elif isinstance(default, float):
            values[attr] = _float(env_name, raw)
        else:
            values[attr] = raw
    return msgspec.structs.replace(defaults, **values)


def load_pod_defaults(path: str | Path) -> PodDefaults:
    """Read the operator config file (KubeRay's ``Configuration``: defaultContainerEnvs, ...).

    Raises:
        PermanentError: unreadable file or unknown fields.
    """
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        return msgspec.convert(data, PodDefaults)
    except (OSError, yaml.YAMLError, msgspec.ValidationError) as exc:
        raise PermanentError(f"operator config {path}: {exc}") from exc


def load_settings(env: Mapping[str, str]) -> RaybusSettings:
    """Build settings from ``RAYBUS_*`` variables and KubeRay's operator switches; flags come later.

    Raises:
        PermanentError: a variable that does not parse.
    """
    s = RaybusSettings()
    nats = dataclasses.replace(
        s.nats,
        url=env.get(NATS_URL_ENV, s.nats.url),
        creds_file=env.get("RAYBUS_NATS_CREDS") or None,
        user=env.get(NATS_USER_ENV) or None,
        password=env.get(NATS_PASSWORD_ENV) or None,
        tls_ca_file=env.get("RAYBUS_NATS_TLS_CA") or None,
    )
    kube = dataclasses.replace(
        s.kube,
        kubeconfig=env.get("RAYBUS_KUBECONFIG") or env.get("KUBECONFIG") or None,
        watch_namespaces=tuple(n for n in env.get("RAYBUS_WATCH_NAMESPACE", "").split(",") if n),
        use_kubernetes_proxy=_bool("RAYBUS_USE_KUBERNETES_PROXY", env.get("RAYBUS_USE_KUBERNETES_PROXY", "false")),
        qps=_number("RAYBUS_QPS", env.get("RAYBUS_QPS"), s.kube.qps),
        burst=int(_number("RAYBUS_BURST", env.get("RAYBUS_BURST"), s.kube.burst)),
        check_interval=_number(CHECK_INTERVAL_ENV, env.get(CHECK_INTERVAL_ENV), s.kube.check_interval),
        roles=parse_roles(env[ROLES_ENV]) if env.get(ROLES_ENV) else s.kube.roles,
        election_namespace=env.get("POD_NAMESPACE") or s.kube.election_namespace,
    )
    status = dataclasses.replace(
        s.status,
        db_url=env.get("RAYBUS_DB_URL", s.status.db_url),
        trace_url_template=env.get("RAYBUS_TRACE_URL_TEMPLATE", s.status.trace_url_template),
        auth=dataclasses.replace(s.status.auth, enabled=_bool(STATUS_AUTH_ENV, env.get(STATUS_AUTH_ENV, "false"))),
    )
    gates = parse_feature_gates(env.get("RAYBUS_FEATURE_GATES", ""))
    pod_defaults = (
        load_pod_defaults(env["RAYBUS_OPERATOR_CONFIG"]) if env.get("RAYBUS_OPERATOR_CONFIG") else PodDefaults()
    )
    operator = OperatorConfig(gates=gates, switches=parse_switches(env), pod_defaults=pod_defaults)
    telemetry = dataclasses.replace(s.telemetry, log_level=env.get("RAYBUS_LOG_LEVEL", s.telemetry.log_level))
    partitions = dataclasses.replace(
        s.partitions,
        resync_period=_number(RESYNC_PERIOD_ENV, env.get(RESYNC_PERIOD_ENV), s.partitions.resync_period),
        stall_after=_number(STALL_AFTER_ENV, env.get(STALL_AFTER_ENV), s.partitions.stall_after),
    )
    bus = dataclasses.replace(
        s.bus, result_batches=_bool(RESULT_BATCHES_ENV, env.get(RESULT_BATCHES_ENV, str(s.bus.result_batches)))
    )
    return dataclasses.replace(
        s, nats=nats, bus=bus, kube=kube, status=status, operator=operator, telemetry=telemetry, partitions=partitions
    )
