"""AsyncLockGuard: what only the asyncio guard does (the rest runs for both in test_guard.py).

Its renewals run in one task per client: leaving a block lets go of a renewal under way (a
LockGuard waits for it), and closing the client cancels one. The guard is acquired at t=100 with
ttl=30; `clock.async_advance(s)` moves the FakeClock and returns once the renewal task is done
with what is due.
"""

from __future__ import annotations

import asyncio
import json

import pytest

import volcano
from tests.unit.sdk.support import REQUEST_ID, TOKEN, AsyncGate, FakeApi, FakeClock

pytestmark = pytest.mark.anyio


class TestLettingGo:
    async def test_exit_lets_go_of_a_renewal_under_way(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Leaving the block while a renewal hangs releases at once, naming the latest lease
        (a renewal keeps both tokens); a task in wait_lost() gets False; the renewal's late
        answer is not taken in."""
        gate = AsyncGate(fake_api)
        guard = aclient.locks.with_lock("k", ttl=30, token=TOKEN, request_id=REQUEST_ID)
        async with guard:
            fake_api.then(fake_api.default, gate)  # one renewal, then one that hangs
            await clock.async_advance(10)
            latest = guard.lease
            waiter = asyncio.get_running_loop().create_task(guard.wait_lost())
            await clock.async_nudge(10)
            await gate.arrival()
        (release,) = fake_api.of("release")
        assert json.loads(release.content) == {"owner_token": TOKEN, "fencing_token": 7}
        assert guard.state is volcano.GuardState.RELEASED
        assert await waiter is False
        gate.open()
        for _ in range(10):  # let the late answer arrive
            await asyncio.sleep(0)
        assert len(fake_api.of("renew")) == 2
        assert guard.lease == latest


class TestClose:
    async def test_close_cancels_a_renewal_under_way(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Closing the client while a renewal hangs cancels it; the guard reports lost (its
        waiters too), and its exit sends nothing."""
        gate = AsyncGate(fake_api)
        async with aclient.locks.with_lock("k", ttl=30) as guard:
            fake_api.then(gate)
            await clock.async_nudge(10)
            await gate.arrival()
            await aclient.close()
            assert guard.lost
            assert isinstance(guard.lost_reason, volcano.ClientClosedError)
            assert await guard.wait_lost(timeout=0)
        assert fake_api.of("release") == []
        assert len(fake_api.requests) == 2  # the acquisition and the cancelled renewal
