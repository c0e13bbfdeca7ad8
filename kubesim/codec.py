"""JSON encoding and cheap deep copies for kubesim's in-memory objects.

Objects are plain JSON-compatible dicts. A msgspec JSON round trip is several times faster than
``copy.deepcopy`` for the nested dicts Kubernetes objects are, so every copy handed out of the store
goes through :func:`clone`. Nothing here knows about Kubernetes.
"""

from __future__ import annotations

from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class DecodeError(ValueError):
    """The bytes were not valid JSON."""


def encode(value: object) -> bytes:
    """Serialise a JSON-compatible value."""
    return _encoder.encode(value)


def decode(data: bytes | str) -> Any:
    """Parse JSON; raises :class:`DecodeError` on malformed input."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(str(exc)) from exc


def clone(value: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of a JSON-compatible dict."""
    copied: dict[str, Any] = _decoder.decode(_encoder.encode(value))
    return copied
