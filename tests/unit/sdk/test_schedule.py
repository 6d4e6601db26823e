"""The renewal loop's decisions (`Schedule`), without threads or tasks: which attempts start
when, how many at once, and what a slow one holds up (nothing but itself). Guards are acquired
at t=100 with ttl=30: renewal due at 110, at risk at 120, lost at 130."""

from __future__ import annotations

import pytest

import volcano
from tests.unit.sdk.support import EXPIRES, TOKEN
from volcano._ownership import GuardState, Ownership
from volcano._schedule import Outcome, Schedule, failed
from volcano._transport import Answer


def guard(key: str, ttl: float = 30.0) -> Ownership:
    made = Ownership(
        key, timeout=10.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
    )
    made.enter()
    made.acquired(answer(key, 100.0, ttl))
    return made


def answer(key: str, sent_at: float, ttl: float = 30.0) -> Answer[volcano.LockLease]:
    lease = volcano.LockLease(
        key=key, owner_token=TOKEN, fencing_token=1, expires_at=EXPIRES, ttl_seconds=ttl
    )
    return Answer(lease, sent_at, replayed=False)


def started(schedule: Schedule, now: float) -> list[str]:
    return [g.key for g, _ in schedule.step(now).starts]


class TestSchedule:
    def test_nothing_starts_before_it_is_due(self) -> None:
        """The loop is told to sleep until the first renewal is due, and starts it then."""
        schedule = Schedule()
        schedule.add(guard("a"))
        assert started(schedule, 105.0) == []
        assert schedule.next_wake(105.0) == 5.0
        assert started(schedule, 110.0) == ["a"]

    def test_a_slow_renewal_holds_up_only_itself(self) -> None:
        """While one guard's renewal has no answer, another's starts when due, and is renewed
        and due again, again and again."""
        schedule = Schedule()
        slow, fast = guard("slow"), guard("fast", ttl=3.0)  # fast: due every second from 101
        schedule.add(slow)
        schedule.add(fast)
        assert started(schedule, 101.0) == ["fast"]
        for second in range(102, 114):
            now = float(second)
            schedule.finish(fast, Outcome(answer=answer("fast", now - 1, 3.0)))
            schedule.step(now - 0.9)  # the answer is taken in soon after it was sent
            assert started(schedule, now) == (["slow", "fast"] if second == 110 else ["fast"])
        assert schedule.busy(slow)
        assert slow.state(113.0) is GuardState.HELD

    def test_at_most_limit_at_once_then_in_the_order_due(self) -> None:
        """With a limit of two, a third due guard waits for a slot, and gets the first."""
        schedule = Schedule(limit=2)
        first, second, third = guard("a"), guard("b"), guard("c")
        for made in (first, second, third):
            schedule.add(made)
        assert started(schedule, 110.0) == ["a", "b"]
        assert started(schedule, 111.0) == []
        schedule.finish(second, Outcome(error=volcano.APITimeoutError("slow")))
        assert schedule.next_wake(111.0) == 0.0
        assert started(schedule, 111.0) == ["c"]

    def test_moves_come_on_time_while_a_renewal_is_out(self) -> None:
        """A guard whose renewal never answers still turns at risk at 120 and lost at 130."""
        schedule = Schedule()
        made = guard("a")
        schedule.add(made)
        assert started(schedule, 110.0) == ["a"]
        assert schedule.next_wake(110.0) == 10.0
        schedule.step(120.0)
        assert made.state(120.0) is GuardState.AT_RISK
        assert made._state is GuardState.AT_RISK  # moved by the loop, not only judged
        schedule.step(130.0)
        assert made._state is GuardState.LOST
        assert schedule.next_wake(130.0) is None
        assert len(schedule) == 0

    def test_a_transient_failure_is_retried_after_the_backoff(self) -> None:
        """A failed attempt is taken in at the next step and retried 0.1 s later."""
        schedule = Schedule()
        made = guard("a")
        schedule.add(made)
        started(schedule, 110.0)
        schedule.finish(made, Outcome(error=volcano.APIConnectionError("refused")))
        assert started(schedule, 110.0) == []
        assert schedule.next_wake(110.0) == pytest.approx(0.1)
        assert started(schedule, 110.1) == ["a"]

    def test_a_refusal_loses_the_guard_and_forgets_it(self) -> None:
        """A 409 is taken in: the guard is lost and no longer served."""
        schedule = Schedule()
        made = guard("a")
        schedule.add(made)
        started(schedule, 110.0)
        refusal = volcano._exceptions.status_error(
            409, code="lease_not_held", message="m", request_id=None
        )
        schedule.finish(made, Outcome(error=refusal))
        schedule.step(110.0)
        assert made.reason(110.0) is refusal
        assert len(schedule) == 0
        assert schedule.idle()

    def test_a_bug_loses_that_guard_with_its_cause(self) -> None:
        """An unexpected exception from sending becomes a LockLostError caused by it."""
        made = guard("a")
        outcome = failed(made, ZeroDivisionError("bug"))
        assert isinstance(outcome.error, volcano.LockLostError)
        assert isinstance(outcome.error.__cause__, ZeroDivisionError)

    def test_removed_while_out(self) -> None:
        """A guard removed during its renewal stays busy until the outcome is taken in, then
        is not served again; a cancelled attempt leaves nothing under way."""
        schedule = Schedule()
        made = guard("a")
        schedule.add(made)
        started(schedule, 110.0)
        assert schedule.remove(made) is True
        assert schedule.busy(made)
        schedule.finish(made, Outcome())
        schedule.step(110.5)
        assert not schedule.busy(made)
        assert made._in_flight is None
        assert started(schedule, 200.0) == []

    def test_stop_loses_every_guard(self) -> None:
        """Stopping loses each served guard for the reason given, and remembers it."""
        schedule = Schedule()
        guards = [guard("a"), guard("b")]
        for made in guards:
            schedule.add(made)
        reason = volcano.ClientClosedError("closed")
        schedule.stop(reason)
        assert schedule.stopped is reason
        assert [made.reason(101.0) for made in guards] == [reason, reason]
        assert schedule.next_wake(101.0) is None
