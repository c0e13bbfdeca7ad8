"""The applier's token bucket (pure policy)."""

from __future__ import annotations

import pytest

from services.edge.apply.throttle import Bucket, take


@pytest.mark.parametrize(
    ("bucket", "now", "tokens", "wait"),
    [
        pytest.param(Bucket(5.0, 0.0), 0.0, 4.0, 0.0, id="burst-available"),
        pytest.param(Bucket(0.0, 0.0), 0.0, -1.0, 0.1, id="empty-waits-one-interval"),
        pytest.param(Bucket(-1.0, 0.0), 0.0, -2.0, 0.2, id="queued-behind-a-reservation"),
        pytest.param(Bucket(0.0, 0.0), 0.05, -0.5, 0.05, id="partly-refilled"),
        pytest.param(Bucket(0.0, 0.0), 100.0, 4.0, 0.0, id="refill-capped-at-burst"),
    ],
)
def test_take(bucket: Bucket, now: float, tokens: float, wait: float) -> None:
    new, delay = take(bucket, now, rate=10.0, burst=5.0)
    assert new.tokens == pytest.approx(tokens)
    assert new.stamp == now
    assert delay == pytest.approx(wait)
