"""Ray dashboard calls: where a dashboard is (direct or through the API server's service proxy), its
auth token, and the dashboard commands of the applier (submit / stop a Ray job, put a Serve config).

Role: a :class:`schema.messages.DashboardRef` names a head Service, a port and optionally the auth
Secret; only here does it become a URL (docs/behaviour.md#5.4: ``http://<svc>.<ns>.svc.<domain>:<port>`` or
``<apiserver>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy`` with ``use_kubernetes_proxy``) and a
``x-ray-authorization: Bearer <token>`` header (token read from the Secret's ``auth_token``). Planning
(:func:`plan_dashboard_call`, :func:`dashboard_base_url`, :func:`dashboard_outcome`) is pure; the
:class:`DashboardClient` does the I/O on the event loop (:mod:`kubeaccess.asynchttp`), using the API
server's credentials and TLS settings when it goes through the proxy.

The head pod's Serve proxy (docs/behaviour.md#6.1 step 11) is reached the same two ways: ``http://<podIP>:<port>``
directly, or ``<apiserver>/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy`` (:func:`pod_base_url`,
:meth:`DashboardClient.request_pod`); no token is sent there (Ray does not protect the proxy).

Invariants: a :class:`DashboardRef` becomes a URL only if its names are DNS-1123 names and its port a
port (:func:`dashboard_ref_problem`), and every path segment is quoted, so a reference reaches the
named Service and nothing else; which Service and Secret a key may name is ``authorize``'s rule (the
key's own cluster's head Service and auth Secret).
The token never reaches a log, a span attribute, an error string or a result; HTTP timeouts
are 2 s direct and 10 s through the proxy (KubeRay's), except the Serve config PUT (:data:`SERVE_PUT_TIMEOUT`:
the first PUT on a head starts Serve, 1.7-2.5 s on an idle Ray 2.60 head). A PUT that times out anyway is
confirmed against the head's applications before it counts as failed, because Ray finishes it regardless:
retrying it would apply it a second time. A 401 or 403 (real Ray answers 403 to a wrong token) drops the
cached token. A 500 answer to a submit that says "Please use a different submission_id" means the job was
already submitted (``already_done``).

Not here: deciding when to call (reconcile), polling job status (``prober``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import msgspec

from kubeaccess.asynchttp import AsyncHttp, HttpError
from schema.bounds import TooComplex, check_bounds
from schema.keys import is_dns1123_label, is_dns1123_subdomain
from schema.messages import Command, DashboardRef, Outcome, PutServeConfig, StopRayJob, SubmitRayJob
from schema.probes import SERVE_APPLICATIONS_PATH, PodEndpoint
from schema.ray.conventions import AUTH_TOKEN_SECRET_KEY
from services.edge.calls import JSON, ApiError
from services.edge.kubeapi import KubeApi
from services.runtime.aio import raise_if_cancelling
from services.runtime.errors import PermanentError

log = logging.getLogger(__name__)

DIRECT_TIMEOUT: Final = 2.0
PROXY_TIMEOUT: Final = 10.0
TOKEN_HEADER: Final = "x-ray-authorization"
SERVE_PUT_TIMEOUT: Final = 30.0
"""Seconds a Serve config PUT may take (starting Serve on a busy head takes several seconds)."""
PUT_CONFIRM_WINDOW: Final = 30.0
"""After a timed-out Serve config PUT: how long to look for the config among the head's applications."""
PUT_CONFIRM_INTERVAL: Final = 1.0
TOKEN_REJECTED: Final = frozenset({401, 403})
"""Answers to a token the dashboard does not accept (the simulator's 401, real Ray's 403)."""
TOKEN_TTL: Final = 60.0
"""Seconds a token read from its Secret is reused (the prober would otherwise read it every poll)."""
ALREADY_SUBMITTED: Final = "Please use a different submission_id"
_json: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])
_encoder: Final = msgspec.json.Encoder()


