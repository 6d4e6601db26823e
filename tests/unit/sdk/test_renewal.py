"""The pure renewal decisions: what is transient, how long to back off, when a lease is lost."""

from __future__ import annotations

import asyncio
import threading

import pytest

import volcano
from tests.unit.sdk.support import EXPIRES, TOKEN
from volcano._clock import SYSTEM_CLOCK
from volcano._renewal import Timeline, backoff, is_transient


def lease(ttl: float = 30.0) -> volcano.LockLease:
    return volcano.LockLease(
        key="k", owner_token=TOKEN, fencing_token=7, expires_at=EXPIRES, ttl_seconds=ttl
    )


def status(code: int) -> volcano.APIStatusError:
    return volcano._exceptions.status_error(code, code=None, message="m", request_id=None)


class Losses:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


class TestIsTransient:
    @pytest.mark.parametrize("code", [500, 502, 503, 504, 429, 408, 200, 302])
    def test_transient_statuses(self, code: int) -> None:
        """5xx, 429, 408 and odd non-error answers may succeed if tried again."""
        assert is_transient(status(code))

    @pytest.mark.parametrize("code", [400, 401, 403, 404, 405, 409, 413, 422, 418])
    def test_refusals(self, code: int) -> None:
        """Other 4xx answers are refusals: retrying will not help."""
        assert not is_transient(status(code))

    def test_transport_failures_are_transient(self) -> None:
        """Connection failures and timeouts are transient; other errors are not."""
        assert is_transient(volcano.APIConnectionError("x"))
        assert is_transient(volcano.APITimeoutError("x"))
        assert not is_transient(volcano.ClientClosedError("x"))
        assert not is_transient(ValueError("x"))


class TestBackoff:
    def test_doubles_up_to_the_cap(self) -> None:
        """Waits double from 0.1 s and stop growing at 2 s."""
        assert [backoff(n, 3600) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]

    def test_never_more_than_a_tenth_of_the_ttl(self) -> None:
        """Short leases retry faster: no wait exceeds a tenth of the ttl."""
        assert backoff(5, 0.5) == pytest.approx(0.05)


class TestTimeline:
    def test_schedule_from_sent_at(self) -> None:
        """Deadline is sent_at + ttl; the first attempt is a third of the way there."""
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=Losses())
        assert timeline.deadline == 130.0
        assert timeline.next_attempt_at == 110.0

    def test_attempt_timeout_is_bounded_by_time_left(self) -> None:
        """An attempt waits at most min(timeout, deadline - now); none at the deadline."""
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=Losses())
        assert timeline.begin_attempt(110.0) == 10.0
        assert timeline.begin_attempt(125.0) == 5.0
        assert timeline.begin_attempt(130.0) is None
        assert isinstance(timeline.lost_reason, volcano.LockLostError)

    def test_success_moves_the_deadline(self) -> None:
        """A renewal sent at t gives deadline t + ttl and next attempt t + ttl/3."""
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=Losses())
        renewed = lease(ttl=60.0)
        assert timeline.succeeded(renewed, 110.0) == 130.0
        assert timeline.deadline == 170.0
        assert timeline.lease is renewed

    def test_failures_back_off_but_not_past_the_deadline(self) -> None:
        """Failed attempts are retried after a backoff, at the latest at the deadline."""
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=Losses())
        error = volcano.APITimeoutError("slow")
        assert timeline.failed(error, 110.0) == pytest.approx(110.1)
        assert timeline.failed(error, 129.95) == 130.0
        assert not timeline.lost(129.99)
        assert timeline.lost(130.0)
        assert timeline.lost_reason is not None
        assert timeline.lost_reason.__cause__ is error

    def test_refusal_loses_at_once_and_only_once(self) -> None:
        """A refusal marks the lease lost immediately; on_lost is called exactly once."""
        losses = Losses()
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=losses)
        refusal = status(409)
        assert timeline.failed(refusal, 110.0) is None
        assert timeline.lost(110.0)
        assert timeline.lost_reason is refusal
        timeline.lose(volcano.ClientClosedError("later"))
        assert timeline.lost(200.0)
        assert timeline.lost_reason is refusal
        assert losses.count == 1

    def test_late_success_does_not_revive(self) -> None:
        """A renewal answer arriving after the lease was lost is ignored."""
        timeline = Timeline(lease(), 100.0, timeout=10.0, on_lost=Losses())
        assert timeline.lost(131.0)
        assert timeline.succeeded(lease(), 110.0) is None
        assert timeline.lost(131.0)
        assert timeline.deadline == 130.0


class TestSystemClock:
    def test_real_clock(self) -> None:
        """The real clock is monotonic, and its waits return."""
        first = SYSTEM_CLOCK.monotonic()
        SYSTEM_CLOCK.sleep(0)
        condition = threading.Condition()
        with condition:
            SYSTEM_CLOCK.wait(condition, 0)
        asyncio.run(SYSTEM_CLOCK.async_sleep(0))
        assert SYSTEM_CLOCK.monotonic() >= first
