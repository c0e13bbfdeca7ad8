"""What the per-kind end-to-end drivers share (``rayjobs.JobDriver``, ``rayservices.ServiceDriver``).

:class:`ObjectDriver` holds one custom object's body, pipeline and namespace, and waits on its status or
on the rows the status API has recorded for it; a subclass says how its kind's status is read.
``status_api`` reads the pipeline's history API.

Not here: creating, patching or inspecting the object's children (each kind's driver does that).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from schema.keys import ReconcileKey
from tests.e2e.pipeline import Pipeline
from tests.helpers import eventually

Rows = list[dict[str, Any]]


def status_api(p: Pipeline, path: str) -> Any:
    """GET a path of the pipeline's status API (JSON)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{p.settings.status.http_port}{path}", timeout=5) as response:
        return json.loads(response.read())


class ObjectDriver(ABC):
    """One custom object in a namespace of its own (``body``'s namespace is set to it)."""

    def __init__(self, p: Pipeline, body: dict[str, Any], namespace: str) -> None:
        self.p = p
        self.body = body
        self.namespace = namespace
        self.name = str(body["metadata"]["name"])
        body["metadata"]["namespace"] = namespace

    @abstractmethod
    async def status(self) -> dict[str, Any]:
        """The object's status ({} before the first status write)."""

    async def wait(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, *, timeout: float = 60
    ) -> dict[str, Any]:
        """The status once ``predicate`` holds for it; fails at once if a pipeline process died, and with
        the last status read if it never held."""
        last: list[dict[str, Any]] = []

        async def probe() -> dict[str, Any] | None:
            self.p.check()
            status = await self.status()
            last[:] = [status]
            return status if predicate(status) else None

        try:
            found: dict[str, Any] | None = await eventually(probe, timeout=timeout, message=f"{self.name} never {what}")
        except AssertionError as exc:
            seen = json.dumps(last[0], sort_keys=True) if last else "none read"
            key = ReconcileKey(kind=self.body["kind"], namespace=self.namespace, name=self.name)
            trail = await self.p.trail(key)
            raise AssertionError(f"{exc}; its last status: {seen}; its bus trail:\n{trail}") from exc.__cause__
        assert found is not None
        return found

    async def settled_rows(self, path: str, field: str, until: Callable[[Rows], bool], what: str) -> Rows:
        """The rows under ``field`` of a status API ``path`` once ``until`` holds for them (the status
        service persists a transition or an audit row a moment after the applier confirmed it)."""

        def probe() -> Rows | None:
            rows: Rows = status_api(self.p, path)[field]
            return rows if until(rows) else None

        async def probe_async() -> Rows | None:
            return await asyncio.to_thread(probe)

        found: Rows | None = await eventually(probe_async, message=f"{self.name}'s {what} never settled")
        assert found is not None
        return found
