"""The backoff policy and the retry helper, against real awaitables and a recording sleep."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.backoff import Backoff, Sleep, interruptible, retry

NO_DELAY = Backoff(base=0.0, cap=0.0)


class Flaky:
    """Fails with the given errors in turn, then returns ``value``."""

    def __init__(self, *errors: Exception, value: str = "done") -> None:
        self.errors = list(errors)
        self.value = value
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        await asyncio.sleep(0)
        if self.errors:
            raise self.errors.pop(0)
        return self.value


class Pauses:
    """A sleep that records what it was asked to wait and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def transient(exc: Exception) -> bool:
    return isinstance(exc, ConnectionError)


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (Backoff(base=0.5, cap=30.0), [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
        (Backoff(base=0.1, cap=5.0, factor=3.0), [0.1, 0.1, 0.3, 0.9, 2.7, 5.0, 5.0, 5.0, 5.0]),
        (NO_DELAY, [0.0] * 9),
    ],
)
def test_delays_grow_by_the_factor_up_to_the_cap(policy: Backoff, delays: list[float]) -> None:
    assert [policy.delay(failures) for failures in range(9)] == pytest.approx(delays)


def test_a_delay_far_past_the_cap_is_the_cap() -> None:
    assert Backoff(base=0.5, cap=30.0).delay(100_000) == 30.0


def test_retries_bound_the_failures() -> None:
    bounded = Backoff(base=0.1, cap=1.0, retries=2)
    assert [bounded.exhausted(failures) for failures in (1, 2, 3)] == [False, False, True]
    assert not Backoff(base=0.1, cap=1.0).exhausted(10**9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": -1.0, "cap": 1.0},
        {"base": 2.0, "cap": 1.0},
        {"base": 0.1, "cap": 1.0, "factor": 0.5},
        {"base": 0.1, "cap": 1.0, "retries": -1},
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]


async def test_transient_errors_are_retried_with_the_policys_pauses() -> None:
    operation = Flaky(ConnectionError("a"), ConnectionError("b"), ConnectionError("c"))
    pauses = Pauses()
    seen: list[tuple[str, int, float]] = []
    result = await retry(
        operation,
        Backoff(base=0.1, cap=0.3),
        transient=transient,
        on_retry=lambda exc, failures, seconds: seen.append((str(exc), failures, seconds)),
        sleep=pauses,
    )
    assert result == "done"
    assert operation.calls == 4
    assert pauses.seconds == pytest.approx([0.1, 0.2, 0.3])
    assert [(text, failures) for text, failures, _ in seen] == [("a", 1), ("b", 2), ("c", 3)]


async def test_a_permanent_error_propagates_at_once() -> None:
    operation = Flaky(ValueError("bad"))
    pauses = Pauses()
    with pytest.raises(ValueError, match="bad"):
        await retry(operation, NO_DELAY, transient=transient, sleep=pauses)
    assert operation.calls == 1
    assert pauses.seconds == []


async def test_the_last_error_propagates_when_the_retries_run_out() -> None:
    operation = Flaky(*(ConnectionError(str(n)) for n in range(5)))
    with pytest.raises(ConnectionError, match="2"):
        await retry(operation, Backoff(base=0.0, cap=0.0, retries=2), transient=transient)
    assert operation.calls == 3


async def test_an_error_may_ask_for_a_longer_pause() -> None:
    pauses = Pauses()
    await retry(
        Flaky(ConnectionError("slow down"), ConnectionError("again")),
        Backoff(base=0.1, cap=1.0),
        transient=transient,
        requested=lambda exc: 0.15 if str(exc) == "slow down" else 0.0,
        sleep=pauses,
    )
    assert pauses.seconds == pytest.approx([0.15, 0.2])


async def test_give_up_ends_the_retries_after_a_pause() -> None:
    operation = Flaky(*(ConnectionError(str(n)) for n in range(5)))
    pauses = Pauses()
    with pytest.raises(ConnectionError, match="1"):
        await retry(operation, NO_DELAY, transient=transient, give_up=lambda: len(pauses.seconds) >= 2, sleep=pauses)
    assert operation.calls == 2


def signalling(sleep: Sleep, paused: asyncio.Event) -> Sleep:
    """``sleep`` that first says it is pausing."""

    async def pause(seconds: float) -> None:
        paused.set()
        await sleep(seconds)

    return pause


async def test_a_stop_request_cuts_the_pause_short_and_ends_the_retries() -> None:
    stop, paused = asyncio.Event(), asyncio.Event()
    operation = Flaky(*(ConnectionError(str(n)) for n in range(5)))
    task = asyncio.create_task(
        retry(
            operation,
            Backoff(base=3600.0, cap=3600.0),
            transient=transient,
            give_up=stop.is_set,
            sleep=signalling(interruptible(stop), paused),
        )
    )
    await paused.wait()
    stop.set()
    with pytest.raises(ConnectionError, match="0"):
        await task
    assert operation.calls == 1


async def test_cancellation_ends_a_retry_in_its_pause() -> None:
    paused = asyncio.Event()
    operation = Flaky(*(ConnectionError(str(n)) for n in range(5)))
    task = asyncio.create_task(
        retry(
            operation,
            Backoff(base=3600.0, cap=3600.0),
            transient=transient,
            sleep=signalling(asyncio.sleep, paused),
        )
    )
    await paused.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert operation.calls == 1


async def test_a_cancellation_swallowed_into_a_transient_error_is_honoured() -> None:
    """A library that turns a cancellation into its own error must not make the retry loop go on."""
    started = asyncio.Event()
    calls = 0

    async def swallowing() -> str:
        nonlocal calls
        calls += 1
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ConnectionError("cancelled underneath") from None
        return "never"

    task = asyncio.create_task(retry(swallowing, NO_DELAY, transient=transient))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == 1
