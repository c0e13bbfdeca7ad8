"""A connection to any Kubernetes API server, for simulators attached over HTTP (:mod:`kubesim.remote`).

:mod:`kubeaccess` loads the kubeconfig (token, client certificate, exec plugin, CA) and builds the urllib3
pool; blocking requests (:meth:`ApiConnection.request`) go on that pool, watches
(:meth:`ApiConnection.watch`) and async lists stream on an aiohttp session with the same URL, auth headers
and TLS settings. Failures become :class:`kubesim.errors.ApiError` with the HTTP code and the ``Status``
body's reason, message and details, so the simulators read them as they read the in-process store's;
a request that got no answer at all has code 0 (reason ``ConnectionError``).

Credentials never reach a log or an error: errors name the method and path only.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import aiohttp
import urllib3

from kubeaccess import configuration as access
from kubeaccess import transport
from kubeaccess.credentials import CredentialError
from kubesim import codec
from kubesim.errors import ApiError

JSON: Final = "application/json"
REQUEST_TIMEOUT: Final = 30.0
"""Seconds for one ordinary request."""
WATCH_SECONDS: Final = 300
"""``timeoutSeconds`` of one watch request; the caller resumes from the last resourceVersion afterwards."""
BLOCKING_CONNECTIONS: Final = 10
"""Connections the blocking side keeps open: as many as the simulators write at once from threads."""


def load_configuration(kubeconfig: str) -> access.Configuration:
    """The client configuration of a kubeconfig file.

    Raises:
        ValueError: the file is missing or not a usable kubeconfig.
    """
    if not kubeconfig:
        raise ValueError("cannot load kubeconfig: no file named")
    try:
        return access.load(kubeconfig)
    except access.LOAD_ERRORS as exc:
        raise ValueError(f"cannot load kubeconfig {kubeconfig}: {exc}") from exc


def _error(method: str, path: str, status: int, data: bytes) -> ApiError:
    try:
        body = codec.decode(data) if data else {}
    except codec.DecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or data[:300].decode("utf-8", "replace") or f"{method} {path}: HTTP {status}")
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    return ApiError(status, str(body.get("reason") or "Unknown"), message, details=details)


def _unreachable(method: str, path: str, exc: BaseException) -> ApiError:
    return ApiError(0, "ConnectionError", f"{method} {path}: no answer from the API server ({type(exc).__name__})")


class ApiConnection:
    """Requests to one API server with the credentials and TLS settings of a client configuration."""

    def __init__(self, configuration: access.Configuration) -> None:
        self.configuration = configuration
        self._ssl = access.ssl_context(configuration)
        self._pool = transport.blocking_pool(configuration, self._ssl, maxsize=BLOCKING_CONNECTIONS)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str) -> ApiConnection:
        """A connection configured by a kubeconfig file (see :func:`load_configuration`)."""
        return cls(load_configuration(kubeconfig))

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return access.base_url(self.configuration)

    async def close(self) -> None:
        """Release both connection pools."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._pool.clear()

    def _headers(self, method: str, path: str, content_type: str | None) -> dict[str, str]:
        try:
            headers = {"Accept": JSON, **access.auth_headers(self.configuration)}
        except CredentialError as exc:
            raise ApiError(0, "CredentialError", f"{method} {path}: {exc}") from None
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        """Send one request and return the decoded JSON answer (blocking).

        Raises:
            ApiError: a non-2xx answer, or none at all (code 0).
        """
        data = None if body is None else codec.encode(body)
        headers = self._headers(method, path, content_type if data is not None else None)
        try:
            raw = self._pool.request(
                method,
                transport.request_url(self.configuration, path, query),
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(total=timeout),
                preload_content=True,
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _unreachable(method, path, exc) from exc
        payload = raw.data or b""
        if not 200 <= raw.status <= 299:
            raise _error(method, path, raw.status, payload)
        return codec.decode(payload) if payload else None

    def _session_for_use(self) -> aiohttp.ClientSession:
        if self._session is None:
            context = self.ssl_context()
            connector = aiohttp.TCPConnector(ssl=context if context is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def arequest(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = ()) -> Any:
        """:meth:`request` without blocking the event loop (bodiless requests: lists and reads).

        Raises:
            ApiError: a non-2xx answer, or none at all (code 0).
        """
        try:
            async with self._session_for_use().request(
                method,
                transport.request_url(self.configuration, path, query),
                headers=self._headers(method, path, None),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
                server_hostname=self.configuration.tls_server_name,
            ) as raw:
                payload = await raw.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _unreachable(method, path, exc) from exc
        if not 200 <= raw.status <= 299:
            raise _error(method, path, raw.status, payload)
        return codec.decode(payload) if payload else None

    async def watch(self, path: str, *, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch from ``resource_version`` (bookmarks allowed), one decoded line each,
        until the server ends the stream.

        Raises:
            ApiError: the watch was refused, or the connection failed (code 0).
        """
        query = [
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        try:
            async with self._session_for_use().get(
                transport.request_url(self.configuration, path, query),
                headers=self._headers("GET", path, None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT),
                server_hostname=self.configuration.tls_server_name,
            ) as raw:
                if not 200 <= raw.status <= 299:
                    raise _error("GET", path, raw.status, await raw.read())
                # readline() would fail on an object larger than the reader's line limit; read by chunks.
                pending = b""
                async for chunk in raw.content.iter_any():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield codec.decode(line)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise _unreachable("GET", path, exc) from exc

    def ssl_context(self) -> ssl.SSLContext | None:
        """TLS settings for aiohttp (None: plain HTTP)."""
        return self._ssl
