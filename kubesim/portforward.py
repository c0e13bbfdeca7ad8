"""The pod port-forward subresource: ``/api/v1/namespaces/<ns>/pods/<name>/portforward``.

kubectl (1.31 and later) opens a WebSocket with the subprotocol ``SPDY/3.1+portforward.k8s.io`` and
speaks SPDY/3.1 inside its binary messages. Each forwarded connection is a pair of streams sharing a
``requestID`` header: ``streamType: error`` (the server writes why forwarding failed, then closes it)
and ``streamType: data`` (bytes relayed to and from the pod's ``port``). Where a pod port really
listens comes from the same :class:`~kubesim.hooks.ProxyResolver` objects as the pod proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from kubesim import spdy
from kubesim.errors import ApiError, bad_request
from kubesim.hooks import ProxyResolver
from kubesim.store import ObjectStore

log = logging.getLogger(__name__)

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
_CHUNK = 64 * 1024

_TargetLookup = Callable[[str, str, str], "tuple[str, int] | None"]


@dataclass
class _Forward:
    """One forwarded connection: its two streams and the TCP connection behind the data stream."""

    request_id: str
    port: str
    error_id: int | None = None
    data_id: int | None = None
    writer: asyncio.StreamWriter | None = None
    pump: asyncio.Task[None] | None = None


class PortForward:
    """Serves port-forward WebSockets for the pods of one store."""

    def __init__(self, *, store: ObjectStore, resolvers: Sequence[ProxyResolver]) -> None:
        self._store = store
        self._resolvers = list(resolvers)

    async def handle(self, request: web.Request, namespace: str, pod: str) -> web.StreamResponse:
        """Accept the WebSocket and forward until the client hangs up."""
        if self._store.find(("", "pods"), namespace, pod) is None:
            raise ApiError(404, "NotFound", f'pods "{pod}" not found', details={"name": pod, "kind": "pods"})
        ws = web.WebSocketResponse(protocols=(PROTOCOL,), autoclose=True, max_msg_size=0)
        if not ws.can_prepare(request).ok:
            raise bad_request("Upgrade request required")
        await ws.prepare(request)
        session = _Session(ws, namespace, pod, self._target)
        try:
            await session.run()
        finally:
            await session.close()
        return ws

    def _target(self, namespace: str, pod: str, port: str) -> tuple[str, int] | None:
        for resolver in self._resolvers:
            url = resolver.resolve_pod(namespace, pod, port)
            if url:
                parts = urlsplit(url)
                if parts.hostname and parts.port:
                    return parts.hostname, parts.port
        return None


class _Session:
    """One client connection: SPDY frames in, relayed bytes and replies out."""

    def __init__(self, ws: web.WebSocketResponse, namespace: str, pod: str, target: _TargetLookup) -> None:
        self._ws = ws
        self._namespace = namespace
        self._pod = pod
        self._target = target
        self._decoder = spdy.HeaderDecoder()
        self._encoder = spdy.FrameEncoder()
        self._forwards: dict[str, _Forward] = {}
        self._by_stream: dict[int, str] = {}

    async def run(self) -> None:
        buffer = bytearray()
        async for message in self._ws:
            if message.type != WSMsgType.BINARY:
                continue
            buffer.extend(message.data)
            try:
                while (frame := spdy.take_frame(buffer)) is not None:
                    if isinstance(frame, spdy.DataFrame):
                        await self._on_data(frame)
                    elif not await self._on_control(frame):
                        return
            except spdy.ProtocolError as exc:
                log.warning("port-forward to %s/%s: %s", self._namespace, self._pod, exc)
                return

    async def close(self) -> None:
        for forward in self._forwards.values():
            self._drop(forward)
        self._forwards.clear()
        await self._ws.close()

    async def _send(self, frame: bytes) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._ws.send_bytes(frame)

    async def _on_control(self, frame: spdy.ControlFrame) -> bool:
        """Handle one control frame; False ends the session."""
        if frame.type == spdy.SYN_STREAM:
            stream_id, headers = self._decoder.syn_stream(frame)
            await self._on_syn_stream(stream_id, headers)
        elif frame.type == spdy.RST_STREAM:
            key = self._by_stream.get(spdy.stream_id_of(frame))
            if key is not None and key in self._forwards:
                self._drop(self._forwards.pop(key))
        elif frame.type == spdy.PING:
            # The client's pings keep the connection alive; they are answered with the same id.
            await self._send(spdy.control(spdy.PING, 0, frame.payload))
        elif frame.type == spdy.GOAWAY:
            return False
        return True

    async def _on_syn_stream(self, stream_id: int, headers: dict[str, str]) -> None:
        kind, port, key = headers.get("streamtype"), headers.get("port", ""), headers.get("requestid", "")
        if kind not in ("error", "data") or not port.isdigit():
            await self._send(spdy.rst_stream(stream_id, spdy.PROTOCOL_ERROR))
            return
        await self._send(self._encoder.syn_reply(stream_id))
        forward = self._forwards.setdefault(key, _Forward(key, port))
        self._by_stream[stream_id] = key
        if kind == "error":
            forward.error_id = stream_id
        else:
            forward.data_id = stream_id
        if forward.error_id is not None and forward.data_id is not None and forward.pump is None:
            await self._connect(forward)

    async def _connect(self, forward: _Forward) -> None:
        target = self._target(self._namespace, self._pod, forward.port)
        reason = f"nothing listens on port {forward.port} of pod {self._namespace}/{self._pod}"
        if target is not None:
            try:
                reader, forward.writer = await asyncio.open_connection(*target)
            except OSError as exc:
                reason = f"{reason}: {exc}"
            else:
                forward.pump = asyncio.create_task(self._pump(forward, reader))
                return
        # As the kubelet does: the reason on the error stream, then both streams end.
        assert forward.error_id is not None and forward.data_id is not None
        message = f"error forwarding port {forward.port} to pod {self._pod}: {reason}"
        await self._send(spdy.data(forward.error_id, message.encode()))
        await self._finish(forward)

    async def _pump(self, forward: _Forward, reader: asyncio.StreamReader) -> None:
        assert forward.data_id is not None
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(_CHUNK):
                await self._send(spdy.data(forward.data_id, chunk))
        await self._finish(forward)

    async def _finish(self, forward: _Forward) -> None:
        assert forward.error_id is not None and forward.data_id is not None
        if self._forwards.get(forward.request_id) is forward:
            del self._forwards[forward.request_id]
        self._drop(forward)
        await self._send(spdy.data(forward.data_id, b"", fin=True))
        await self._send(spdy.data(forward.error_id, b"", fin=True))

    async def _on_data(self, frame: spdy.DataFrame) -> None:
        key = self._by_stream.get(frame.stream_id)
        forward = self._forwards.get(key) if key is not None else None
        if forward is None or frame.stream_id != forward.data_id or forward.writer is None:
            return  # the client only closes its side of the error stream; nothing else arrives there
        with contextlib.suppress(ConnectionError):
            if frame.data:
                forward.writer.write(frame.data)
                await forward.writer.drain()
            if frame.flags & spdy.FLAG_FIN and forward.writer.can_write_eof():
                forward.writer.write_eof()

    def _drop(self, forward: _Forward) -> None:
        if forward.pump is not None and forward.pump is not asyncio.current_task():
            forward.pump.cancel()
        if forward.writer is not None:
            forward.writer.close()
        for stream_id in (forward.error_id, forward.data_id):
            if stream_id is not None:
                self._by_stream.pop(stream_id, None)
