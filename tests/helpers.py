"""Test helpers shared by every tier: polling instead of sleeping, leaked tasks, and where the conformance
inputs live."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, overload

import pytest
import yaml
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schema import subjects

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent


CONFORMANCE_ENV = "RAYBUS_CONFORMANCE_DIR"


def conformance_dir() -> Path:
    """The conformance inputs as their projects publish them: ``kuberay/samples``, ``kuberay/crds`` (KubeRay's
    manifests and CRDs) and ``gateway-api`` (the Gateway API's standard-channel CRDs).

    They are other projects' files, so the repository does not carry them: they are read from
    ``$RAYBUS_CONFORMANCE_DIR``, else from the folder ``shared`` beside the checkout. Where they are missing,
    the test (or, at import, its module) is skipped with a message saying so; under CI that is a failure.
    """
    root = Path(os.environ.get(CONFORMANCE_ENV) or REPO.parent / "shared")
    if not (root / "kuberay" / "samples").is_dir() or not (root / "gateway-api").is_dir():
        message = (
            f"the conformance inputs are not at {root}: set {CONFORMANCE_ENV} to a folder holding "
            "kuberay/samples, kuberay/crds and gateway-api"
        )
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return root


async def reap_tasks(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    """Cancel and await the tasks started since ``before`` that are still running; returns them (a
    test asserts there are none)."""
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    for task in leaked:
        task.cancel()
    await asyncio.gather(*leaked, return_exceptions=True)
    return leaked


async def stored_messages(js: JetStreamContext, stream: str, subject: str = ">", *, timeout: float = 5.0) -> list[Msg]:
    """Every message of ``stream`` on ``subject`` (wildcards allowed), in stream order.

    Raises:
        TimeoutError: the stream stopped delivering before its last matching message.
    """
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True)
    found: list[Msg] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except TimeoutError:
                if found:
                    raise
                return found  # nothing matches
            found.append(msg)
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await sub.unsubscribe()


def work_consumers(partitions: int) -> list[tuple[str, str]]:
    """Every durable consumer of the pipeline as ``(stream, consumer)``: the reconcilers' and the appliers'
    partitions and the status service's."""
    found = [(subjects.EVENTS_STREAM, subjects.partition_consumer(n)) for n in range(partitions)]
    found += [(subjects.COMMANDS_STREAM, subjects.applier_consumer(n)) for n in range(partitions)]
    return [*found, (subjects.RESULTS_STREAM, subjects.STATUS_CONSUMER)]


def samples_dir() -> Path:
    """KubeRay's sample manifests."""
    return conformance_dir() / "kuberay" / "samples"


def ray_samples() -> list[tuple[str, list[dict[str, Any]]]]:
    """(file stem, its ray.io objects) of every sample manifest that has any, in file order."""
    found = []
    for path in sorted(samples_dir().glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        ray = [d for d in docs if str(d.get("apiVersion", "")).startswith("ray.io/")]
        if ray:
            found.append((path.stem, ray))
    return found


class ManualClock:
    """A monotonic clock that a test moves by hand (``clock.now += seconds``)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@overload
async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = ..., interval: float = ..., message: str = ...
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T], *, timeout: float = ..., interval: float = ..., message: str = ...
) -> T: ...


async def eventually(
    probe: Callable[[], Awaitable[T]] | Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition not met",
) -> T:
    """Poll ``probe`` until it returns a truthy value (which is returned) or raise AssertionError.

    Exceptions from the probe count as "not yet" until the timeout, when the last one is chained.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = probe()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            last_exc = None
        except AssertionError as exc:
            last_exc = exc
        except Exception as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}") from last_exc
        await asyncio.sleep(interval)


def eventually_sync(
    probe: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, message: str = "condition not met"
) -> T:
    """Blocking variant of :func:`eventually` for synchronous tests."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
            last_exc = None
        except Exception as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}") from last_exc
        time.sleep(interval)
