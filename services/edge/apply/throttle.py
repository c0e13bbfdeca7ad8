"""The applier's request rate limit (KubeRay's ``--qps``): a token bucket with a pure core.

Role: :func:`take` is the policy (given the bucket and the loop clock, how long to wait for the next
token); :class:`RateLimiter` only keeps the state and sleeps. Time comes from the event loop's clock,
so the policy is testable with plain numbers.

Not here: retries after a 429 (``plan.RETRY_BACKOFF``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.edge import pipeline_metrics


@dataclass(frozen=True)
class Bucket:
    """Tokens available at ``stamp`` (loop seconds)."""

    tokens: float
    stamp: float


def take(bucket: Bucket, now: float, *, rate: float, burst: float) -> tuple[Bucket, float]:
    """Take one token: the new bucket and the seconds to wait before the request may go.

    The bucket refills at ``rate`` tokens per second up to ``burst``; a request that finds it empty
    reserves the next token (the bucket goes negative), so concurrent callers queue fairly.
    """
    tokens = min(burst, bucket.tokens + max(0.0, now - bucket.stamp) * rate) - 1.0
    wait = 0.0 if tokens >= 0 else -tokens / rate
    return Bucket(tokens=tokens, stamp=now), wait


class RateLimiter:
    """``await limiter.acquire()`` before each API request; ``rate <= 0`` disables the limit."""

    def __init__(self, rate: float, *, burst: float | None = None) -> None:
        self._rate = rate
        self._burst = burst if burst is not None else max(1.0, rate)
        self._bucket = Bucket(tokens=self._burst, stamp=0.0)
        self._started = False

    async def acquire(self) -> None:
        """Wait for a token."""
        if self._rate <= 0:
            return
        now = asyncio.get_running_loop().time()
        if not self._started:
            self._bucket = Bucket(tokens=self._burst, stamp=now)
            self._started = True
        self._bucket, wait = take(self._bucket, now, rate=self._rate, burst=self._burst)
        pipeline_metrics.rate_limited(wait)
        if wait > 0:
            await asyncio.sleep(wait)
