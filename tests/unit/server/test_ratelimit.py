"""The optional per-project rate limit: a token bucket, judged by a fake clock."""

from __future__ import annotations

import pytest

from volcano_server.http._ratelimit import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestRateLimiter:
    def test_burst_then_refusal_with_whole_seconds_to_wait(self) -> None:
        """A burst of `rate` requests passes; the next one waits ceil(1/rate) s, at least 1."""
        clock = FakeClock()
        limiter = RateLimiter(2, clock=clock)
        assert [limiter.check(1), limiter.check(1)] == [None, None]
        assert limiter.check(1) == 1

    def test_tokens_refill_over_time(self) -> None:
        """After 1/rate seconds one more request passes."""
        clock = FakeClock()
        limiter = RateLimiter(0.5, burst=1, clock=clock)
        assert limiter.check(1) is None
        assert limiter.check(1) == 2  # one token every 2 s
        clock.now += 2.0
        assert limiter.check(1) is None

    def test_projects_have_separate_buckets(self) -> None:
        """One project's burst does not limit another."""
        limiter = RateLimiter(1, clock=FakeClock())
        assert limiter.check(1) is None
        assert limiter.check(1) == 1
        assert limiter.check(2) is None

    def test_bucket_never_exceeds_burst(self) -> None:
        """Idle time does not bank more than `burst` requests."""
        clock = FakeClock()
        limiter = RateLimiter(10, burst=3, clock=clock)
        clock.now += 3600
        assert [limiter.check(1) for _ in range(4)] == [None, None, None, 1]

    def test_rate_must_be_positive(self) -> None:
        """A zero or negative rate is refused."""
        with pytest.raises(ValueError, match="positive"):
            RateLimiter(0)
