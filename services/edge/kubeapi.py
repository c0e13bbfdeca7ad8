"""The adapter to the API server: raw requests with the connection's credentials and TLS settings.

Role: the one place the edge sends HTTP to the API server. It loads the configuration (kubeconfig,
in-cluster, default: :mod:`kubeaccess.configuration`), sends planned requests with its authentication and
TLS settings, turns failures into :class:`calls.ApiError` (with the parsed ``Status``; connection problems
get status 0), opens streaming watch responses, lists served resources (discovery) and hands the API
server's credentials to the dashboard client for the service proxy.

Invariants: the blocking calls (:meth:`KubeApi.request`, the informers' lists and watches, each on a thread
of its own) go on a urllib3 pool; async callers (:meth:`KubeApi.arequest`: the applier,
the prober, the election) send on the event loop (:mod:`kubeaccess.asynchttp`) with the same URL, auth
headers and TLS settings, so no request waits for a thread and hands its answer back across threads.
Bodies are encoded and decoded with msgspec.
Credentials are never logged: errors carry the path, never headers.

Not here: what to request (``apply.plan``, ``informer``) or any retry (callers decide with
``apply.plan.RETRY_BACKOFF``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict, Unpack

import msgspec
import urllib3

from kubeaccess import configuration as access
from kubeaccess import transport
from kubeaccess.asynchttp import AsyncHttp, HttpError
from kubeaccess.credentials import CredentialError
from services.edge.calls import JSON, ApiCall, ApiError
from services.runtime.errors import PermanentError

log = logging.getLogger(__name__)

_status_decoder: Final[msgspec.json.Decoder[dict[str, Any]]] = msgspec.json.Decoder(dict[str, Any])
_encoder: Final = msgspec.json.Encoder()
DEFAULT_TIMEOUT: Final = 30.0
"""Seconds for one ordinary API request."""


@dataclass(frozen=True)
class Response:
    """A successful answer: status code and the body bytes."""

    status: int
    data: bytes


class RequestOptions(TypedDict, total=False):
    """What :meth:`KubeApi.request` and :meth:`KubeApi.arequest` take besides method and path.

    Attributes:
        query: query parameters, in order (default none).
        body: JSON-serialisable body, or bytes sent as they are (default none).
        content_type: the body's content type (default JSON).
        timeout: seconds for the whole request (default :data:`DEFAULT_TIMEOUT`).
    """

    query: Sequence[tuple[str, str]]
    body: Any
    content_type: str
    timeout: float


@dataclass(frozen=True)
class _Prepared:
    """A request ready to send: what the blocking and the async side both send."""

    method: str
    path: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    timeout: float

    def unreachable(self, detail: object) -> ApiError:
        """The error of a request that got no answer (status 0); names method and path, never headers."""
        return ApiError(0, "ConnectionError", f"{self.method} {self.path}: {detail}")


def load_configuration(kubeconfig: str | None) -> access.Configuration:
    """The client configuration: ``kubeconfig`` if given, else in-cluster, else ``~/.kube/config``.

    Raises:
        PermanentError: no usable configuration.
    """
    try:
        return access.load(kubeconfig)
    except access.LOAD_ERRORS as exc:
        raise PermanentError(f"no Kubernetes configuration: {exc}") from exc


def _error_from_body(status: int, reason: str, data: bytes, raw_retry: str | None) -> ApiError:
    message = ""
    status_reason = reason
    try:
        body = _status_decoder.decode(data) if data else {}
    except msgspec.DecodeError:
        body = {}
        message = data[:500].decode("utf-8", "replace")
    if isinstance(body, dict):
        message = str(body.get("message") or message)
        status_reason = str(body.get("reason") or reason)
    retry_after: float | None = None
    if raw_retry:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    return ApiError(status, status_reason, message, retry_after=retry_after)


def _answer(status: int, reason: str | None, data: bytes | None, retry_after: str | None) -> Response:
    """The answer of a request that got one: a :class:`Response` for a 2xx, else the :class:`ApiError`
    (``retry_after``: the answer's ``Retry-After`` header)."""
    if not 200 <= status <= 299:
        raise _error_from_body(status, str(reason or ""), data or b"", retry_after)
    return Response(status=status, data=data or b"")


class KubeApi:
    """Raw access to the API server with the configuration's auth and TLS."""

    def __init__(self, configuration: access.Configuration, *, concurrency: int = 16, watches: int = 32) -> None:
        self.configuration = configuration
        # The blocking side (informers' lists and watches, each on a thread of its own) keeps one pooled
        # connection per watch and a few for lists; urllib3 would otherwise open and discard extra
        # connections ("Connection pool is full").
        self._ssl = access.ssl_context(configuration)
        self._pool = transport.blocking_pool(configuration, self._ssl, maxsize=watches + 4)
        self._http = self.http_client(limit=concurrency)
        self._closed = False
        """Set by :meth:`close`: a request after it would open a connection pool (or session) nothing closes."""

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return access.base_url(self.configuration)

    async def close(self) -> None:
        """Release connections; every request after this fails (status 0)."""
        self._closed = True
        await self._http.close()
        self._pool.clear()

    def _prepare(self, method: str, path: str, options: RequestOptions) -> _Prepared:
        if self._closed:
            raise ApiError(0, "ConnectionError", f"{method} {path}: the client is closed")
        body = options.get("body")
        try:
            headers = {"Accept": JSON, **self.auth_headers()}
        except CredentialError as exc:
            raise ApiError(0, "CredentialError", f"{method} {path}: {exc}") from None
        if body is not None:
            headers["Content-Type"] = options.get("content_type", JSON)
        url = transport.request_url(self.configuration, path, options.get("query", ()))
        encoded = None if body is None else body if isinstance(body, bytes) else _encoder.encode(body)
        return _Prepared(method, path, url, headers, encoded, options.get("timeout", DEFAULT_TIMEOUT))

    def _send(self, prepared: _Prepared, timeout: float | tuple[float, float]) -> urllib3.BaseHTTPResponse:
        if isinstance(timeout, tuple):
            limit = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            limit = urllib3.Timeout(total=timeout)
        return self._pool.request(
            prepared.method,
            prepared.url,
            body=prepared.body,
            headers=prepared.headers,
            timeout=limit,
            preload_content=False,
        )

    def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Response:
        """Send one request and read the whole answer (blocking).

        Raises:
            ApiError: a non-2xx answer (with the parsed Status) or no answer (status 0).
        """
        prepared = self._prepare(method, path, options)
        try:
            raw = self._send(prepared, prepared.timeout)
            data = raw.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise prepared.unreachable(exc) from exc
        return _answer(raw.status, raw.reason, data, raw.headers.get("Retry-After"))

    def execute(self, call: ApiCall, *, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """Send a planned call (blocking)."""
        return self.request(
            call.method, call.path, query=call.query, body=call.body, content_type=call.content_type, timeout=timeout
        )

    async def arequest(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Response:
        """:meth:`request` without blocking: on the event loop, at most ``concurrency`` at once.

        Raises:
            ApiError: a non-2xx answer (with the parsed Status) or no answer (status 0).
        """
        prepared = self._prepare(method, path, options)
        try:
            raw = await self._http.request(
                prepared.method, prepared.url, headers=prepared.headers, body=prepared.body, timeout=prepared.timeout
            )
        except TimeoutError as exc:
            raise prepared.unreachable(f"no answer within {prepared.timeout:g}s") from exc
        except HttpError as exc:
            raise prepared.unreachable(exc) from exc
        return _answer(raw.status, raw.reason, raw.body, raw.header("Retry-After"))

    async def aexecute(self, call: ApiCall, *, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """:meth:`execute` without blocking (:meth:`arequest`)."""
        return await self.arequest(
            call.method, call.path, query=call.query, body=call.body, content_type=call.content_type, timeout=timeout
        )

    def open_stream(
        self, path: str, *, query: Sequence[tuple[str, str]], connect_timeout: float, read_timeout: float
    ) -> urllib3.BaseHTTPResponse:
        """Open a streaming GET (a watch); the caller reads lines and closes it.

        Raises:
            ApiError: a non-2xx answer or no answer.
        """
        prepared = self._prepare("GET", path, {"query": query})
        try:
            response = self._send(prepared, (connect_timeout, read_timeout))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise prepared.unreachable(exc) from exc
        if not 200 <= response.status <= 299:
            data = response.data or b""
            response.release_conn()
            retry_after = response.headers.get("Retry-After")
            raise _error_from_body(response.status, str(response.reason or ""), data, retry_after)
        return response

    def served_resources(self) -> set[tuple[str, str, str]]:
        """Discovery: every served ``(group, version, plural)`` (subresources excluded).

        Raises:
            ApiError: discovery failed.
        """
        served: set[tuple[str, str, str]] = set()
        core = _status_decoder.decode(self.request("GET", "/api/v1").data)
        for item in core.get("resources", ()):
            if "/" not in item.get("name", "/"):
                served.add(("", "v1", item["name"]))
        groups = _status_decoder.decode(self.request("GET", "/apis").data)
        for group in groups.get("groups", ()):
            for version in group.get("versions", ()):
                group_version = version.get("groupVersion", "")
                try:
                    listing = _status_decoder.decode(self.request("GET", f"/apis/{group_version}").data)
                except ApiError as exc:
                    if exc.status in (404, 503):  # an aggregated API that is down: not ours to fail on
                        log.warning("discovery of %s failed: %s", group_version, exc)
                        continue
                    raise
                name, _, ver = group_version.rpartition("/")
                for item in listing.get("resources", ()):
                    if "/" not in item.get("name", "/"):
                        served.add((name, ver, item["name"]))
        return served

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header to send now (:func:`kubeaccess.configuration.auth_headers`).

        Raises:
            CredentialError: the credential source failed.
        """
        return access.auth_headers(self.configuration)

    def http_client(self, *, limit: int) -> AsyncHttp:
        """An async HTTP client with this connection's TLS settings (its context and server name), for
        requests to the API server that are not API calls (the dashboard's service proxy)."""
        return AsyncHttp(context=self._ssl, server_hostname=self.configuration.tls_server_name, limit=limit)
