"""The service and pod proxy subresources: ``/api/v1/namespaces/<ns>/(services|pods)/<name>[:<port>]/proxy/...``.

The target named in the URL (``name``, ``name:port`` or ``scheme:name:port``) is resolved by the
registered :class:`~kubesim.hooks.ProxyResolver` objects (the dashboard simulator is one) to a local
base URL; the request's method, query, body and end-to-end headers (``x-ray-authorization``
included) are forwarded and the answer relayed. With no resolver answering, the reply is the real
server's 503 ``no endpoints available for service "x"``. A resolver that is also a
:class:`~kubesim.hooks.RequestAdapter` may change the body first (a real Ray head's Serve config PUT gets
that head's own Serve port).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

import aiohttp
from aiohttp import web

from kubesim.errors import ApiError, page_not_found, service_unavailable
from kubesim.hooks import ProxyResolver, RequestAdapter
from kubesim.resources import ResourceInfo
from kubesim.store import ObjectStore

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "authorization",
    }
)


def split_target(spec: str) -> tuple[str, str]:
    """``[scheme:]name[:port]`` → (name, port); port is "" when absent."""
    parts = spec.split(":")
    if len(parts) == 3:
        return parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], parts[1]
    return parts[0], ""


class Proxy:
    """Forwards proxy subresource requests to resolver-provided backends."""

    def __init__(self, *, store: ObjectStore, resolvers: Sequence[ProxyResolver]) -> None:
        self._store = store
        self._resolvers = list(resolvers)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        """Release the outgoing connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _base_url(self, info: ResourceInfo, namespace: str, name: str, port: str) -> tuple[str, ProxyResolver]:
        obj = self._store.find(info.storage_key, namespace, name)
        if obj is None:
            raise ApiError(
                404, "NotFound", f'{info.plural} "{name}" not found', details={"name": name, "kind": info.plural}
            )
        if info.plural == "services" and not port:
            ports = (obj.get("spec") or {}).get("ports") or []
            if ports:
                port = str(ports[0].get("name") or ports[0].get("port", ""))
        for resolver in self._resolvers:
            if info.plural == "services":
                url = resolver.resolve_service(namespace, name, port)
            else:
                url = resolver.resolve_pod(namespace, name, port)
            if url:
                return url.rstrip("/"), resolver
        if info.plural == "services":
            raise service_unavailable(f'no endpoints available for service "{name}"')
        raise service_unavailable(f'error trying to reach service: no backend for pod "{name}" port "{port}"')

    async def forward(
        self, request: web.Request, info: ResourceInfo, namespace: str, spec: str, rest: str
    ) -> web.Response:
        """Relay one request; ``rest`` is the path after ``/proxy``."""
        if info.plural not in ("services", "pods"):
            raise page_not_found()
        name, port = split_target(spec)
        base, resolver = self._base_url(info, namespace, name, port)
        # ``rest`` is decoded (clients escape '/' in it as %2F); re-escape it as a path, as Go's proxy does.
        url = base + quote(rest or "/", safe="/:@!$&'()*+,;=-._~")
        if request.query_string:
            url += "?" + request.query_string
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        if isinstance(resolver, RequestAdapter):
            body = resolver.adapt_request(base, request.method, rest or "/", body)
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        try:
            async with self._session.request(
                request.method, url, headers=headers, data=body or None, allow_redirects=False
            ) as upstream:
                payload = await upstream.read()
                out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(body=payload, status=upstream.status, headers=out_headers)
        except aiohttp.ClientError as exc:
            raise service_unavailable(f"error trying to reach service: {exc}") from exc
