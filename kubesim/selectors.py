"""Label and field selectors, parsed once per request and matched against stored objects.

Label selector grammar follows ``k8s.io/apimachinery/pkg/labels``: ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and ``!k``. Field selectors support ``=``, ``==`` and
``!=`` on the fields the real server indexes: ``metadata.name`` and ``metadata.namespace`` for every
kind plus a per-kind whitelist (pods, events, secrets, namespaces, jobs); other fields are rejected
with 400 like the real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kubesim.errors import ApiError, bad_request

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]

_FIELDS_BY_KIND: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    ("", "events"): frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    ("events.k8s.io", "events"): frozenset(
        {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason", "type"}
    ),
    ("", "secrets"): frozenset({"type"}),
    ("", "namespaces"): frozenset({"status.phase"}),
    ("batch", "jobs"): frozenset({"status.successful"}),
}

_TOKEN = re.compile(r"\s*(\(|\)|,|!=|==|=|!|[^\s(),!=]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise bad_request(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] | None = obj.get("metadata", {}).get("labels")
    return labels or {}


def _exists(key: str) -> Matcher:
    return lambda o: key in _labels(o)


def _absent(key: str) -> Matcher:
    return lambda o: key not in _labels(o)


def _equals(key: str, value: str) -> Matcher:
    return lambda o: _labels(o).get(key) == value


def _differs(key: str, value: str) -> Matcher:
    return lambda o: _labels(o).get(key) != value


def _member(key: str, values: frozenset[str]) -> Matcher:
    return lambda o: _labels(o).get(key) in values


def _not_member(key: str, values: frozenset[str]) -> Matcher:
    return lambda o: _labels(o).get(key) not in values


class Selector:
    """A compiled selector: a Matcher requiring all its parts, that also names its label ``key=value``
    requirements, so a store can look candidates up in its label index instead of testing every object."""

    __slots__ = ("_reqs", "equalities")

    def __init__(self, reqs: list[Matcher], equalities: list[tuple[str, str]] | None = None) -> None:
        self._reqs = reqs
        self.equalities: tuple[tuple[str, str], ...] = tuple(equalities or ())

    def __call__(self, obj: Obj) -> bool:
        return all(r(obj) for r in self._reqs)


def parse_label_selector(text: str | None) -> Selector | None:
    """Compile a label selector; None (or empty) matches everything and returns None.

    Raises:
        ApiError: 400 on a syntax error.
    """
    if not text or not text.strip():
        return None
    toks = _tokens(text)
    reqs: list[Matcher] = []
    equalities: list[tuple[str, str]] = []
    i = 0

    def need(index: int) -> str:
        if index >= len(toks):
            raise bad_request(f"unable to parse requirement: unexpected end of selector {text!r}")
        return toks[index]

    while i < len(toks):
        key = toks[i]
        if key == "!":
            reqs.append(_absent(need(i + 1)))
            i += 2
        else:
            op = toks[i + 1] if i + 1 < len(toks) else ","
            if op == ",":
                reqs.append(_exists(key))
                i += 1
            elif op in ("=", "==", "!="):
                value = toks[i + 2] if i + 2 < len(toks) and toks[i + 2] != "," else ""
                i += 3 if value else 2
                reqs.append(_differs(key, value) if op == "!=" else _equals(key, value))
                if op != "!=":
                    equalities.append((key, value))
            elif op in ("in", "notin"):
                if need(i + 2) != "(":
                    raise bad_request(f"unable to parse requirement: expected '(' in {text!r}")
                j = i + 3
                values: set[str] = set()
                while need(j) != ")":
                    if toks[j] != ",":
                        values.add(toks[j])
                    j += 1
                i = j + 1
                members = frozenset(values)
                reqs.append(_member(key, members) if op == "in" else _not_member(key, members))
            else:
                raise bad_request(f"unable to parse requirement: unexpected {op!r} in {text!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise bad_request(f"unable to parse requirement: expected ',' in {text!r}")
            i += 1
    return Selector(reqs, equalities)


def _field_equals(field: str, value: str) -> Matcher:
    return lambda o: field_value(o, field) == value


def _field_differs(field: str, value: str) -> Matcher:
    return lambda o: field_value(o, field) != value


def field_value(obj: Obj, path: str) -> str:
    """The string form of a dotted field of ``obj`` ("" when absent), as field selectors compare it."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict):
        # ``source`` on core events is an object; the real index uses its component.
        return str(cur.get("component", ""))
    return str(cur)


def parse_field_selector(text: str | None, storage_key: tuple[str, str], *, custom: bool = False) -> Matcher | None:
    """Compile a field selector for one resource; None (or empty) matches everything.

    Raises:
        ApiError: 400 on a syntax error or a field the resource does not index.
    """
    if not text or not text.strip():
        return None
    allowed = _FIELDS_BY_KIND.get(storage_key, frozenset())
    reqs: list[Matcher] = []
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        for op in ("!=", "==", "="):
            if op in term:
                field, _, value = term.partition(op)
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field = field.strip()
        value = value.strip()
        if field not in ("metadata.name", "metadata.namespace") and field not in allowed:
            if custom:
                # The custom-resource handler keeps the older wording.
                raise ApiError(400, "BadRequest", f"field label not supported: {field}")
            known = ", ".join(f'"{f}"' for f in ("metadata.name", "metadata.namespace", *sorted(allowed)))
            raise ApiError(400, "BadRequest", f'"{field}" is not a known field selector: only {known}')
        reqs.append(_field_differs(field, value) if op == "!=" else _field_equals(field, value))
    return Selector(reqs)


def combine(*matchers: Matcher | None) -> Matcher | None:
    """One matcher requiring all given ones (None entries ignored)."""
    real = [m for m in matchers if m is not None]
    if not real:
        return None
    if len(real) == 1:
        return real[0]
    equalities = [e for m in real if isinstance(m, Selector) for e in m.equalities]
    return Selector(real, equalities)
