"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over plain JSON values.

Both functions return a new document and never mutate their inputs beyond the ``target`` copy the
caller hands over. JSON patch failures (missing path, failed ``test``) raise a 422 like the real
server's ``jsonpatch`` errors. Strategic merge patch lives in :mod:`kubesim.strategic`.
"""

from __future__ import annotations

from typing import Any

from kubesim.codec import clone
from kubesim.errors import ApiError, bad_request, unprocessable


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch; ``target`` may be modified in place."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise unprocessable(f"JSON pointer {pointer!r} must start with '/'")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit():
        raise unprocessable(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise unprocessable(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, allow_end=False)]
        else:
            raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return cur


def _get(doc: Any, path: str, op: str) -> Any:
    tokens = _split(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, op, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def _remove(doc: Any, path: str, op: str) -> Any:
    tokens = _split(path)
    parent = _parent(doc, tokens, op, path)
    last = tokens[-1] if tokens else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    tokens = _split(path)
    if not tokens:
        return value
    op = "replace" if replace else "add"
    parent = _parent(doc, tokens, op, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise unprocessable(f"replace operation does not apply: doc is missing key: {path}: missing value")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 patch; ``target`` may be modified in place.

    Raises:
        ApiError: 400 when the patch is not a list of operations, 422 when an operation fails.
    """
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = target
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise unprocessable(f"{kind} operation is missing a path")
        if kind == "add":
            doc = _add(doc, path, op.get("value"), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, op.get("value"), replace=True)
        elif kind == "remove":
            _remove(doc, path, "remove")
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise unprocessable(f"{kind} operation is missing 'from'")
            value = _remove(doc, source, kind) if kind == "move" else _get(doc, source, kind)
            if kind == "copy":
                value = clone({"v": value})["v"]
            doc = _add(doc, path, value, replace=False)
        elif kind == "test":
            if _get(doc, path, "test") != op.get("value"):
                raise unprocessable(f"testing value {path} failed: test failed")
        else:
            raise ApiError(422, "Invalid", f"Unexpected kind: {kind}")
    return doc
