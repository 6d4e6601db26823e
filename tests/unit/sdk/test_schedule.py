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
from volcano._schedule import EARLY, Batch, Outcome, Schedule
from volcano._seam import Success


def guard(key: str, ttl: float = 30.0, at: float = 100.0) -> Ownership:
    made = Ownership(
        key, timeout=10.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
    )
    made.enter()
    made.acquired(answer(key, at, ttl))
    return made


def answer(key: str, sent_at: float, ttl: float = 30.0) -> Success[volcano.LockLease]:
    lease = volcano.LockLease(
        key=key, owner_token=TOKEN, fencing_token=1, expires_at=EXPIRES, ttl_seconds=ttl
    )
    return Success(lease, sent_at, replayed=False)


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


class TestBatching:
    def test_nothing_starts_before_it_is_due(self) -> None:
        """The loop is told to sleep until the first renewal is due, and starts it then."""
        schedule = served(guard("a"))
        assert schedule.step(105.0).starts == []
        assert schedule.next_wake(105.0) == 5.0
        assert keys(schedule.step(110.0).starts) == [["a"]]

    def test_renewals_due_together_share_one_request(self) -> None:
        """Three guards due at 110, 110.03 and 110.09 go out in one batch at 110 (each due
        within EARLY); one due at 110.2 waits for its own time."""
        offsets = {"a": 0.0, "b": 0.03, "c": 0.09, "d": 0.2}
        made = [guard(key, at=100.0 + offset) for key, offset in offsets.items()]
        schedule = served(*made)
        (batch,) = schedule.step(110.0).starts
        assert [g.key for g, _ in batch.entries] == ["a", "b", "c"]
        assert batch.leases == tuple(g.lease() for g in made[:3])
        assert {r.request_id for _, r in batch.entries} == {batch.request_id}
        assert schedule.next_wake(110.0) == pytest.approx(0.2)
        assert keys(schedule.step(110.2).starts) == [["d"]]

    def test_a_short_ttl_goes_out_early_by_a_twentieth_of_it_at_most(self) -> None:
        """A 1 s lease (due at 100.333) joins a batch at most 0.05 s early: not at 100.25."""
        schedule = served(guard("short", ttl=1.0), guard("other", ttl=0.75))  # due 100.333, .25
        assert keys(schedule.step(100.25).starts) == [["other"]]
        assert keys(schedule.step(100.29).starts) == [["short"]]
        assert EARLY > 0.05

    def test_at_most_batch_size_leases_per_request(self) -> None:
        """1,200 leases due at once: requests of 500, 500 and 200, in the order they fell due."""
        made = [guard(f"k{n:04d}") for n in range(1200)]
        schedule = served(*made)
        batches = schedule.step(110.0).starts
        assert [len(b.entries) for b in batches] == [500, 500, 200]
        assert [g for b in batches for g, _ in b.entries] == made
        assert len({b.request_id for b in batches}) == 3

    def test_the_timeout_is_the_most_pressed_leases(self) -> None:
        """A batch may wait no longer than the lease in it with the least time left."""
        late = guard("late", at=98.0)
        late.renewal_failed(volcano.APITimeoutError("slow"), 108.0)  # retry at 108.1; lost at 128
        schedule = served(late, guard("fresh"))
        # fresh: lost at 130, last call at 128; late: lost at 128, last call at 126, and an
        # attempt may wait a step (2 s) at least: 2 s
        (batch,) = schedule.step(125.0).starts
        assert keys([batch]) == [["late", "fresh"]]
        assert batch.timeout == pytest.approx(2.0)

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
    def test_a_lease_refused_inside_a_batch_loses_only_its_guard(self) -> None:
        """One 409 among three results: that guard is lost; the other two are renewed, dated
        from the batch's send, and served on."""
        a, b, c = guard("a"), guard("b"), guard("c")
        schedule = served(a, b, c)
        (batch,) = schedule.step(110.0).starts
        no = refusal()
        schedule.finish(
            batch, [renewed(batch, 110.0)[0], Outcome(error=no), renewed(batch, 110.0)[2]]
        )
        schedule.step(110.5)
        assert b.reason(110.5) is no
        assert (a.state(139.9), c.state(139.9)) == (GuardState.AT_RISK, GuardState.AT_RISK)
        assert a.state(140.0) is GuardState.LOST  # deadline 110 + 30: from the batch's send
        assert len(schedule) == 2

    def test_a_transient_failure_retries_that_lease_after_its_backoff(self) -> None:
        """A 503 for one lease of a batch: that lease alone goes again 0.1 s later."""
        a, b = guard("a"), guard("b")
        schedule = served(a, b)
        (batch,) = schedule.step(110.0).starts
        unavailable = volcano._exceptions.status_error(
            503, code="unavailable", message="m", request_id=None
        )
        schedule.finish(batch, [Outcome(error=unavailable), renewed(batch, 110.0)[1]])
        assert schedule.step(110.0).starts == []
        assert schedule.next_wake(110.0) == pytest.approx(0.1)
        assert keys(schedule.step(110.1).starts) == [["a"]]

    def test_a_bug_loses_the_guards_of_that_batch_with_its_cause(self) -> None:
        """An unexpected exception from sending a batch loses its guards (only them), each
        with a LockLostError caused by it."""
        a, b, other = guard("a"), guard("b"), guard("other", at=105.0)
        schedule = served(a, b, other)
        (batch,) = schedule.step(110.0).starts
        schedule.finish(batch, batch.failed(ZeroDivisionError("bug")))
        schedule.step(110.0)
        for made in (a, b):
            reason = made.reason(110.0)
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, ZeroDivisionError)
        assert other.state(110.0) is GuardState.HELD
        assert keys(schedule.step(115.0).starts) == [["other"]]

    def test_unsent_leases_are_due_again_at_once(self) -> None:
        """A batch that never went out (the server lacks batches) leaves its leases due."""
        schedule = served(guard("a"), guard("b"))
        (batch,) = schedule.step(110.0).starts
        schedule.finish(batch, batch.unsent())
        schedule.singles()
        assert keys(schedule.step(110.0).starts) == [["a"], ["b"]]