@dataclass(frozen=True, kw_only=True)
class DashboardCall:
    """One planned dashboard request."""

    method: str
    path: str
    body: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class DashboardAnswer:
    """What a dashboard answered (status 0: no answer)."""

    status: int
    data: bytes = b""
    error: str = ""
    timed_out: bool = False
    """No answer within the timeout (the request may still have been carried out)."""

    def json(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None."""
        try:
            return self.json_or_error()
        except (TooComplex, msgspec.DecodeError):
            return None

    def json_or_error(self) -> dict[str, Any] | None:
        """The body as a JSON object (None when empty).

        Raises:
            TooComplex: too large or nested too deeply to decode.
            msgspec.DecodeError: not a JSON object.
        """
        if not self.data:
            return None
        check_bounds(self.data)
        return _json.decode(self.data)


@dataclass(frozen=True, kw_only=True)
class DashboardOutcome:
    """The applier's view of a dashboard command."""

    outcome: Outcome
    status_code: int = 0
    error: str = ""


def plan_dashboard_call(command: Command) -> DashboardCall:
    """The dashboard request of a dashboard command (docs/behaviour.md#5.4).

    Raises:
        PermanentError: not a dashboard command, or a job id that is empty.
    """
    match command:
        case SubmitRayJob():
            return DashboardCall(method="POST", path="/api/jobs/", body=dict(command.request))
        case StopRayJob():
            if not command.job_id:
                raise PermanentError("StopRayJob without a job id")
            return DashboardCall(method="POST", path=f"/api/jobs/{quote(command.job_id, safe='')}/stop")
        case PutServeConfig():
            return DashboardCall(method="PUT", path="/api/serve/applications/", body=dict(command.config))
    raise PermanentError(f"{type(command).__name__} is not a dashboard command")


def dashboard_ref_problem(ref: DashboardRef) -> str:
    """Why a dashboard reference cannot become a URL ("" when it can).

    The namespace and the Service are DNS-1123 labels and the port a TCP port, so a reference can only
    name ``<service>.<namespace>.svc`` (direct) or that Service's proxy path: never another host, another
    API path or another port (``kube-system/pods?x=`` is not a namespace).
    """
    if not is_dns1123_label(ref.namespace):
        return f"namespace {ref.namespace!r} is not a DNS-1123 label"
    if not is_dns1123_label(ref.service):
        return f"service {ref.service!r} is not a DNS-1123 label"
    if not 0 < ref.port < 65536:
        return f"port {ref.port} is not a TCP port"
    if not is_dns1123_subdomain(ref.cluster):
        return f"cluster {ref.cluster!r} is not a valid name"
    if ref.auth_secret and not is_dns1123_subdomain(ref.auth_secret):
        return f"auth Secret {ref.auth_secret!r} is not a valid name"
    return ""


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


def dashboard_base_url(ref: DashboardRef, *, use_proxy: bool, api_host: str, cluster_domain: str) -> str:
    """The dashboard's base URL, direct or through the API server's service proxy.

    Raises:
        PermanentError: the reference does not name a Service (:func:`dashboard_ref_problem`).
    """
    problem = dashboard_ref_problem(ref)
    if problem:
        raise PermanentError(f"invalid dashboard reference: {problem}")
    if use_proxy:
        namespace, service = _segment(ref.namespace), _segment(ref.service)
        return f"{api_host.rstrip('/')}/api/v1/namespaces/{namespace}/services/{service}:{ref.port}/proxy"
    return f"http://{ref.service}.{ref.namespace}.svc.{cluster_domain}:{ref.port}"


def pod_base_url(pod: PodEndpoint, *, use_proxy: bool, api_host: str) -> str:
    """The base URL of a pod's port, direct (its IP) or through the API server's pod proxy."""
    if use_proxy:
        namespace, name = _segment(pod.namespace), _segment(pod.name)
        return f"{api_host.rstrip('/')}/api/v1/namespaces/{namespace}/pods/{name}:{int(pod.port)}/proxy"
    host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
    return f"http://{host}:{pod.port}"


def dashboard_outcome(command: Command, answer: DashboardAnswer) -> DashboardOutcome:
    """How a dashboard answer counts for a command (a pure policy)."""
    if 200 <= answer.status <= 299:
        return DashboardOutcome(outcome="applied", status_code=answer.status)
    text = answer.data[:2000].decode("utf-8", "replace") if answer.data else answer.error
    if isinstance(command, SubmitRayJob) and answer.status == 500 and ALREADY_SUBMITTED in text:
        return DashboardOutcome(outcome="already_done", status_code=500)
    if isinstance(command, StopRayJob) and answer.status == 404:
        return DashboardOutcome(outcome="already_done", status_code=404)
    error = f"dashboard answered {answer.status}: {text}" if answer.status else f"dashboard unreachable: {text}"
    return DashboardOutcome(outcome="failed", status_code=answer.status, error=error[:1000])


def serve_config_applied(config: dict[str, Any], details: dict[str, Any] | None) -> bool:
    """Whether a head's Serve applications (``GET /api/serve/applications/`` body) show ``config`` deployed:
    the same application names, each with every field of its config entry as sent."""
    if details is None or not isinstance(config.get("applications"), list):
        return False
    running = details.get("applications")
    if not isinstance(running, dict):
        return False
    wanted: dict[str, dict[str, Any]] = {}
    for entry in config["applications"]:
        if not isinstance(entry, dict):
            return False
        wanted[str(entry.get("name", "default"))] = entry
    if set(wanted) != set(running):
        return False
    for name, entry in wanted.items():
        app = running[name]
        deployed = app.get("deployed_app_config") if isinstance(app, dict) else None
        if not isinstance(deployed, dict) or any(deployed.get(k) != v for k, v in entry.items() if k != "name"):
            return False
    return True


def secret_path(ref: DashboardRef) -> str:
    """API path of the auth Secret a dashboard reference names."""
    return f"/api/v1/namespaces/{_segment(ref.namespace)}/secrets/{_segment(ref.auth_secret)}"


def decode_token(secret: dict[str, Any]) -> str:
    """The ``auth_token`` of a Secret object (``data`` is base64; ``stringData`` is never returned by reads).

    Raises:
        PermanentError: the Secret has no usable token.
    """
    data = secret.get("data") or {}
    raw = data.get(AUTH_TOKEN_SECRET_KEY) if isinstance(data, dict) else None
    if not isinstance(raw, str) or not raw:
        raise PermanentError(f"the auth Secret has no {AUTH_TOKEN_SECRET_KEY}")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise PermanentError(f"the auth Secret's {AUTH_TOKEN_SECRET_KEY} is not base64") from exc


class DashboardClient:
    """Calls Ray dashboards; one connection pool per client."""

    def __init__(
        self,
        api: KubeApi | None,
        *,
        use_proxy: bool,
        cluster_domain: str = "cluster.local",
        serve_put_timeout: float = SERVE_PUT_TIMEOUT,
        put_confirm_window: float = PUT_CONFIRM_WINDOW,
    ) -> None:
        self.serve_put_timeout = serve_put_timeout
        self.put_confirm_window = put_confirm_window
        self._api = api
        self._use_proxy = use_proxy and api is not None
        self._cluster_domain = cluster_domain
        self._http = api.http_client(limit=100) if self._use_proxy and api is not None else AsyncHttp(limit=100)
        self._tokens: dict[tuple[str, str], tuple[float, str]] = {}

    async def close(self) -> None:
        """Close the kept-alive connections."""
        await self._http.close()

    def base_url(self, ref: DashboardRef) -> str:
        """Where ``ref``'s dashboard answers from here."""
        host = self._api.host if self._api is not None else ""
        return dashboard_base_url(ref, use_proxy=self._use_proxy, api_host=host, cluster_domain=self._cluster_domain)

    async def _token(self, ref: DashboardRef) -> str | None:
        if not ref.auth_secret:
            return None
        if self._api is None:
            raise PermanentError("token auth needs the Kubernetes API")
        now = asyncio.get_running_loop().time()
        cached = self._tokens.get((ref.namespace, ref.auth_secret))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            response = await self._api.arequest("GET", secret_path(ref))
        except ApiError as exc:
            # The message names the Secret, never its content.
            raise PermanentError(f"cannot read auth Secret {ref.namespace}/{ref.auth_secret}: {exc}") from exc
        token = decode_token(_json.decode(response.data))
        self._tokens[(ref.namespace, ref.auth_secret)] = (now + TOKEN_TTL, token)
        return token

    def forget_token(self, ref: DashboardRef) -> None:
        """Drop a cached token (after a 401 or 403: the Secret may have been replaced)."""
        self._tokens.pop((ref.namespace, ref.auth_secret), None)

    async def request(
        self,
        ref: DashboardRef,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> DashboardAnswer:
        """Send one request to ``ref``'s dashboard; failures to connect become status 0.

        ``timeout`` replaces the default (2 s direct, 10 s through the proxy).

        Raises:
            PermanentError: the auth Secret cannot be read.
        """
        token = await self._token(ref)
        headers = {TOKEN_HEADER: f"Bearer {token}"} if token is not None else {}
        answer = await self._send(method, self.base_url(ref) + path, headers=headers, body=body, timeout=timeout)
        if answer.status in TOKEN_REJECTED and token is not None:
            self.forget_token(ref)
        return answer

    async def request_pod(self, pod: PodEndpoint, method: str, path: str) -> DashboardAnswer:
        """Send one request to a pod's port (no Ray token); failures to connect become status 0."""
        host = self._api.host if self._api is not None else ""
        url = pod_base_url(pod, use_proxy=self._use_proxy, api_host=host) + path
        return await self._send(method, url, headers={}, body=None)

    async def _send(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        body: dict[str, Any] | None,
        timeout: float | None = None,
    ) -> DashboardAnswer:
        if self._use_proxy and self._api is not None:
            headers = {**self._api.auth_headers(), **headers}
        seconds = timeout if timeout is not None else PROXY_TIMEOUT if self._use_proxy else DIRECT_TIMEOUT
        if body is not None:
            headers = {**headers, "Content-Type": JSON}
        try:
            response = await self._http.request(
                method, url, headers=headers, body=None if body is None else _encoder.encode(body), timeout=seconds
            )
            return DashboardAnswer(status=response.status, data=response.body)
        except (HttpError, TimeoutError) as exc:
            raise_if_cancelling()
            # An HttpError names the method and path, never request headers.
            return DashboardAnswer(
                status=0, error=f"{type(exc).__name__}: {exc}", timed_out=isinstance(exc, TimeoutError)
            )

    async def apply(self, command: Command) -> DashboardOutcome:
        """Run one dashboard command.

        Raises:
            PermanentError: not a dashboard command, or its auth Secret is unusable.
        """
        call = plan_dashboard_call(command)
        assert isinstance(command, SubmitRayJob | StopRayJob | PutServeConfig)
        if not isinstance(command, PutServeConfig):
            answer = await self.request(command.dashboard, call.method, call.path, call.body)
            return dashboard_outcome(command, answer)
        answer = await self.request(
            command.dashboard, call.method, call.path, call.body, timeout=self.serve_put_timeout
        )
        if answer.timed_out and await self._serve_config_landed(command):
            return DashboardOutcome(outcome="applied")
        return dashboard_outcome(command, answer)

    async def _serve_config_landed(self, command: PutServeConfig) -> bool:
        """After a timed-out PUT: whether the head shows the config deployed within the confirm window."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.put_confirm_window
        while True:
            answer = await self.request(command.dashboard, "GET", SERVE_APPLICATIONS_PATH)
            if answer.status == 200 and serve_config_applied(dict(command.config), answer.json()):
                log.info("a timed-out Serve config PUT to %s was applied", command.dashboard.service)
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(PUT_CONFIRM_INTERVAL)
