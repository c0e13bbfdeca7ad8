"""How requests reach an API server: the URL of a path and query, and the blocking side's connection pool.

A client builds its TLS context once (:func:`kubeaccess.configuration.ssl_context`) and hands it to both
sides, so the blocking (urllib3) and the async (:mod:`kubeaccess.asynchttp`) side trust and present the same
certificates.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from urllib.parse import quote, urlencode

import urllib3

from kubeaccess.configuration import Configuration, base_url


def request_url(configuration: Configuration, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
    """The URL of ``path`` (already escaped) with ``query`` encoded as the official client encodes it."""
    url = base_url(configuration) + path
    return f"{url}?{urlencode(query, quote_via=quote)}" if query else url


def blocking_pool(configuration: Configuration, context: ssl.SSLContext | None, maxsize: int) -> urllib3.PoolManager:
    """A urllib3 pool for the blocking side with the client's TLS ``context`` (None: plain HTTP), keeping up
    to ``maxsize`` connections to the server."""
    if context is None:
        return urllib3.PoolManager(maxsize=maxsize)
    return urllib3.PoolManager(
        maxsize=maxsize,
        ssl_context=context,
        cert_reqs="CERT_REQUIRED" if configuration.verify else "CERT_NONE",
        assert_hostname=configuration.tls_server_name if configuration.verify else False,
        server_hostname=configuration.tls_server_name,
    )