def broken(made: Ownership, method: str) -> Ownership:
    """`made`, whose `method` raises from now on (a bug in the SDK)."""

    def raising(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError(f"bug in {method}")

    setattr(made, method, raising)
    return made


class TestContainment:
    @pytest.mark.parametrize("method", ["due", "begin_renewal", "next_wake", "lease"])
    def test_a_bug_on_one_guard_loses_it_alone(
        self, method: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An exception while the schedule works on one guard loses that guard, with a
        LockLostError caused by it, logged with its key and no token; the others are renewed
        in that very step, and again later."""
        a, bad, c = guard("a"), guard("bad"), guard("c")
        schedule = served(a, bad, c)
        broken(bad, method)
        work = schedule.step(110.0)
        assert keys(work.starts) == [["a", "c"]]
        reason = bad.reason(110.0)
        assert isinstance(reason, volcano.LockLostError)
        assert isinstance(reason.__cause__, ZeroDivisionError)
        assert len(schedule) == 2
        (batch,) = work.starts
        schedule.finish(batch, renewed(batch, 110.0))
        schedule.step(110.1)
        assert keys(schedule.step(120.0).starts) == [["a", "c"]]
        (record,) = [r for r in caplog.records if "renewal loop failed" in r.getMessage()]
        assert "bad" in record.getMessage()
        assert TOKEN not in caplog.text

    def test_a_bug_taking_an_outcome_in_loses_that_guard_alone(self) -> None:
        """An exception while taking in one lease's answer loses that guard; the other answers
        of the batch are taken in."""
        a, bad = guard("a"), guard("bad")
        schedule = served(a, bad)
        (batch,) = schedule.step(110.0).starts
        broken(bad, "renewed")
        schedule.finish(batch, renewed(batch, 110.0))
        schedule.step(110.1)
        assert isinstance(bad.reason(110.1), volcano.LockLostError)
        assert a.state(125.0) is GuardState.HELD  # renewed at 110: at risk at 130
        assert not schedule.busy(bad)
        assert len(schedule) == 1

    def test_a_bug_on_a_guard_that_left_only_forgets_it(self) -> None:
        """A guard removed while its renewal was out (a Client's exit waits for the outcome):
        a bug taking that outcome in frees the wait and leaves the guard as it was."""
        leaving = guard("leaving")
        schedule = served(leaving)
        (batch,) = schedule.step(110.0).starts
        leaving.begin_exit(110.0)
        assert schedule.remove(leaving) is True
        broken(leaving, "renewed")
        schedule.finish(batch, renewed(batch, 110.0))
        schedule.step(110.1)
        assert not schedule.busy(leaving)
        assert leaving.state(110.1) is GuardState.RELEASING
        assert schedule.idle()


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

    def test_let_go_while_out_never_takes_its_outcome_in(self) -> None:
        """A guard let go of during its batch (an AsyncClient's exit) is free at once; the
        batch's refusal of it, arriving later, is not taken in; the others' outcomes are."""
        leaving, staying = guard("leaving"), guard("staying")
        schedule = served(leaving, staying)
        (batch,) = schedule.step(110.0).starts
        assert schedule.remove(leaving, let_go=True) is False
        assert not schedule.busy(leaving)
        assert leaving._in_flight is None
        no = refusal()
        schedule.finish(batch, [Outcome(error=no), Outcome(error=no)])
        schedule.step(110.5)
        assert leaving.state(110.5) is GuardState.HELD
        assert staying.reason(110.5) is no

    def test_let_go_once_answered_but_not_yet_taken_in(self) -> None:
        """The AsyncClient's crash: a batch is answered (its outcome waits for the next step),
        then one of its guards is let go of before that step. The step takes in the others'
        outcomes, never the leaver's, and raises nothing; nothing of the leaver is kept."""
        leaving, staying = guard("leaving"), guard("staying")
        schedule = served(leaving, staying)
        (batch,) = schedule.step(110.0).starts
        schedule.finish(batch, renewed(batch, 110.2))
        assert schedule.remove(leaving, let_go=True) is False
        assert not schedule.busy(leaving)
        schedule.step(110.3)
        assert leaving.lease() is not None
        assert leaving.state(125.0) is GuardState.AT_RISK  # still the old lease: at risk at 120
        assert staying.state(125.0) is GuardState.HELD  # renewed at 110.2: at risk at 130.2
        assert schedule.idle()
        assert leaving not in schedule._let_go
        assert len(schedule) == 1

    def test_stop_loses_every_guard(self) -> None:
        """Stopping loses each served guard for the reason given, and remembers it."""
        guards = [guard("a"), guard("b")]
        schedule = served(*guards)
        reason = volcano.ClientClosedError("closed")
        schedule.stop(reason)
        assert schedule.stopped is reason
        assert [made.reason(101.0) for made in guards] == [reason, reason]
        assert schedule.next_wake(101.0) is None
