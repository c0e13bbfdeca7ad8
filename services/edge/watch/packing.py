"""The JSON of the objects the projection holds, compressed against an object of the same kind.

Role: the projection keeps every object's JSON so that it can write the object again: under another key
when a relation changed (a RayJob starts selecting a cluster), or as its deletion when a relist no longer
lists it. Those writes are rare; holding the bytes is not: 4 to 6 KB per Pod, some 200 MB at 40,000 Pods.
Objects of one kind share most of their bytes (a RayCluster's worker Pods differ in a few names, IPs and
times), so deflate with a preset dictionary (zlib's ``zdict``), the first object of the kind this process
packed, keeps a Pod in a few hundred bytes or less for about 10 µs per change (``bench/codec_bench.py``).

Invariants: ``unpack(kind, pack(kind, raw)) == raw``; a kind's dictionary is set once and never changes
(every packed value of the kind depends on it); empty bytes pack to empty bytes.
"""

from __future__ import annotations

import zlib
from typing import Final

LEVEL: Final = 1
"""Deflate's fastest level: with a dictionary of the same kind, higher levels save tens of bytes per object
and cost a fifth more time."""
WINDOW: Final = 32 * 1024
"""Deflate's window: of a longer dictionary only the last 32 KiB are used, so only those are kept."""


class Packer:
    """Packs and unpacks objects' JSON, one dictionary per kind."""

    def __init__(self) -> None:
        self._dictionaries: dict[str, bytes] = {}

    def pack(self, kind: str, raw: bytes) -> bytes:
        """``raw`` compressed with ``kind``'s dictionary (``raw`` itself becomes it when there is none yet)."""
        if not raw:
            return b""
        compressor = zlib.compressobj(LEVEL, zdict=self._dictionaries.setdefault(kind, raw[-WINDOW:]))
        return compressor.compress(raw) + compressor.flush()

    def unpack(self, kind: str, packed: bytes) -> bytes:
        """The bytes :meth:`pack` was given."""
        if not packed:
            return b""
        decompressor = zlib.decompressobj(zdict=self._dictionaries[kind])
        return decompressor.decompress(packed) + decompressor.flush()
