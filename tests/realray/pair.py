"""The conformance fixture's pair: the same head Pods in a kubesim with simulated Ray heads and in one with
real Ray heads, and the same call sent to both through kubesim's service proxy.

A call's answer is compared on what raybus decides on: the status code, the JSON fields, and values where
they are meaningful (a status, a message's form), never on identifiers or times.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.realray.heads import Head


@dataclass(frozen=True)
class Answer:
    """One HTTP answer (status 0: no answer)."""

    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def call(
    head: Head, method: str, port: str, path: str, *, body: Any = None, raw: bytes | None = None, token: str = ""
) -> Answer:
    """One request to a head port through kubesim's service proxy."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token:
        headers["x-ray-authorization"] = f"Bearer {token}"
    request = urllib.request.Request(head.url(port, path), data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return Answer(response.status, response.read().decode(errors="replace"))
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read().decode(errors="replace"))


@dataclass(frozen=True)
class Pair:
    """A simulated and a real head that should answer alike."""

    sim: Head
    real: Head
    token: str = ""

    def both(self, method: str, port: str, path: str, **kwargs: Any) -> tuple[Answer, Answer]:
        """The same call to the simulated and the real head."""
        kwargs.setdefault("token", self.token)
        return call(self.sim, method, port, path, **kwargs), call(self.real, method, port, path, **kwargs)
