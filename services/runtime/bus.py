"""NATS connection and publishing with trace context (the only place services open a NATS connection).

Credentials come from settings and are handed to nats-py only; URLs are logged without userinfo. With
a CA file the connection is TLS and the server's certificate is verified against it (host name too).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import PubAck

from services.runtime.errors import PermanentError, RetryableError
from services.runtime.settings import NatsSettings
from services.runtime.tracing import inject_headers

log = logging.getLogger(__name__)


def redact_url(url: str) -> str:
    """A server URL without user info, safe to log."""
    parts = []
    for one in url.split(","):
        split = urlsplit(one.strip())
        netloc = split.hostname or ""
        if split.port:
            netloc = f"{netloc}:{split.port}"
        parts.append(urlunsplit((split.scheme, netloc, split.path, "", "")))
    return ",".join(parts)


async def connect(settings: NatsSettings, *, name: str) -> Client:
    """Connect to NATS with the configured credentials, retrying the first connect briefly.

    Raises:
        RetryableError: no server answered.
        PermanentError: a websocket URL in a process that goes without aiohttp (every raybus service).
    """
    servers = [u.strip() for u in settings.url.split(",")]
    if any(urlsplit(server).scheme in ("ws", "wss") for server in servers) and not _websockets():
        raise PermanentError(
            f"NATS URL {redact_url(settings.url)}: websocket URLs need aiohttp, which this process goes without; "
            "use nats:// or tls://"
        )
    options: dict[str, Any] = {
        "servers": servers,
        "name": name,
        "connect_timeout": settings.connect_timeout,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
    }
    if settings.creds_file:
        options["user_credentials"] = settings.creds_file
    if settings.user:
        options["user"] = settings.user
        options["password"] = settings.password or ""
    if settings.tls_ca_file:
        options["tls"] = ssl.create_default_context(cafile=settings.tls_ca_file)

    async def _error_cb(exc: Exception) -> None:
        log.warning("nats error: %s", exc)

    options["error_cb"] = _error_cb
    try:
        nc = await nats.connect(**options)
    except Exception as exc:  # nats-py raises several unrelated types here
        raise RetryableError(f"cannot connect to NATS at {redact_url(settings.url)}: {exc}") from exc
    log.info("connected to NATS %s (server %s)", redact_url(settings.url), nc.connected_server_version)
    return nc


def _websockets() -> bool:
    """Whether nats-py's websocket transport can run here: it needs aiohttp."""
    try:
        import aiohttp  # noqa: F401  (already loaded, or kept out of this process)
    except ImportError:
        return False
    return True


async def publish(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    *,
    msg_id: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> PubAck:
    """Publish to JetStream with the current trace context and an optional de-duplication id."""
    all_headers = dict(headers or {})
    inject_headers(all_headers)
    if msg_id:
        all_headers["Nats-Msg-Id"] = msg_id
    return await js.publish(subject, payload, headers=all_headers or None, timeout=timeout)


async def flush_sent(nc: Client, *, timeout: float = 10.0) -> None:
    """Return once the server has processed every command ``nc`` sent so far (a subscription has interest).

    ``Client.flush()`` alone does not promise this: nats-py writes the flush's PING straight to the socket,
    ahead of the commands ``subscribe()`` and ``publish()`` left in the client's pending buffer, so the PONG
    can come back before the server has seen them (a request from another connection then finds no
    responders). Handing the pending buffer to the socket first puts the PING behind them.

    Raises:
        TimeoutError: the server did not answer within ``timeout`` seconds.
    """
    async with asyncio.timeout(timeout):
        # nats-py has no public call that waits for its pending buffer to be written.
        await nc._flush_pending(force_flush=True)
        await nc.flush()


def bus_unavailable(exc: Exception) -> bool:
    """A NATS failure that a later try may not meet (no answer, a reconnect, a server restarting)."""
    return isinstance(exc, nats.errors.Error | TimeoutError)
