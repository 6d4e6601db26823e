"""with_lock guards: acquisition, background renewal, loss, and exit, for both clients.

One body runs with a `LockGuard` and an `AsyncLockGuard` (the `guards` fixture) wherever the
two behave alike; what only one has (the sync client's one renewal thread, the async client's
letting go of a renewal under way) has tests of its own, here and in test_async_guard.py.

Time is a FakeClock: `guards.advance(s)` moves it and returns once the client's renewal loop
(a thread, or a task) has done everything due by then, so each test knows exactly which
renewals ran. The guard is acquired at t=100 with ttl=30: first renewal due at t=110, deadline
t=130.
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
from tests.unit.sdk.support import (
    EXPIRES,
    REQUEST_ID,
    TOKEN,
    FakeApi,
    FakeClock,
    Gate,
    Guards,
    error,
    fail,
)
from volcano._ownership import Ownership
from volcano._seam import Success

if TYPE_CHECKING:
    from collections.abc import Callable

TRANSIENT = pytest.mark.parametrize(
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


def lease() -> volcano.LockLease:
    return volcano.LockLease(
        key="k", owner_token=TOKEN, fencing_token=7, expires_at=EXPIRES, ttl_seconds=30
    )


def renewer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "volcano-renewer"]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.anyio
class TestSchedule:
    async def test_renews_a_third_into_each_lease(self, guards: Guards, fake_api: FakeApi) -> None:
        """The first renewal comes when a third of the ttl has passed, then every third."""
        async with guards.lock(ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            await guards.advance(9)
            assert fake_api.of("renew") == []
            await guards.advance(1)
            await guards.advance(9)
            await guards.advance(1)
            assert fake_api.times_of("renew") == [110.0, 120.0]
            assert not guard.lost

    async def test_renewals_carry_the_lease_and_fresh_request_ids(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """Renewals send the lease's token, fencing token and ttl, each with a new request id."""
        async with guards.lock(ttl=30, token=TOKEN, request_id=REQUEST_ID):
            await guards.advance(10)
            await guards.advance(10)
        renewals = fake_api.of("renew")
        assert [json.loads(r.content) for r in renewals] == [
            {"owner_token": TOKEN, "fencing_token": 7, "ttl_seconds": 30.0}
        ] * 2
        ids = [r.headers["X-Request-Id"] for r in fake_api.requests]
        assert ids[0] == REQUEST_ID
        assert len(set(ids)) == len(ids) == 4  # acquire, 2 renewals, release: all different

    async def test_lease_is_the_latest_renewal(self, guards: Guards) -> None:
        """guard.lease is replaced by each renewal; earlier leases stay as they were."""
        async with guards.lock(ttl=30) as guard:
            first = guard.lease
            first_expiry = first.expires_at
            await guards.advance(10)
            second = guard.lease
            assert second is not first
            assert second.expires_at > first_expiry
            assert first.expires_at == first_expiry
            assert second.owner_token == first.owner_token

    async def test_each_attempt_is_bounded_by_the_time_left(
        self, make_guards: Callable[..., Guards], fake_api: FakeApi
    ) -> None:
        """A renewal waits no longer than the client's timeout, nor past the last call a step
        before the deadline (an attempt that hangs leaves room for one more), nor past the
        deadline."""
        guards = make_guards(timeout=10)
        async with guards.lock(ttl=6):  # deadline 106, first attempt at 102, last call 105.4
            fake_api.then(*[fail(httpx.ConnectError("refused"))] * 3)
            await guards.advance(2)
            await guards.advance(0.5)
            await guards.advance(2)
            await guards.advance(1)
        timeouts = [r.extensions["timeout"]["read"] for r in fake_api.of("renew")]
        # until the last call at 105.4 (a step, 0.6 s, at least), then until the deadline
        assert timeouts == [pytest.approx(t) for t in (3.4, 2.9, 0.9, 0.5)]

    @pytest.mark.parametrize("status", [503, 0], ids=["503", "connect"])
    async def test_acquisition_retries_once_then_spends_the_guard(
        self, guards: Guards, fake_api: FakeApi, status: int
    ) -> None:
        """Entering retries a 503 or a transport failure once, with the same identifiers and
        body, like acquire; when the retry fails too, entering raises it, the block never runs,
        nothing is released, and the guard is spent."""
        failure = error(503, "unavailable") if status else fail(httpx.ConnectError("refused"))
        fake_api.then(failure, failure)
        guard = guards.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID)
        raised = volcano.ServiceUnavailableError if status else volcano.APIConnectionError
        with pytest.raises(raised):
            async with guards.entered(guard):
                pytest.fail("the block must not run")
        first, second = fake_api.of("acquire")
        assert first.content == second.content
        assert first.headers["X-Request-Id"] == second.headers["X-Request-Id"] == REQUEST_ID
        assert fake_api.of("release") == []
        assert guard.state is volcano.GuardState.FAILED
        with pytest.raises(volcano.GuardStateError, match="has been used"):
            await guards.enter(guard)

    async def test_acquisition_recovers_on_its_retry(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """A 503 then a lease: the guard holds the lease of the retry."""
        fake_api.then(error(503, "unavailable"))
        async with guards.lock(ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            assert guard.lease.owner_token == TOKEN
        assert len(fake_api.of("acquire")) == 2


@pytest.mark.anyio
class TestTransientFailures:
    @TRANSIENT
    async def test_survives_a_failed_attempt(
        self, guards: Guards, fake_api: FakeApi, failure: Callable[..., object]
    ) -> None:
        """A transient failure is retried shortly after (0.1 s) and renewal goes on on
        schedule; the lease is still held."""
        async with guards.lock(ttl=30) as guard:
            acquired = guard.lease
            fake_api.then(failure)
            await guards.advance(10)
            assert not guard.lost
            assert guard.lease == acquired
            await guards.advance(0.1)
            assert len(fake_api.of("renew")) == 2
            assert not guard.lost
            assert guard.lease.expires_at > acquired.expires_at
            await guards.advance(10)
        assert fake_api.times_of("renew") == [110.0, pytest.approx(110.1), pytest.approx(120.1)]
        assert len(fake_api.of("release")) == 1

    async def test_lost_at_the_deadline_with_only_failures(
        self, guards: Guards, fake_api: FakeApi, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With every attempt failing, the guard is held until the deadline (at risk from a
        third of the ttl before it), retried all along, and lost at it, not before."""
        caplog.set_level(logging.INFO, logger="volcano")
        async with guards.lock(ttl=30) as guard:
            fake_api.then(*[error(503, "unavailable")] * 100)
            for _ in range(19):
                await guards.advance(1)  # t=101 .. 119
            assert guard.state is volcano.GuardState.HELD
            for _ in range(10):
                await guards.advance(1)  # t=120 .. 129
                assert guard.state is volcano.GuardState.AT_RISK
            assert not guard.lost
            assert len(fake_api.of("renew")) > 5  # retried all along
            await guards.advance(1)  # t=130: the deadline
            assert guard.lost
            assert await guards.wait_lost(guard, timeout=0)
            reason = guard.lost_reason
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, volcano.ServiceUnavailableError)
            assert all(t < 130.0 for t in fake_api.times_of("renew"))
            attempts = len(fake_api.of("renew"))
            await guards.advance(5)
            assert len(fake_api.of("renew")) == attempts  # no renewal after loss
        assert fake_api.of("release") == []
        warnings = warnings_of(caplog)
        assert len(warnings) == 2
        assert warnings[0].startswith("the lease on k is at risk: 503 unavailable")
        assert warnings[1].startswith("lost the lease on k")

    async def test_held_is_never_reported_past_the_deadline(
        self, guards: Guards, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """While a renewal hangs, the guard reports lost once the deadline passes (and
        wait_lost says so at once); a late answer does not bring the lease back."""
        gate = guards.gate()
        async with guards.lock(ttl=30) as guard:
            fake_api.then(gate)
            await guards.nudge(10)
            await gate.arrival()
            clock.now = 129.999
            assert not guard.lost
            clock.now = 130.0
            assert guard.lost
            assert isinstance(guard.lost_reason, volcano.LockLostError)
            assert await guards.wait_lost(guard, timeout=0)
            gate.open()
            await guards.advance(0)  # let the late success arrive
            assert guard.lost
        assert fake_api.of("release") == []

    async def test_a_bug_in_one_renewal_loses_that_guard_only(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """An unexpected exception while renewing marks the guards of that request lost (here
        one: the other's renewal is not due with it), caused by it; others go on."""
        async with (
            guards.lock("broken", ttl=30) as broken,
            guards.lock("fine", ttl=60) as fine,
        ):
            fake_api.then(fail(ZeroDivisionError("bug")))  # the first renewal due: "broken"
            await guards.advance(10)
            assert broken.lost
            assert await guards.wait_lost(broken, timeout=0)
            assert isinstance(broken.lost_reason, volcano.LockLostError)
            assert isinstance(broken.lost_reason.__cause__, ZeroDivisionError)
            assert not fine.lost
            await guards.advance(10)
            assert not fine.lost
        assert [r.url.path for r in fake_api.of("release")] == ["/v1/locks/fine/release"]


@pytest.mark.anyio
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
    async def test_lost_at_once(
        self, guards: Guards, fake_api: FakeApi, status: int, code: str, cls: type
    ) -> None:
        """A 409 (or another refusal) on renewal makes the guard lost immediately, and no
        renewal follows."""
        async with guards.lock(ttl=30) as guard:
            fake_api.then(error(status, code))
            await guards.advance(10)
            assert guard.lost
            assert type(guard.lost_reason) is cls
            await guards.advance(10)
            assert len(fake_api.of("renew")) == 1
        assert fake_api.of("release") == []
        assert guard.lost  # still reported after exit

    async def test_wait_lost_wakes_on_loss(self, guards: Guards, fake_api: FakeApi) -> None:
        """A thread (a task) waiting in wait_lost() gets True when the lease is lost."""
        async with guards.lock(ttl=30) as guard:
            assert await guards.wait_lost(guard, timeout=0) is False
            waiting = guards.waiting(guard)
            fake_api.then(error(409, "lease_not_held"))
            await guards.advance(10)
            assert await waiting() is True

    async def test_wait_lost_returns_false_when_the_guard_exits(self, guards: Guards) -> None:
        """A thread (a task) waiting in wait_lost() gets False when the block ends without
        loss; so does wait_lost() afterwards."""
        async with guards.lock(ttl=30) as guard:
            waiting = guards.waiting(guard)
            await guards.advance(0)
        assert await waiting() is False
        assert await guards.wait_lost(guard) is False


@pytest.mark.anyio
class TestExit:
    async def test_releases_the_latest_lease(self, guards: Guards, fake_api: FakeApi) -> None:
        """Leaving the block releases the latest lease (a renewal's) with a fresh request id;
        the guard then holds that lease, not lost."""
        async with guards.lock(ttl=30, token=TOKEN, request_id=REQUEST_ID) as guard:
            acquired = guard.lease
            await guards.advance(10)
            latest = guard.lease
            assert latest.expires_at > acquired.expires_at
        (release,) = fake_api.of("release")
        assert json.loads(release.content) == {"owner_token": TOKEN, "fencing_token": 7}
        assert release.headers["X-Request-Id"] not in (REQUEST_ID, *renewal_ids(fake_api))
        assert guard.lease == latest
        assert not guard.lost
        assert guard.lost_reason is None
        assert await guards.wait_lost(guard) is False

    async def test_no_renewal_after_exit(self, guards: Guards, fake_api: FakeApi) -> None:
        """Once the block is left, the lease is no longer renewed."""
        async with guards.lock(ttl=30):
            pass
        await guards.advance(10)
        await guards.advance(10)
        assert fake_api.of("renew") == []

    async def test_release_answered_after_the_deadline_ends_released(
        self, guards: Guards, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """The deadline passes while the release is in flight; the server's 204 still ends the
        guard RELEASED, not lost (issue 19, finding 3)."""

        def slow_release(request: httpx.Request) -> httpx.Response:
            clock.now += 60  # past the deadline of t=130 while the request is out
            return fake_api.default(request)

        fake_api.then(fake_api.default, slow_release)
        async with guards.lock(ttl=30) as guard:
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
    async def test_failed_release_never_masks_the_blocks_exception(
        self,
        guards: Guards,
        fake_api: FakeApi,
        failure: Callable[..., object],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """If the block raises and the release fails, the block's exception propagates, and
        the failed release is logged once."""
        fake_api.then(fake_api.default, failure)  # the acquisition succeeds, the release fails
        with pytest.raises(KeyError, match="from the block"):
            async with guards.lock(ttl=30):
                raise KeyError("from the block")
        assert len(fake_api.of("release")) == 1
        warnings = warnings_of(caplog)
        assert len(warnings) == 1
        assert warnings[0].startswith("releasing the lease on k failed")

    async def test_failed_release_is_logged_not_raised(
        self, guards: Guards, fake_api: FakeApi, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A clean block whose release gets a 409 exits normally and logs one warning."""
        async with guards.lock(ttl=30):
            fake_api.then(error(409, "lease_not_held"))
        warnings = warnings_of(caplog)
        assert len(warnings) == 1
        assert warnings[0].startswith("releasing the lease on k failed")

    async def test_block_exception_propagates_after_release(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """An exception in the block still releases the lease, then propagates."""
        with pytest.raises(RuntimeError):
            async with guards.lock(ttl=30):
                raise RuntimeError
        assert len(fake_api.of("release")) == 1


@pytest.mark.anyio
class TestMisuse:
    async def test_not_reentrant_and_single_use(self, guards: Guards, fake_api: FakeApi) -> None:
        """Entering twice, or again after exit, raises GuardStateError; the lease is held
        meanwhile, and acquired once."""
        guard = guards.with_lock("k", ttl=30)
        async with guards.entered(guard):
            with pytest.raises(volcano.GuardStateError, match="already entered"):
                await guards.enter(guard)
            assert not guard.lost
        with pytest.raises(volcano.GuardStateError, match="with_lock"):
            await guards.enter(guard)
        assert len(fake_api.of("acquire")) == 1

    async def test_unentered_guard_has_no_lease(self, guards: Guards, fake_api: FakeApi) -> None:
        """Reading lease, lost or wait_lost before entering raises; nothing is sent."""
        guard = guards.with_lock("k", ttl=30)
        with pytest.raises(volcano.GuardStateError, match="not been entered"):
            _ = guard.lease
        with pytest.raises(volcano.GuardStateError):
            _ = guard.lost
        with pytest.raises(volcano.GuardStateError):
            await guards.wait_lost(guard, 0)
        assert guard.lost_reason is None
        assert fake_api.requests == []

    async def test_failed_acquisition_propagates_and_spends_the_guard(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """A lock held by another (not retried): entering raises LockHeldError, the guard is
        FAILED and spent, and nothing is released."""
        fake_api.then(error(409, "lock_held", retry_after="4"))
        guard = guards.with_lock("k", ttl=30)
        with pytest.raises(volcano.LockHeldError):
            async with guards.entered(guard):
                pytest.fail("the block must not run")
        assert guard.state is volcano.GuardState.FAILED
        with pytest.raises(volcano.GuardStateError, match="has been used"):
            await guards.enter(guard)
        assert len(fake_api.of("acquire")) == 1
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
    async def test_bad_arguments_are_refused_by_with_lock(
        self, guards: Guards, fake_api: FakeApi, arguments: dict[str, object], message: str
    ) -> None:
        """A bad margin or callback is refused when the guard is made, before any request."""
        with pytest.raises(volcano.InvalidArgumentError, match=message):
            guards.with_lock("k", ttl=30, **arguments)
        assert fake_api.requests == []

    async def test_state_and_check_around_the_block(self, guards: Guards) -> None:
        """state reads NEW, HELD, RELEASED; check() refuses before entry and is quiet while
        held and after a clean exit."""
        guard = guards.with_lock("k", ttl=30, at_risk_margin=timedelta(seconds=2))
        assert guard.state is volcano.GuardState.NEW
        with pytest.raises(volcano.GuardStateError):
            guard.check()
        async with guards.entered(guard):
            assert guard.state is volcano.GuardState.HELD
            guard.check()
        assert guard.state is volcano.GuardState.RELEASED
        guard.check()

    async def test_repr(self, guards: Guards) -> None:
        """A guard's repr names its class, key and state, never the token."""
        guard = guards.with_lock("k", ttl=30, token=TOKEN)
        name = "AsyncLockGuard" if guards.asynchronous else "LockGuard"
        assert repr(guard) == f"<{name} key='k' new>"
        async with guards.entered(guard):
            assert repr(guard) == f"<{name} key='k' held>"
        assert repr(guard) == f"<{name} key='k' released>"


@pytest.mark.anyio
class TestClientClose:
    async def test_close_marks_guards_lost(self, guards: Guards, fake_api: FakeApi) -> None:
        """Closing the client stops renewal; its active guards report lost (wait_lost too),
        and nothing more is sent, their releases included."""
        async with guards.lock("a", ttl=30) as a, guards.lock("b", ttl=30) as b:
            await guards.close()
            for guard in (a, b):
                assert guard.lost
                assert await guards.wait_lost(guard, timeout=0)
                assert isinstance(guard.lost_reason, volcano.ClientClosedError)
        assert fake_api.of("release") == []
        assert fake_api.of("renew") == []

    async def test_guard_entered_on_a_closed_client(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """A closed client refuses to acquire for a guard, sending nothing."""
        await guards.close()
        with pytest.raises(volcano.ClientClosedError):
            async with guards.lock(ttl=30):
                pytest.fail("the block must not run")
        assert fake_api.requests == []


def renewal_ids(fake_api: FakeApi) -> list[str]:
    return [r.headers["X-Request-Id"] for r in fake_api.of("renew")]


class TestOneThreadPerClient:
    """The Client's renewals run on one thread of its own (an AsyncClient's: one task)."""

    @pytest.fixture(autouse=True)
    def _earlier_renewers(self) -> None:
        # A client another test of this process left open keeps its renewer thread: under
        # pytest-xdist any test may run before these. Only threads started since count.
        self.earlier = set(renewer_threads())

    def renewers(self) -> list[threading.Thread]:
        return [t for t in renewer_threads() if t not in self.earlier]

    def test_many_guards_share_one_thread(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Hundreds of guards on one client are renewed by a single thread."""
        before = threading.active_count()
        with contextlib.ExitStack() as stack:
            guards = [
                stack.enter_context(client.locks.with_lock(f"key-{i}", ttl=30)) for i in range(300)
            ]
            assert threading.active_count() == before + 1
            assert len(self.renewers()) == 1
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
            assert len(self.renewers()) == 1

    def test_no_thread_until_a_guard_is_entered(self, client: volcano.Client) -> None:
        """Plain lock calls start no thread; the renewer starts with the first guard."""
        client.locks.acquire("k", ttl=30)
        assert self.renewers() == []

    def test_close_stops_the_thread(self, client: volcano.Client) -> None:
        """Closing the client ends its renewal thread, though guards were still held."""
        with client.locks.with_lock("k", ttl=30):
            assert len(self.renewers()) == 1
            client.close()
            assert self.renewers() == []

    def test_a_stopped_renewer_loses_new_guards_at_once(self, client: volcano.Client) -> None:
        """A guard handed to a client's engine that has stopped is marked lost with the stop
        reason, and starts no thread."""
        guard = Ownership(
            "k", timeout=10.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
        )
        guard.enter()
        guard.acquired(Success(lease(), 100.0, replayed=False))
        client.close()
        client._engine.hold(guard)
        assert isinstance(guard.reason(100.0), volcano.ClientClosedError)
        assert self.renewers() == []

    def test_exit_waits_for_an_inflight_renewal(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Exit lets a renewal under way finish, then releases (never concurrently); an
        AsyncLockGuard lets go of it instead (test_async_guard.py)."""
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


def wait_for(predicate: Callable[[], bool]) -> None:
    """Wait until another thread makes `predicate` true (a guard against hangs, not timing)."""
    done = threading.Event()
    for _ in range(2000):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError("condition never became true")
