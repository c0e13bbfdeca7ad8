"""Limits on JSON that crosses a trust boundary (the bus, the API server, a dashboard), checked on the
bytes before any decoder or recursive walker sees them.

msgspec decodes recursively and raises ``RecursionError`` near Python's recursion limit (1000 with
CPython's default: measured with msgspec 0.23, 950 levels decode and 1000 do not); a document a few
levels short of that decodes, and then every recursive walk over it (sanitizing, merging, copying,
encoding) fails wherever it runs. The depth check needs no recursion: it drops escapes and strings
(C-speed byte operations), keeps the brackets, and takes the deepest running count of them (bench/
codec_bench.py measures it). Kubernetes objects, Serve configs and dashboard answers nest a few dozen
levels at most.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Final

MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
"""Largest JSON document accepted: the NATS ``max_payload`` of ``deploy/`` (and so of any message)."""
MAX_NESTING: Final = 100
"""Deepest nesting of arrays and objects accepted."""

_NOT_STRUCTURE: Final = bytes(range(256)).translate(None, b'[]{}"')
_TOKEN: Final = re.compile(rb'[\[\]{}"\\]')
_STEP: Final = tuple(1 if byte in b"[{" else -1 for byte in range(256))


class TooComplex(ValueError):
    """JSON refused before decoding: larger than :data:`MAX_MESSAGE_BYTES` or nested deeper than
    :data:`MAX_NESTING`."""


def nesting_depth(data: bytes, limit: int = MAX_NESTING) -> int | None:
    """The nesting depth of the JSON document ``data`` (0 for a scalar); None when it exceeds ``limit``.
    (Brackets that do not pair are left to the decoder: they nest no deeper than this says.)"""
    # Escaped backslashes first, then escaped quotes: what is left of '"' delimits strings. Two quotes
    # side by side (a string without brackets, or the end of one string and the start of the next) go
    # first: only strings holding brackets are left to split out, and most documents have none.
    brackets = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    brackets = brackets.replace(b'""', b"")
    if b'"' in brackets:
        brackets = b"".join(brackets.split(b'"')[::2])
    depth = max(accumulate(_STEP[byte] for byte in brackets), default=0)
    return depth if depth <= limit else None


def check_bounds(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES, max_nesting: int = MAX_NESTING) -> None:
    """Refuse ``data`` when it is too large or too deep to be decoded safely.

    Raises:
        TooComplex: with the reason.
    """
    if len(data) > max_bytes:
        raise TooComplex(f"{len(data)} bytes, more than the {max_bytes} accepted")
    # No deeper than it has opening brackets (counted at C speed): most messages need no more.
    if data.count(b"[") + data.count(b"{") > max_nesting and nesting_depth(data, max_nesting) is None:
        raise TooComplex(f"nested deeper than {max_nesting} levels")


def truncate_nesting(data: bytes, limit: int = MAX_NESTING, *, marker: bytes = b"null") -> bytes:
    """``data`` with every array or object deeper than ``limit`` replaced by ``marker`` (a JSON value);
    the rest of the document unchanged, so its shallow parts (an object's metadata) can be decoded to
    say which object was refused. Slow (a Python step per bracket and quote): only for documents
    already refused."""
    out: list[bytes] = []
    depth = 0
    copied = 0
    cut_at = -1
    in_string = False
    escaped_until = -1
    for match in _TOKEN.finditer(data):
        at = match.start()
        if at < escaped_until:
            continue
        token = match.group()
        if token == b"\\":
            escaped_until = at + 2
        elif token == b'"':
            in_string = not in_string
        elif in_string:
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth == limit + 1:
                cut_at = at
        elif depth > 0:
            depth -= 1
            if depth == limit and cut_at >= 0:
                out.append(data[copied:cut_at] + marker)
                copied = at + 1
                cut_at = -1
    out.append(data[copied:] if cut_at < 0 else data[copied:cut_at] + marker)
    return b"".join(out)
