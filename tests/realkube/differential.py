"""Running one sequence of official-client calls against kubesim and a real API server, and comparing.

A scenario is a function of a :class:`Side` (one server, its client, a namespace of the same name on both);
it records what each call answered under a step name, through :meth:`Side.call` (the response body as the
server sent it, or the error's status code and Status body) or :meth:`Side.note` (a value the scenario
derived, such as the types of a watch's events). Recorded values are normalised for what legitimately
differs between two servers (uids, timestamps, resourceVersions, managedFields, generateName suffixes,
allocated cluster IPs, random volume names), then :func:`differences` lists every remaining difference by
path, for the test to hold against its table of documented ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

# Values no two servers share; replaced by a placeholder that keeps only whether they were set.
VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
# A resourceVersion inside an error message ("too old resource version: 12 (340)").
NUMBERS_IN_RV_MESSAGE = re.compile(r"resource version: \d+ \(\d+\)")
RV_IN_RECORD = re.compile(r"ResourceVersion in record \(\d+\)")
CLUSTER_IP_KEYS = ("clusterIP", "clusterIPs")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass
class Side:
    """One server of the comparison: its name, an official client, and the scenario's namespace."""

    name: str
    api: client.ApiClient
    namespace: str
    expire: Callable[[], None] = lambda: None
    """Makes every resourceVersion seen so far too old (a no-op where a small event window does it)."""
    recorded: dict[str, Any] = field(default_factory=dict)

    def call(self, step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` (an official client method) and record the body it answered, or its error.

        Returns the decoded body (a dict) on success, or the :class:`client.ApiException` on an error.
        """
        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except client.ApiException as exc:
            self.recorded[step] = {"error": exc.status, "body": _decoded(exc.body)}
            return exc
        body = _decoded(response.data)
        self.recorded[step] = body
        return body

    def note(self, step: str, value: Any) -> None:
        """Record a value the scenario derived itself."""
        self.recorded[step] = value

    def watch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """The events of a watch (``fn`` a list method), decoded line by line as the server sends them."""
        response = fn(*args, watch=True, _preload_content=False, **kwargs)
        try:
            for line in response:
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release_conn()


def _decoded(data: bytes | str | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data if isinstance(data, str) else data.decode(errors="replace")


def normalised(value: Any, *, key: str = "") -> Any:
    """``value`` with what differs between any two servers replaced by placeholders."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "managedFields":
                continue
            if k in VOLATILE_METADATA and isinstance(v, str):
                out[k] = "<set>"
            elif k in CLUSTER_IP_KEYS and v not in ("None", ["None"]):
                out[k] = "<ip>" if isinstance(v, str) else ["<ip>" for _ in v]
            elif k == "continue" and isinstance(v, str) and v:
                out[k] = "<token>"
            else:
                out[k] = normalised(v, key=k)
        _strip_generated_suffix(out)
        return out
    if isinstance(value, list):
        return [normalised(v, key=key) for v in value]
    if isinstance(value, str):
        if TIMESTAMP.match(value):
            return "<time>"
        value = NUMBERS_IN_RV_MESSAGE.sub("resource version: <rv> (<rv>)", value)
        value = RV_IN_RECORD.sub("ResourceVersion in record (<rv>)", value)
        # An object's uid quoted in a message (a precondition's all-zero uid, sent by the client, stays).
        return UUID.sub(lambda m: m.group() if m.group() == ZERO_UUID else "<uid>", value)
    return value


def _strip_generated_suffix(metadata: dict[str, Any]) -> None:
    prefix = metadata.get("generateName")
    name = metadata.get("name")
    if isinstance(prefix, str) and isinstance(name, str) and name.startswith(prefix):
        metadata["name"] = prefix + "<random>"


def differences(kubesim: Any, real: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every leaf where the two recorded values differ: (path, kubesim's value, the real server's)."""
    missing = "<absent>"
    if isinstance(kubesim, dict) and isinstance(real, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in sorted(kubesim.keys() | real.keys()):
            child = f"{path}.{key}" if path else key
            if key not in real:
                found.append((child, kubesim[key], missing))
            elif key not in kubesim:
                found.append((child, missing, real[key]))
            else:
                found += differences(kubesim[key], real[key], child)
        return found
    if isinstance(kubesim, list) and isinstance(real, list) and len(kubesim) == len(real):
        found = []
        for index, (a, b) in enumerate(zip(kubesim, real, strict=True)):
            found += differences(a, b, f"{path}[{index}]")
        return found
    return [] if kubesim == real else [(path, kubesim, real)]
