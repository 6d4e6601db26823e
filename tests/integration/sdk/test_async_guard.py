"""`AsyncClient.locks.with_lock` against the real server: the twins of test_guard.py.

The other party (`server`) speaks blocking HTTP from the test's event loop; each call takes
milliseconds, far less than any lease here, so the guard's renewal task is not starved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

import volcano
from tests.support.raw import Locks, new_id

from .conftest import WAIT, Wire

pytestmark = pytest.mark.anyio

TTL = 1.2
"""Seconds each guard's lease lives: the first renewal comes after 0.4 s."""


class BlockError(Exception):
    """Raised inside an async with block by the tests."""


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; fail after WAIT seconds (an upper bound)."""
    end = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {WAIT}s: {what}")
        await anyio.sleep(0.02)


async def hold(seconds: float, check: Callable[[], None]) -> None:
    """Run `check` repeatedly for `seconds` by the monotonic clock (no server clock assumed)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        await anyio.sleep(0.05)
    check()


async def raises_in_block(
    guard: volcano.AsyncLockGuard, body: Callable[[], Awaitable[None]]
) -> None:
    async with guard:
        await body()


class TestRenewal:
    async def test_lease_stays_held_past_its_first_expiry(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """The renewal task keeps the lease held past its first expiry, fencing token unchanged."""
        async with aclient.locks.with_lock(key, ttl=TTL) as guard:
            first = guard.lease
            seen = {first.expires_at}

            def check() -> None:
                state = server.state(key)
                assert (state["held"], state["fencing_token"]) == (True, 1)
                assert not guard.lost
                seen.add(guard.lease.expires_at)

            await hold(1.5 * TTL, check)  # past the first expiry by half a ttl
            assert guard.lease.fencing_token == first.fencing_token
            assert guard.lease.owner_token == first.owner_token
            assert guard.lease.expires_at > first.expires_at
            assert len(seen) >= 3
        assert server.state(key)["held"] is False

    async def test_renewals_use_fresh_request_ids_and_the_callers_token(
        self, arecorded: volcano.AsyncClient, wire: Wire, key: str
    ) -> None:
        """token= and request_id= serve the acquisition; renewals and release get new ids."""
        token, request_id = new_id().upper(), new_id().upper()
        guard = arecorded.locks.with_lock(key, ttl=TTL, token=token, request_id=request_id)
        async with guard:
            first = guard.lease
            await wait_for(lambda: guard.lease.expires_at > first.expires_at, "a renewal")
            assert guard.lease.fencing_token == first.fencing_token
            assert guard.lease.owner_token == token
        ids = [e.request.headers["X-Request-Id"] for e in wire.exchanges]
        assert ids[0] == request_id
        assert len(set(ids)) == len(ids)
        (release,) = wire.of("release")
        assert json.loads(release.request.content) == {"owner_token": token, "fencing_token": 1}
        assert release.status == 204


class TestExit:
    async def test_clean_exit_releases(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """Leaving the block releases the lease; the key keeps its last fencing token."""
        async with aclient.locks.with_lock(key, ttl=TTL) as guard:
            assert server.state(key)["held"] is True
        state = server.state(key)
        assert (state["held"], state["fencing_token"]) == (False, guard.lease.fencing_token)
        assert guard.lost is False

    async def test_exception_propagates_unchanged_and_releases(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """An exception from the block propagates as itself, after the lease is released."""
        error = BlockError("from the block")

        async def body() -> None:
            raise error

        with pytest.raises(BlockError) as raised:
            await raises_in_block(aclient.locks.with_lock(key, ttl=TTL), body)
        assert raised.value is error
        assert server.state(key)["held"] is False


class TestLoss:
    async def test_wait_lost_is_false_while_held(
        self, aclient: volcano.AsyncClient, key: str
    ) -> None:
        """While the lease is held, wait_lost(timeout=0.2) returns False."""
        async with aclient.locks.with_lock(key, ttl=TTL) as guard:
            assert await guard.wait_lost(timeout=0.2) is False
            assert guard.lost is False
            assert guard.lost_reason is None

    async def test_force_release_mid_block(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """A force release makes the guard lost (LeaseNotHeldError); exit sends no release."""
        async with arecorded.locks.with_lock(key, ttl=TTL) as guard:
            assert server.force_release(key).json()["released"] is True
            assert await guard.wait_lost(timeout=WAIT) is True
            assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        assert guard.lost is True
        assert wire.of("release") == []
        assert server.state(key)["held"] is False

    async def test_takeover_mid_block(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """Force release then a new holder: the guard is lost and never releases their lease."""
        other = new_id()
        async with arecorded.locks.with_lock(key, ttl=TTL) as guard:
            server.force_release(key)
            assert server.acquire(key, other).json()["fencing_token"] == 2
            assert await guard.wait_lost(timeout=WAIT) is True
            assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        assert wire.of("release") == []
        assert server.state(key)["fencing_token"] == 2
        assert server.release(key, other, 2).status_code == 204

    async def test_exit_before_noticing_a_takeover(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """Leaving before a renewal noticed the takeover: no error, lost, new lease untouched."""
        other = new_id()
        async with aclient.locks.with_lock(key, ttl=30) as guard:
            server.force_release(key)
            server.acquire(key, other)
            assert guard.lost is False
        assert guard.lost is True
        assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        assert server.release(key, other, 2).status_code == 204

    async def test_expiry_under_a_blocked_renewal_then_takeover(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """Renewals cut off: the lease expires, another owner takes it; the guard already knows."""
        other = new_id()
        async with arecorded.locks.with_lock(key, ttl=0.5) as guard:
            wire.refuse = {"renew"}
            await wait_for(
                lambda: server.acquire(key, other).status_code == 200,
                "the lease to expire on the server",
            )
            assert guard.lost is True
            reason = guard.lost_reason
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, volcano.APIConnectionError)
            wire.refuse = set()
        assert wire.of("release") == []
        assert server.release(key, other, 2).status_code == 204


class TestMisuse:
    async def test_guard_is_single_use(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """Entering a guard twice, or again after exit, raises GuardStateError."""
        guard = aclient.locks.with_lock(key, ttl=TTL)
        async with guard:
            with pytest.raises(volcano.GuardStateError, match="re-entrant"):
                await guard.__aenter__()
            assert server.state(key)["held"] is True
        assert server.state(key)["held"] is False
        with pytest.raises(volcano.GuardStateError):
            await guard.__aenter__()

    async def test_failed_acquisition_raises_and_spends_the_guard(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """Entering on a held key raises LockHeldError; the guard cannot be retried."""
        server.acquire(key, new_id())
        guard = aclient.locks.with_lock(key, ttl=TTL)
        with pytest.raises(volcano.LockHeldError):
            await guard.__aenter__()
        with pytest.raises(volcano.GuardStateError):
            await guard.__aenter__()

    async def test_closing_the_client_marks_guards_lost(
        self, make_arecorded: Callable[..., volcano.AsyncClient], wire: Wire, key: str
    ) -> None:
        """close() inside a block: the guard is lost (ClientClosedError), exit is quiet."""
        client = make_arecorded()
        async with client.locks.with_lock(key, ttl=TTL) as guard:
            await client.close()
            assert await guard.wait_lost(timeout=WAIT) is True
            assert isinstance(guard.lost_reason, volcano.ClientClosedError)
        assert wire.of("release") == []
