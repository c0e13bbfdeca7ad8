"""SPDY/3.1 framing, as far as Kubernetes' streaming protocols use it (moby/spdystream is the peer).

Frames are parsed from a byte buffer and built as bytes; header blocks are zlib streams primed with
SPDY/3's fixed dictionary, one compression context per direction for the whole connection. Flow
control (WINDOW_UPDATE) is read and ignored: spdystream does not enforce windows.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9
FLAG_FIN = 0x01
PROTOCOL_ERROR = 1
MAX_DATA_LENGTH = (1 << 24) - 1

_HEADER_NAMES = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status"
).split()
_HEADER_VALUES = ("200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin")
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = (
    b"".join(len(w).to_bytes(4, "big") + w.encode() for w in (*_HEADER_NAMES, *_HEADER_VALUES))
    + _DICTIONARY_TAIL.encode()
)
"""SPDY/3's header compression dictionary: length-prefixed common names and values, then raw text."""


class ProtocolError(Exception):
    """The peer sent something that is not SPDY/3."""


@dataclass(frozen=True)
class ControlFrame:
    """A control frame: its type, flags and payload (after the 8-byte frame header)."""

    type: int
    flags: int
    payload: bytes


@dataclass(frozen=True)
class DataFrame:
    """A data frame of one stream."""

    stream_id: int
    flags: int
    data: bytes


Frame = ControlFrame | DataFrame


def take_frame(buffer: bytearray) -> Frame | None:
    """Remove and return the first complete frame of ``buffer``; None when it holds no whole frame.

    Raises:
        ProtocolError: a control frame of a SPDY version other than 3.
    """
    if len(buffer) < 8:
        return None
    first, flags_length = struct.unpack_from(">II", buffer)
    length = flags_length & 0xFFFFFF
    if len(buffer) < 8 + length:
        return None
    payload = bytes(buffer[8 : 8 + length])
    del buffer[: 8 + length]
    flags = flags_length >> 24
    if first & 0x80000000:
        version = (first >> 16) & 0x7FFF
        if version != VERSION:
            raise ProtocolError(f"unsupported SPDY version {version}")
        return ControlFrame(first & 0xFFFF, flags, payload)
    return DataFrame(first, flags, payload)


def stream_id_of(frame: ControlFrame) -> int:
    """The stream id a SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS or WINDOW_UPDATE frame names."""
    if len(frame.payload) < 4:
        raise ProtocolError(f"control frame {frame.type} too short")
    return int(struct.unpack_from(">I", frame.payload)[0]) & 0x7FFFFFFF


class HeaderDecoder:
    """Decodes the header blocks one peer sends (one zlib stream for the whole connection)."""

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(zdict=DICTIONARY)

    def syn_stream(self, frame: ControlFrame) -> tuple[int, dict[str, str]]:
        """(stream id, headers with lower-case names) of a SYN_STREAM frame."""
        if len(frame.payload) < 10:
            raise ProtocolError("SYN_STREAM too short")
        return stream_id_of(frame), self._block(frame.payload[10:])

    def _block(self, compressed: bytes) -> dict[str, str]:
        try:
            raw = self._zlib.decompress(compressed)
        except zlib.error as exc:
            raise ProtocolError(f"bad header block: {exc}") from exc
        try:
            (count,) = struct.unpack_from(">I", raw)
            offset = 4
            headers: dict[str, str] = {}
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", raw, offset)
                value = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                headers[name.lower()] = value
        except (struct.error, UnicodeDecodeError) as exc:
            raise ProtocolError(f"bad header block: {exc}") from exc
        return headers


class FrameEncoder:
    """Builds the frames one side sends (its header compression context included)."""

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(zdict=DICTIONARY)

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None) -> bytes:
        """A SYN_REPLY frame accepting ``stream_id``."""
        pairs = (headers or {}).items()
        block = struct.pack(">I", len(pairs)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode() for k, v in pairs
        )
        compressed = self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
        return control(SYN_REPLY, 0, struct.pack(">I", stream_id) + compressed)


def control(frame_type: int, flags: int, payload: bytes) -> bytes:
    """A control frame."""
    return struct.pack(">HHI", 0x8000 | VERSION, frame_type, flags << 24 | len(payload)) + payload


def data(stream_id: int, payload: bytes, *, fin: bool = False) -> bytes:
    """A data frame (``payload`` at most :data:`MAX_DATA_LENGTH` bytes)."""
    return struct.pack(">II", stream_id, (FLAG_FIN if fin else 0) << 24 | len(payload)) + payload


def rst_stream(stream_id: int, status: int) -> bytes:
    """A RST_STREAM frame."""
    return control(RST_STREAM, 0, struct.pack(">II", stream_id, status))
