"""AsyncLockGuard: the same state machine as LockGuard, renewed by an asyncio task.

The FakeClock's async sleep jumps time forward at once, so the renewal task runs through its
schedule whenever the test yields; tests end it with a refusal, a deadline, or a held request.
The guard is acquired at t=100 with ttl=30: renewals due every 10 s, deadline 30 s after each.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import volcano
from tests.unit.sdk.support import REQUEST_ID, TOKEN, FakeApi, FakeClock, error, fail

pytestmark = pytest.mark.anyio


class AsyncGate:
    """A responder that holds a request until cancelled or opened."""

    def __init__(self, fake_api: FakeApi) -> None:
        self.api = fake_api
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        await self.opened.wait()
        return self.api.default(request)


@pytest.fixture
def guard(aclient: volcano.AsyncClient) -> volcano.AsyncLockGuard:
    """An unentered guard on key k with ttl=30 and the fixed token and request id."""
    return aclient.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID)


class TestAsyncRenewal:
    async def test_renews_on_schedule_until_refused(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """Renewals come every third of the ttl; a 409 makes the guard lost at once."""
        async with guard:
            fake_api.then(fake_api.default, fake_api.default, error(409, "lease_not_held"))
            assert await guard.wait_lost() is True
            assert fake_api.times_of("renew") == [110.0, 120.0, 130.0]
            assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        assert fake_api.of("release") == []
        renewals = fake_api.of("renew")
        assert json.loads(renewals[0].content) == {
            "owner_token": TOKEN,
            "fencing_token": 7,
            "ttl_seconds": 30.0,
        }
        ids = {r.headers["X-Request-Id"] for r in fake_api.requests}
        assert len(ids) == len(fake_api.requests)

    async def test_survives_a_failed_attempt(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """A transient failure is retried shortly after, and renewal goes on."""
        async with guard:
            fake_api.then(
                fail(httpx.ReadTimeout("slow")), fake_api.default, error(409, "lease_not_held")
            )
            await guard.wait_lost()
        assert fake_api.times_of("renew") == [110.0, pytest.approx(110.1), pytest.approx(120.1)]

    async def test_lost_at_the_deadline_with_only_failures(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """With every attempt failing, the guard is lost at the deadline, not before."""
        async with guard:
            fake_api.then(*[error(503, "unavailable")] * 1000)
            assert await guard.wait_lost() is True
            assert clock.now >= 130.0
            assert all(t < 130.0 for t in fake_api.times_of("renew"))
            assert len(fake_api.of("renew")) > 5
            reason = guard.lost_reason
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, volcano.ServiceUnavailableError)
        assert fake_api.of("release") == []

    async def test_held_is_never_reported_past_the_deadline(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """While a renewal hangs, the guard reports lost once the deadline passes."""
        gate = AsyncGate(fake_api)
        async with guard:
            fake_api.then(gate)
            await gate.entered.wait()
            clock.now = 129.5
            assert not guard.lost
            clock.now = 130.0
            assert guard.lost
            assert await guard.wait_lost(timeout=0)
        assert fake_api.of("release") == []

    async def test_a_bug_in_renewal_loses_the_guard(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """An unexpected exception in the renewal task marks the guard lost, with its cause."""
        async with guard:
            fake_api.then(fail(ZeroDivisionError("bug")))
            assert await guard.wait_lost() is True
            assert isinstance(guard.lost_reason, volcano.LockLostError)
            assert isinstance(guard.lost_reason.__cause__, ZeroDivisionError)
        assert fake_api.of("release") == []


class TestAsyncExit:
    async def test_releases_the_latest_lease(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """Leaving the block stops renewal and releases the latest lease."""
        gate = AsyncGate(fake_api)
        async with guard:
            acquired = guard.lease
            fake_api.then(fake_api.default, gate)  # one renewal, then one that hangs
            await gate.entered.wait()
            latest = guard.lease
            assert latest.expires_at > acquired.expires_at
        (release,) = fake_api.of("release")
        assert json.loads(release.content) == {"owner_token": TOKEN, "fencing_token": 7}
        assert release.headers["X-Request-Id"] != REQUEST_ID
        assert guard.lease == latest
        assert not guard.lost
        assert await guard.wait_lost() is False

    async def test_failed_release_never_masks_the_blocks_exception(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi, caplog: pytest.LogCaptureFixture
    ) -> None:
        """If the block raises and the release fails, the block's exception propagates."""
        fake_api.then(fake_api.default, error(500, "internal"))
        with pytest.raises(KeyError, match="from the block"):
            async with guard:
                raise KeyError("from the block")
        assert len(fake_api.of("release")) == 1
        assert any("releasing the lease on k failed" in r.getMessage() for r in caplog.records)

    async def test_failed_release_is_logged_not_raised(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A clean block whose release gets a 409 exits normally."""
        fake_api.then(fake_api.default, error(409, "lease_not_held"))
        async with guard:
            pass
        assert any("releasing the lease on k failed" in r.getMessage() for r in caplog.records)

    async def test_waiter_returns_false_when_the_guard_exits(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """A task waiting in wait_lost() gets False when the block ends without loss."""
        gate = AsyncGate(fake_api)
        async with guard:
            fake_api.then(gate)
            waiter = asyncio.get_running_loop().create_task(guard.wait_lost())
            await gate.entered.wait()
            assert await guard.wait_lost(timeout=0) is False
        assert await waiter is False


class TestAsyncMisuse:
    async def test_not_reentrant_and_single_use(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """Entering twice, or again after exit, raises GuardStateError."""
        with pytest.raises(volcano.GuardStateError, match="not been entered"):
            _ = guard.lease
        async with guard:
            with pytest.raises(volcano.GuardStateError, match="already entered"):
                await guard.__aenter__()
        with pytest.raises(volcano.GuardStateError, match="with_lock"):
            await guard.__aenter__()
        assert len(fake_api.of("acquire")) == 1

    async def test_failed_acquisition_propagates(
        self, guard: volcano.AsyncLockGuard, fake_api: FakeApi
    ) -> None:
        """If acquisition fails (after its one retry), entering raises that error."""
        fake_api.then(error(503, "unavailable"), error(503, "unavailable"))
        with pytest.raises(volcano.ServiceUnavailableError):
            async with guard:
                pytest.fail("the block must not run")
        assert len(fake_api.of("acquire")) == 2
        first, second = fake_api.of("acquire")
        assert first.headers["X-Request-Id"] == second.headers["X-Request-Id"] == REQUEST_ID
        assert first.content == second.content


class TestAsyncClientClose:
    async def test_close_marks_guards_lost(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi
    ) -> None:
        """Closing the client cancels renewal; its active guards report lost."""
        gate = AsyncGate(fake_api)
        async with aclient.locks.with_lock("k", ttl=30) as guard:
            fake_api.then(gate)
            await gate.entered.wait()
            await aclient.close()
            assert guard.lost
            assert isinstance(guard.lost_reason, volcano.ClientClosedError)
            assert await guard.wait_lost(timeout=0)
        assert fake_api.of("release") == []

    async def test_guard_on_a_closed_client(self, aclient: volcano.AsyncClient) -> None:
        """A closed client refuses to acquire for a guard."""
        await aclient.close()
        with pytest.raises(volcano.ClientClosedError):
            async with aclient.locks.with_lock("k", ttl=30):
                pytest.fail("the block must not run")
