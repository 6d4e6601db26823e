"""The renewal engine's decisions (`Schedule`), without threads or tasks, on a virtual clock (the
time is an argument): which renewals go out together, when, how many requests at once, what a
slow batch holds up (only the leases it carries), and how each lease's outcome in a batch is its
own. Guards are acquired at t=100 with ttl=30: renewal due at 110, at risk at 120, lost at 130."""

from __future__ import annotations

import itertools

import pytest

import volcano
from tests.unit.sdk.support import EXPIRES, TOKEN
from volcano._ownership import GuardState, Ownership
from volcano._schedule import Batch, Outcome, Schedule
from volcano._seam import Answer


def guard(key: str, ttl: float = 30.0, at: float = 100.0) -> Ownership:
    made = Ownership(
        key, timeout=10.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
    )
    made.enter()
    made.acquired(answer(key, at, ttl))
    return made


def answer(key: str, sent_at: float, ttl: float = 30.0) -> Answer[volcano.LockLease]:
    lease = volcano.LockLease(
        key=key, owner_token=TOKEN, fencing_token=1, expires_at=EXPIRES, ttl_seconds=ttl
    )
    return Answer(lease, sent_at, replayed=False)


def refusal() -> volcano.APIStatusError:
    return volcano._exceptions.status_error(
        409, code="lease_not_held", message="m", request_id=None
    )


def keys(batches: list[Batch]) -> list[list[str]]:
    return [[g.key for g, _ in batch.entries] for batch in batches]


def renewed(batch: Batch, sent_at: float) -> list[Outcome]:
    """Every lease of `batch` renewed by an answer to the batch sent at `sent_at`."""
    return [Outcome(answer=answer(g.key, sent_at, r.lease.ttl_seconds)) for g, r in batch.entries]


def served(*guards: Ownership, **options: int) -> Schedule:
    ids = (f"request-{n}" for n in itertools.count())
    schedule = Schedule(**options, new_id=lambda: next(ids))
    for made in guards:
        schedule.add(made)
    return schedule


class TestStarting:
    def test_nothing_starts_before_it_is_due(self) -> None:
        """The loop is told to sleep until the first renewal is due, and starts it then."""
        schedule = served(guard("a"))
        assert schedule.step(105.0).starts == []
        assert schedule.next_wake(105.0) == 5.0
        assert keys(schedule.step(110.0).starts) == [["a"]]

    def test_after_singles_one_lease_per_request(self) -> None:
        """A server without batch renewal: from then on each lease goes alone."""
        schedule = served(guard("a"), guard("b"))
        schedule.singles()
        assert keys(schedule.step(110.0).starts) == [["a"], ["b"]]


class TestBoundedInFlight:
    def test_a_slow_batch_holds_up_only_its_own_leases(self) -> None:
        """While one batch has no answer, another guard's renewals start when due, and are
        renewed and due again, again and again."""
        slow, fast = guard("slow", at=100.5), guard("fast", ttl=3.0)  # due 110.5; every second
        schedule = served(slow, fast)
        for second in range(101, 114):
            now = float(second)
            (batch,) = schedule.step(now).starts
            assert keys([batch]) == [["fast"]]
            schedule.finish(batch, renewed(batch, now))
            assert schedule.step(now + 0.1).starts == []  # the answer is taken in
            if second == 110:
                assert keys(schedule.step(110.5).starts) == [["slow"]]  # never answered
        assert schedule.busy(slow)
        assert (slow.state(113.5), fast.state(113.5)) == (GuardState.HELD, GuardState.HELD)

    def test_the_next_batch_starts_while_one_is_out(self) -> None:
        """A batch whose answer never comes does not keep the next due leases waiting."""
        schedule = served(guard("a"), guard("b", at=101.0))
        assert keys(schedule.step(110.0).starts) == [["a"]]
        assert keys(schedule.step(111.0).starts) == [["b"]]

    def test_at_most_limit_requests_then_in_the_order_due(self) -> None:
        """With a limit of two requests, a third batch waits for a slot, and gets the first."""
        first, second, third = guard("a"), guard("b", at=101.0), guard("c", at=102.0)
        schedule = served(first, second, third, limit=2)
        assert keys(schedule.step(110.0).starts) == [["a"]]
        (batch,) = schedule.step(111.0).starts
        assert schedule.step(112.0).starts == []
        schedule.finish(batch, [Outcome(error=volcano.APITimeoutError("slow"))])
        assert schedule.next_wake(112.0) == 0.0
        assert keys(schedule.step(112.0).starts) == [["c"]]

    def test_moves_come_on_time_while_a_renewal_is_out(self) -> None:
        """A guard whose batch never answers still turns at risk at 120 and lost at 130."""
        made = guard("a")
        schedule = served(made)
        schedule.step(110.0)
        assert schedule.next_wake(110.0) == 10.0
        schedule.step(120.0)
        assert made.state(120.0) is GuardState.AT_RISK
        assert made._state is GuardState.AT_RISK  # moved by the loop, not only judged
        schedule.step(130.0)
        assert made._state is GuardState.LOST
        assert schedule.next_wake(130.0) is None
        assert len(schedule) == 0


class TestOutcomes:
    def test_a_transient_failure_is_retried_after_the_backoff(self) -> None:
        """A failed attempt is taken in at the next step and retried 0.1 s later."""
        made = guard("a")
        schedule = served(made)
        (batch,) = schedule.step(110.0).starts
        schedule.finish(batch, [Outcome(error=volcano.APIConnectionError("refused"))])
        assert schedule.step(110.0).starts == []
        assert schedule.next_wake(110.0) == pytest.approx(0.1)
        assert keys(schedule.step(110.1).starts) == [["a"]]

    def test_a_refusal_loses_the_guard_and_forgets_it(self) -> None:
        """A 409 is taken in: the guard is lost and no longer served."""
        made = guard("a")
        schedule = served(made)
        (batch,) = schedule.step(110.0).starts
        no = refusal()
        schedule.finish(batch, [Outcome(error=no)])
        schedule.step(110.0)
        assert made.reason(110.0) is no
        assert len(schedule) == 0
        assert schedule.idle()

    def test_a_bug_loses_that_guard_with_its_cause(self) -> None:
        """An unexpected exception from sending becomes a LockLostError caused by it."""
        made = guard("a")
        schedule = served(made)
        (batch,) = schedule.step(110.0).starts
        (outcome,) = batch.failed(ZeroDivisionError("bug"))
        assert isinstance(outcome.error, volcano.LockLostError)
        assert isinstance(outcome.error.__cause__, ZeroDivisionError)


class TestLeaving:
    def test_removed_while_out_waits_for_its_outcome(self) -> None:
        """A guard removed during its renewal (a Client's exit) stays busy until its outcome is
        taken in, then is not served again."""
        made = guard("a")
        schedule = served(made)
        (batch,) = schedule.step(110.0).starts
        assert schedule.remove(made) is True
        assert schedule.busy(made)
        schedule.finish(batch, renewed(batch, 110.0))
        schedule.step(110.5)
        assert not schedule.busy(made)
        assert made.state(110.5) is GuardState.HELD
        assert made.lease() is not None
        assert schedule.step(200.0).starts == []

    def test_stop_loses_every_guard(self) -> None:
        """Stopping loses each served guard for the reason given, and remembers it."""
        guards = [guard("a"), guard("b")]
        schedule = served(*guards)
        reason = volcano.ClientClosedError("closed")
        schedule.stop(reason)
        assert schedule.stopped is reason
        assert [made.reason(101.0) for made in guards] == [reason, reason]
        assert schedule.next_wake(101.0) is None
