"""The JSON of the objects the projection holds, compressed against an object of the same kind.

Role: the projection keeps every object's JSON so that it can write the object again: under another key
when a relation changed (a RayJob starts selecting a cluster), or as its deletion when a relist no longer
lists it. Those writes are rare; holding the bytes is not: 4 to 6 KB per Pod, some 200 MB at 40,000 Pods.
Objects of one kind share most of their bytes (a RayCluster's worker Pods differ in a few names, IPs and
times), so deflate with a preset dictionary (zlib's ``zdict``), the first object of the kind this process
packed, keeps a Pod in a few hundred bytes or less for about 10 µs per change (``bench/codec_bench.py``).
Deflate's window and hash table are sized to the kind's dictionary rather than zlib's defaults: those
allocate some 256 KB per compressor, which glibc gives back to the system on each free when it lies at
the top of the heap, and the page faults that follow made a Pod's pack cost 48 µs instead of 9 (the same
output, with a window that reaches back over the dictionary and a quarter more).

Invariants: ``unpack(kind, pack(kind, raw)) == raw``; a kind's dictionary is set once and never changes
(every packed value of the kind depends on it); empty bytes pack to empty bytes.
"""

from __future__ import annotations

import zlib
from typing import Final

LEVEL: Final = 1
"""Deflate's fastest level: with a dictionary of the same kind, higher levels save tens of bytes per object
and cost a fifth more time."""
WINDOW_BITS: Final = range(9, 16)
"""Deflate's window sizes, as powers of two: of a dictionary longer than the largest (32 KiB) only its
last 32 KiB are used, so only those are kept."""
MEMORY_LEVEL: Final = 6
"""Deflate's hash table size (zlib's ``memLevel``; 8 by default): as small as does not lengthen a Pod."""


def window_bits(dictionary: bytes) -> int:
    """The smallest window that reaches back over ``dictionary`` and a quarter more (an object somewhat
    longer than the dictionary still finds its like there), at least zlib's smallest."""
    reach = len(dictionary) + len(dictionary) // 4
    return next((bits for bits in WINDOW_BITS if 1 << bits >= reach), WINDOW_BITS[-1])


class Packer:
    """Packs and unpacks objects' JSON, one dictionary per kind."""

    def __init__(self) -> None:
        self._dictionaries: dict[str, tuple[bytes, int]] = {}

    def pack(self, kind: str, raw: bytes) -> bytes:
        """``raw`` compressed with ``kind``'s dictionary (``raw`` itself becomes it when there is none yet)."""
        if not raw:
            return b""
        dictionary, bits = self._dictionaries.get(kind) or self._dictionary(kind, raw)
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, bits, MEMORY_LEVEL, zlib.Z_DEFAULT_STRATEGY, dictionary)
        return compressor.compress(raw) + compressor.flush()

    def _dictionary(self, kind: str, raw: bytes) -> tuple[bytes, int]:
        dictionary = raw[-(1 << WINDOW_BITS[-1]) :]
        found = self._dictionaries[kind] = dictionary, window_bits(dictionary)
        return found

    def unpack(self, kind: str, packed: bytes) -> bytes:
        """The bytes :meth:`pack` was given."""
        if not packed:
            return b""
        dictionary, bits = self._dictionaries[kind]
        decompressor = zlib.decompressobj(bits, zdict=dictionary)
        return decompressor.decompress(packed) + decompressor.flush()
