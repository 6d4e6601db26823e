"""LockGuard: acquisition, background renewal on one thread per client, loss, and exit.

Time is a FakeClock: `clock.advance(s)` moves it and returns once the client's renewal thread
has done everything due by then, so each test knows exactly which renewals ran. The guard is
acquired at t=100 with ttl=30: first renewal due at t=110, deadline t=130.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
import pytest

import volcano
from tests.unit.sdk.support import EXPIRES, REQUEST_ID, TOKEN, FakeApi, FakeClock, error, fail
from volcano._ownership import Ownership
from volcano._seam import Answer

if TYPE_CHECKING:
    from collections.abc import Callable


def lease() -> volcano.LockLease:
    return volcano.LockLease(
        key="k", owner_token=TOKEN, fencing_token=7, expires_at=EXPIRES, ttl_seconds=30
    )


def renewer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "volcano-renewer"]


def wait_for(predicate: Callable[[], bool]) -> None:
    """Wait until another thread makes `predicate` true (a guard against hangs, not timing)."""
    done = threading.Event()
    for _ in range(2000):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError("condition never became true")


class Gate:
    """A responder that holds a request until opened, then answers it with the default."""

    def __init__(self, fake_api: FakeApi) -> None:
        self.api = fake_api
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.done = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        assert self.opened.wait(20), "the gate was never opened"
        response = self.api.default(request)
        self.done.set()
        return response


class TestSchedule:
    def test_renews_a_third_into_each_lease(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """The first renewal comes when a third of the ttl has passed, then every third."""
        with client.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            clock.advance(9)
            assert fake_api.of("renew") == []
            clock.advance(1)
            clock.advance(9)
            clock.advance(1)
            assert fake_api.times_of("renew") == [110.0, 120.0]
            assert not guard.lost

    def test_renewals_carry_the_lease_and_fresh_request_ids(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Renewals send the lease's token, fencing token and ttl, each with a new request id."""
        with client.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID):
            clock.advance(10)
            clock.advance(10)
        renewals = fake_api.of("renew")
        assert [json.loads(r.content) for r in renewals] == [
            {"owner_token": TOKEN, "fencing_token": 7, "ttl_seconds": 30.0}
        ] * 2
        ids = [r.headers["X-Request-Id"] for r in fake_api.requests]
        assert ids[0] == REQUEST_ID
        assert len(set(ids)) == len(ids)  # acquire, 2 renewals, release: all different

    def test_lease_is_the_latest_renewal(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """guard.lease is replaced by each renewal; earlier leases stay as they were."""
        with client.locks.with_lock("k", ttl=30) as guard:
            first = guard.lease
            first_expiry = first.expires_at
            clock.advance(10)
            second = guard.lease
            assert second is not first
            assert second.expires_at > first_expiry
            assert first.expires_at == first_expiry
            assert second.owner_token == first.owner_token

    def test_each_attempt_is_bounded_by_the_time_left(
        self, make_client: Callable[..., volcano.Client], fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A renewal may not wait past the deadline: its timeout is min(timeout, time left)."""
        client = make_client(timeout=10)
        with client.locks.with_lock("k", ttl=6):  # deadline 106, first attempt at 102
            fake_api.then(fail(httpx.ConnectError("refused")))
            clock.advance(2)
            clock.advance(0.5)
        timeouts = [r.extensions["timeout"]["read"] for r in fake_api.of("renew")]
        assert timeouts == [pytest.approx(4.0), pytest.approx(3.5)]

    def test_acquisition_retries_once(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Entering retries a 503 once with the same identifiers, like acquire."""
        fake_api.then(error(503, "unavailable"))
        with client.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            assert guard.lease.owner_token == TOKEN
        first, second = fake_api.of("acquire")
        assert first.content == second.content
        assert first.headers["X-Request-Id"] == second.headers["X-Request-Id"] == REQUEST_ID


class TestTransientFailures:
    @pytest.mark.parametrize(
        "failure",
        [
            fail(httpx.ReadTimeout("slow")),
            fail(httpx.ConnectError("refused")),
            error(500, "internal"),
            error(503, "unavailable"),
            error(429, "rate_limited", retry_after="1"),
        ],
        ids=["timeout", "connect", "500", "503", "429"],
    )
    def test_survives_a_failed_attempt(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        clock: FakeClock,
        failure: Callable[..., object],
    ) -> None:
        """A transient failure is retried shortly after; the lease is still held."""
        with client.locks.with_lock("k", ttl=30) as guard:
            acquired = guard.lease
            fake_api.then(failure)
            clock.advance(10)
            assert not guard.lost
            assert guard.lease == acquired
            clock.advance(0.1)
            assert len(fake_api.of("renew")) == 2
            assert not guard.lost
            assert guard.lease.expires_at > acquired.expires_at
        assert len(fake_api.of("release")) == 1

    def test_lost_at_the_deadline_with_only_failures(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        clock: FakeClock,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """With every attempt failing, the guard is held until the deadline (at risk from a
        third of the ttl before it) and lost at it."""
        caplog.set_level(logging.INFO, logger="volcano")
        with client.locks.with_lock("k", ttl=30) as guard:
            fake_api.then(*[error(503, "unavailable")] * 100)
            for _ in range(19):
                clock.advance(1)  # t=101 .. 119
            assert guard.state is volcano.GuardState.HELD
            for _ in range(10):
                clock.advance(1)  # t=120 .. 129
                assert guard.state is volcano.GuardState.AT_RISK
            assert not guard.lost
            assert len(fake_api.of("renew")) > 5  # retried all along
            clock.advance(1)  # t=130: the deadline
            assert guard.lost
            assert guard.wait_lost(timeout=0)
            reason = guard.lost_reason
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, volcano.ServiceUnavailableError)
            attempts = len(fake_api.of("renew"))
            clock.advance(5)
            assert len(fake_api.of("renew")) == attempts  # no renewal after loss
        assert fake_api.of("release") == []
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2
        assert warnings[0].startswith("the lease on k is at risk: 503 unavailable")
        assert warnings[1].startswith("lost the lease on k")

    def test_held_is_never_reported_past_the_deadline(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Even while a renewal hangs, the guard reports lost once the deadline passes."""
        gate = Gate(fake_api)
        with client.locks.with_lock("k", ttl=30) as guard:
            fake_api.then(gate)
            clock.nudge(10)
            assert gate.entered.wait(20)
            clock.now = 129.999
            assert not guard.lost
            clock.now = 130.0
            assert guard.lost
            assert isinstance(guard.lost_reason, volcano.LockLostError)
            gate.opened.set()
            clock.advance(0)  # let the late success arrive
            assert guard.lost  # a late answer does not bring the lease back
        assert fake_api.of("release") == []


class TestRefusals:
    @pytest.mark.parametrize(
        ("status", "code", "cls"),
        [
            (409, "lease_not_held", volcano.LeaseNotHeldError),
            (401, "unauthorized", volcano.AuthenticationError),
            (403, "forbidden", volcano.PermissionDeniedError),
            (422, "validation_error", volcano.UnprocessableEntityError),
        ],
    )
    def test_lost_at_once(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        clock: FakeClock,
        status: int,
        code: str,
        cls: type,
    ) -> None:
        """A 409 (or another refusal) on renewal makes the guard lost immediately."""
        with client.locks.with_lock("k", ttl=30) as guard:
            fake_api.then(error(status, code))
            clock.advance(10)
            assert guard.lost
            assert type(guard.lost_reason) is cls
            clock.advance(10)
            assert len(fake_api.of("renew")) == 1
        assert fake_api.of("release") == []
        assert guard.lost  # still reported after exit

    def test_wait_lost_wakes_on_loss(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A thread blocked in wait_lost() returns True when the lease is lost."""
        results: list[bool] = []
        with client.locks.with_lock("k", ttl=30) as guard:
            assert guard.wait_lost(timeout=0) is False
            waiter = threading.Thread(target=lambda: results.append(guard.wait_lost()))
            waiter.start()
            fake_api.then(error(409, "lease_not_held"))
            clock.advance(10)
            waiter.join(20)
        assert results == [True]

    def test_wait_lost_returns_false_when_the_guard_exits(
        self, client: volcano.Client, clock: FakeClock
    ) -> None:
        """A thread blocked in wait_lost() returns False when the block ends without loss."""
        results: list[bool] = []
        with client.locks.with_lock("k", ttl=30) as guard:
            waiter = threading.Thread(target=lambda: results.append(guard.wait_lost()))
            waiter.start()
        waiter.join(20)
        assert results == [False]
        assert guard.wait_lost() is False


class TestExit:
    def test_releases_the_latest_lease(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Leaving the block releases the latest lease with a fresh request id."""
        with client.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            clock.advance(10)
            latest = guard.lease
        (release,) = fake_api.of("release")
        assert json.loads(release.content) == {"owner_token": TOKEN, "fencing_token": 7}
        assert release.headers["X-Request-Id"] != REQUEST_ID
        assert guard.lease == latest
        assert not guard.lost
        assert guard.lost_reason is None

    def test_no_renewal_after_exit(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Once the block is left, the lease is no longer renewed."""
        with client.locks.with_lock("k", ttl=30):
            pass
        clock.advance(10)
        clock.advance(10)
        assert fake_api.of("renew") == []

    def test_exit_waits_for_an_inflight_renewal(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Exit lets a renewal under way finish, then releases (never concurrently)."""
        gate = Gate(fake_api)
        renewal_done_at_release: list[bool] = []

        def release(request: httpx.Request) -> httpx.Response:
            renewal_done_at_release.append(gate.done.is_set())
            return fake_api.default(request)

        guard = client.locks.with_lock("k", ttl=30)
        guard.__enter__()
        fake_api.then(gate, release)
        clock.nudge(10)
        assert gate.entered.wait(20)
        exiting = threading.Thread(target=guard.__exit__, args=(None, None, None))
        exiting.start()
        wait_for(lambda: guard.state is volcano.GuardState.RELEASING)
        gate.opened.set()
        exiting.join(20)
        assert renewal_done_at_release == [True]
        assert guard.state is volcano.GuardState.RELEASED

    def test_release_answered_after_the_deadline_ends_released(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """The deadline passes while the release is in flight; the server's 204 still ends the
        guard RELEASED, not lost (issue 19, finding 3)."""

        def slow_release(request: httpx.Request) -> httpx.Response:
            clock.now += 60  # past the deadline of t=130 while the request is out
            return fake_api.default(request)

        fake_api.then(fake_api.default, slow_release)
        with client.locks.with_lock("k", ttl=30) as guard:
            pass
        assert len(fake_api.of("release")) == 1
        assert guard.state is volcano.GuardState.RELEASED
        assert not guard.lost
        assert guard.lost_reason is None

    @pytest.mark.parametrize(
        "failure",
        [error(500, "internal"), error(409, "lease_not_held"), fail(httpx.ConnectError("x"))],
        ids=["500", "409", "connect"],
    )
    def test_failed_release_never_masks_the_blocks_exception(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        failure: Callable[..., object],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """If the block raises and the release fails, the block's exception propagates."""
        fake_api.then(fake_api.default, failure)  # the acquisition succeeds, the release fails
        with pytest.raises(KeyError, match="from the block"), client.locks.with_lock("k", ttl=30):
            raise KeyError("from the block")
        assert len(fake_api.of("release")) == 1
        assert any("releasing the lease on k failed" in r.getMessage() for r in caplog.records)

    def test_failed_release_is_logged_not_raised(
        self, client: volcano.Client, fake_api: FakeApi, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A clean block whose release gets a 409 exits normally and logs a warning."""
        with client.locks.with_lock("k", ttl=30):
            fake_api.then(error(409, "lease_not_held"))
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "releasing the lease on k failed" in warnings[0].getMessage()

    def test_block_exception_propagates_after_release(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """An exception in the block still releases the lease, then propagates."""
        with pytest.raises(RuntimeError), client.locks.with_lock("k", ttl=30):
            raise RuntimeError
        assert len(fake_api.of("release")) == 1


class TestMisuse:
    def test_not_reentrant(self, client: volcano.Client) -> None:
        """Entering a guard that is already entered raises GuardStateError."""
        with client.locks.with_lock("k", ttl=30) as guard:
            with pytest.raises(volcano.GuardStateError, match="already entered"):
                guard.__enter__()
            assert not guard.lost

    def test_single_use(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """A guard that has exited cannot be entered again."""
        guard = client.locks.with_lock("k", ttl=30)
        with guard:
            pass
        with pytest.raises(volcano.GuardStateError, match="with_lock"):
            guard.__enter__()
        assert len(fake_api.of("acquire")) == 1

    def test_unentered_guard_has_no_lease(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Reading lease, lost or wait_lost before entering raises; nothing is sent."""
        guard = client.locks.with_lock("k", ttl=30)
        with pytest.raises(volcano.GuardStateError, match="not been entered"):
            _ = guard.lease
        with pytest.raises(volcano.GuardStateError):
            _ = guard.lost
        with pytest.raises(volcano.GuardStateError):
            guard.wait_lost(0)
        assert guard.lost_reason is None
        assert fake_api.requests == []

    def test_failed_acquisition_propagates_and_spends_the_guard(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """If acquisition fails, entering raises that error and the guard is spent."""
        fake_api.then(error(409, "lock_held", retry_after="4"))
        guard = client.locks.with_lock("k", ttl=30)
        with pytest.raises(volcano.LockHeldError), guard:
            pytest.fail("the block must not run")
        with pytest.raises(volcano.GuardStateError):
            guard.__enter__()
        assert fake_api.of("release") == []

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"at_risk_margin": 15.5}, "at_risk_margin must be from 0 to half the ttl"),
            ({"at_risk_margin": -1}, "at_risk_margin must be from 0"),
            ({"at_risk_margin": "5"}, "at_risk_margin must be seconds"),
            ({"on_lost": "alert"}, "on_lost must be callable, got str"),
            ({"on_at_risk": 3}, "on_at_risk must be callable, got int"),
        ],
    )
    def test_bad_arguments_are_refused_by_with_lock(
        self, client: volcano.Client, fake_api: FakeApi, arguments: dict[str, object], message: str
    ) -> None:
        """A bad margin or callback is refused when the guard is made, before any request."""
        with pytest.raises(volcano.InvalidArgumentError, match=message):
            client.locks.with_lock("k", ttl=30, **arguments)  # type: ignore[arg-type]
        assert fake_api.requests == []

    def test_state_and_check_around_the_block(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """state reads NEW, HELD, RELEASED; check() refuses before entry and is quiet while
        held and after a clean exit."""
        guard = client.locks.with_lock("k", ttl=30, at_risk_margin=timedelta(seconds=2))
        assert guard.state is volcano.GuardState.NEW
        with pytest.raises(volcano.GuardStateError):
            guard.check()
        with guard:
            assert guard.state is volcano.GuardState.HELD
            guard.check()
        assert guard.state is volcano.GuardState.RELEASED
        guard.check()

    def test_failed_entry_is_a_state(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """An entry that raised leaves the guard FAILED, and it cannot be entered again."""
        fake_api.then(error(409, "lock_held"))
        guard = client.locks.with_lock("k", ttl=30)
        with pytest.raises(volcano.LockHeldError), guard:
            pass
        assert guard.state is volcano.GuardState.FAILED
        with pytest.raises(volcano.GuardStateError, match="has been used"):
            guard.__enter__()

    def test_repr(self, client: volcano.Client) -> None:
        """A guard's repr names its key and state, never the token."""
        guard = client.locks.with_lock("k", ttl=30, token=TOKEN)
        assert repr(guard) == "<LockGuard key='k' new>"
        with guard:
            assert repr(guard) == "<LockGuard key='k' held>"
        assert repr(guard) == "<LockGuard key='k' released>"


class TestOneThreadPerClient:
    def test_many_guards_share_one_thread(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Hundreds of guards on one client are renewed by a single thread."""
        before = threading.active_count()
        with contextlib.ExitStack() as stack:
            guards = [
                stack.enter_context(client.locks.with_lock(f"key-{i}", ttl=30)) for i in range(300)
            ]
            assert threading.active_count() == before + 1
            assert len(renewer_threads()) == 1
            assert not any(g.lost for g in guards)
        assert len(fake_api.of("release")) == 300

    def test_due_guards_are_all_renewed(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Guards with different ttls are each renewed when due, by the one thread."""
        with (
            client.locks.with_lock("short", ttl=3) as short,
            client.locks.with_lock("long", ttl=30) as long,
        ):
            for _ in range(10):
                clock.advance(1)  # short is due every second, long once at t=110
            keys = [r.url.path.split("/")[3] for r in fake_api.of("renew")]
            assert keys.count("short") == 10
            assert keys.count("long") == 1
            assert not short.lost
            assert not long.lost

    def test_no_thread_until_a_guard_is_entered(self, client: volcano.Client) -> None:
        """Plain lock calls start no thread; the renewer starts with the first guard."""
        client.locks.acquire("k", ttl=30)
        assert renewer_threads() == []


class TestRenewerFaults:
    def test_a_bug_in_one_renewal_loses_that_guard_only(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """An unexpected exception while renewing marks the guards of that request lost (here
        one: the other's renewal is not due with it); others go on."""
        with (
            client.locks.with_lock("broken", ttl=30) as broken,
            client.locks.with_lock("fine", ttl=60) as fine,
        ):
            fake_api.then(fail(ZeroDivisionError("bug")))  # the first renewal due: "broken"
            clock.advance(10)
            assert broken.lost
            assert isinstance(broken.lost_reason, volcano.LockLostError)
            assert isinstance(broken.lost_reason.__cause__, ZeroDivisionError)
            assert not fine.lost
            clock.advance(10)
            assert not fine.lost
            assert len(renewer_threads()) == 1
        assert [r.url.path for r in fake_api.of("release")] == ["/v1/locks/fine/release"]

    def test_a_stopped_renewer_loses_new_guards_at_once(self, client: volcano.Client) -> None:
        """A guard handed to a client's engine that has stopped is marked lost with the stop
        reason, and starts no thread."""
        guard = Ownership(
            "k", timeout=10.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
        )
        guard.enter()
        guard.acquired(Answer(lease(), 100.0, replayed=False))
        client.close()
        client._engine.hold(guard)
        assert isinstance(guard.reason(100.0), volcano.ClientClosedError)
        assert renewer_threads() == []


class TestClientClose:
    def test_close_marks_guards_lost_and_stops_the_thread(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Closing the client stops renewal; its active guards report lost."""
        with client.locks.with_lock("a", ttl=30) as a, client.locks.with_lock("b", ttl=30) as b:
            client.close()
            assert renewer_threads() == []
            for guard in (a, b):
                assert guard.lost
                assert guard.wait_lost(timeout=0)
                assert isinstance(guard.lost_reason, volcano.ClientClosedError)
        assert fake_api.of("release") == []  # nothing can be sent any more
        assert fake_api.of("renew") == []

    def test_guard_entered_on_a_closed_client(self, client: volcano.Client) -> None:
        """A closed client refuses to acquire for a guard."""
        client.close()
        with pytest.raises(volcano.ClientClosedError), client.locks.with_lock("k", ttl=30):
            pytest.fail("the block must not run")
