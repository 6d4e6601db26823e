"""`with_lock` of both clients against the real server: renewal, loss, takeover, clean exit.

Each test runs with `Client` and `AsyncClient` (`sdk`); `sdk.lock(...)` is the with block of
either (`with` or `async with`), and the async guard's renewal task runs on the client's own
loop while the test body waits. Those marked SYNC_ONLY pin what only the sync guard has (its
renewal thread) or what both share by construction (the renewal schedule and retry rules).

Leases here live 0.5 to 1.5 seconds so that renewals happen while the tests run; every wait
polls for the awaited change with a generous upper bound, and no assertion depends on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import volcano
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import SYNC_ONLY, Sdk
from volcano._schedule import MAX_IN_FLIGHT

from .conftest import WAIT, Wire

TTL = 1.2
"""Seconds each guard's lease lives: the first renewal comes after 0.4 s."""


class BlockError(Exception):
    """Raised inside a with block by the tests."""


def renewer_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "volcano-renewer" and t.is_alive())


def sender_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("volcano-renewal-"))


def hold(seconds: float, check: Callable[[], None]) -> None:
    """Run `check` repeatedly for `seconds` by the monotonic clock (no server clock assumed).

    A lease acquired before the call expires, unless renewed, at most its ttl after the call
    starts: the server stamps it before the answer arrives.
    """
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        time.sleep(0.05)
    check()


def wait_renewed(guard: Any, lease: volcano.LockLease) -> volcano.LockLease:
    """Wait for the guard to replace `lease` with a renewal of it; return the renewal."""
    wait_for(lambda: guard.lease.expires_at > lease.expires_at, what="a renewal")
    return guard.lease


class TestRenewal:
    def test_lease_stays_held_past_its_first_expiry(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """Background renewal keeps the lease held, fencing token unchanged, for two ttls."""
        with sdk.lock(key, ttl=TTL) as guard:
            first = guard.lease
            assert first.fencing_token == 1
            seen = {first.expires_at}

            def check() -> None:
                state = server.state(key)
                assert (state["held"], state["fencing_token"]) == (True, 1)
                assert not guard.lost
                seen.add(guard.lease.expires_at)

            hold(2 * TTL, check)  # two ttls: past the first expiry by a whole ttl
            latest = guard.lease
            assert latest.fencing_token == first.fencing_token
            assert latest.owner_token == first.owner_token
            assert latest.expires_at > first.expires_at
            assert len(seen) >= 3
        assert server.state(key)["held"] is False

    def test_renewals_use_fresh_request_ids_and_the_callers_token(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """token=, request_id= and a timedelta ttl= make the acquisition; renewals get new ids."""
        token, request_id = new_id().upper(), new_id().upper()
        ttl = timedelta(seconds=TTL)
        with sdk.lock(key, ttl=ttl, token=token, request_id=request_id) as guard:
            first = guard.lease
            assert (first.owner_token, first.ttl_seconds) == (token, TTL)
            renewed = wait_renewed(guard, first)
            assert renewed.fencing_token == first.fencing_token
            assert renewed.owner_token == token
        ids = [e.request.headers["X-Request-Id"] for e in wire.exchanges]
        assert ids[0] == request_id
        assert len(set(ids)) == len(ids)
        (release,) = wire.of("release")
        assert json.loads(release.request.content) == {
            "owner_token": token,
            "fencing_token": first.fencing_token,
        }
        assert release.status == 204

    @SYNC_ONLY
    def test_a_failed_renewal_is_retried(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """A renewal that cannot connect is retried before the deadline; the lease survives."""
        with sdk.lock(key, ttl=1.5) as guard:
            first = guard.lease
            wire.refuse = {"renew"}
            wait_for(lambda: wire.of("renew"), what="a refused renewal")
            wire.refuse = set()
            wait_renewed(guard, first)
            assert not guard.lost
            assert server.state(key)["held"] is True
        assert wire.of("renew")[0].status is None
        assert server.state(key)["held"] is False


class TestExit:
    def test_clean_exit_releases(self, sdk: Sdk, server: Locks, key: str) -> None:
        """Leaving the block releases the lease; the key keeps its last fencing token."""
        with sdk.lock(key, ttl=TTL) as guard:
            assert server.state(key)["held"] is True
        state = server.state(key)
        assert (state["held"], state["fencing_token"]) == (False, guard.lease.fencing_token)
        assert guard.lost is False
        assert guard.lost_reason is None

    def test_exception_propagates_unchanged_and_releases(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """An exception from the block propagates as itself, after the lease is released."""
        error = BlockError("from the block")
        with pytest.raises(BlockError) as raised, sdk.lock(key, ttl=TTL):
            raise error
        assert raised.value is error
        assert server.state(key)["held"] is False

    @SYNC_ONLY
    def test_exception_propagates_when_the_release_fails(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """A release refused after a takeover never masks the block's exception."""
        error = BlockError("from the block")

        def block() -> None:
            with sdk.lock(key, ttl=30):
                server.force_release(key)
                server.acquire(key, new_id())
                raise error

        with pytest.raises(BlockError) as raised:
            block()
        assert raised.value is error
        assert server.state(key)["fencing_token"] == 2


class TestLoss:
    def test_wait_lost_is_false_while_held(self, sdk: Sdk, key: str) -> None:
        """While the lease is held, wait_lost(timeout=0.2) returns False."""
        with sdk.lock(key, ttl=TTL) as guard:
            assert sdk.wait_lost(guard, 0.2) is False
            assert guard.lost is False
            assert guard.lost_reason is None

    def test_force_release_mid_block(self, sdk: Sdk, wire: Wire, server: Locks, key: str) -> None:
        """A force release makes the guard lost (LeaseNotHeldError); exit sends no release."""
        with sdk.lock(key, ttl=TTL) as guard:
            assert server.force_release(key).json()["released"] is True
            assert sdk.wait_lost(guard, WAIT) is True
            assert guard.lost is True
            assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        assert guard.lost is True
        assert wire.of("release") == []
        state = server.state(key)
        assert (state["held"], state["fencing_token"]) == (False, 1)

    def test_takeover_mid_block(self, sdk: Sdk, wire: Wire, server: Locks, key: str) -> None:
        """Force release then a new holder: the guard is lost and never releases their lease."""
        other = new_id()
        with sdk.lock(key, ttl=TTL) as guard:
            server.force_release(key)
            assert server.acquire(key, other).json()["fencing_token"] == 2
            assert sdk.wait_lost(guard, WAIT) is True
            assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
            assert guard.lease.fencing_token == 1
        assert wire.of("release") == []
        state = server.state(key)
        assert (state["held"], state["fencing_token"]) == (True, 2)
        assert server.release(key, other, 2).status_code == 204

    def test_exit_before_noticing_a_takeover(
        self,
        sdk: Sdk,
        wire: Wire,
        server: Locks,
        key: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Leaving before a renewal noticed the takeover: no error, lost, new lease untouched."""
        other = new_id()
        with sdk.lock(key, ttl=30) as guard:
            server.force_release(key)
            server.acquire(key, other)
            assert guard.lost is False  # nothing has told the guard yet
        assert guard.lost is True  # the refused release told it
        assert isinstance(guard.lost_reason, volcano.LeaseNotHeldError)
        (release,) = wire.of("release")
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "releasing the lease" in warning
        assert warning.count(release.request.headers["X-Request-Id"]) == 1
        assert server.state(key)["fencing_token"] == 2
        assert server.release(key, other, 2).status_code == 204

    def test_expiry_under_a_blocked_renewal_then_takeover(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """Renewals cut off: the lease expires, another owner takes it; the guard already knows."""
        other = new_id()
        with sdk.lock(key, ttl=0.5) as guard:  # short: it is meant to expire
            wire.refuse = {"renew"}
            wait_for(
                lambda: server.acquire(key, other).status_code == 200,
                what="the lease to expire on the server",
            )
            assert guard.lost is True  # never held by two: lost no later than the server says
            assert sdk.wait_lost(guard, 0) is True
            reason = guard.lost_reason
            assert isinstance(reason, volcano.LockLostError)
            assert isinstance(reason.__cause__, volcano.APIConnectionError)
            wire.refuse = set()
        assert wire.of("release") == []
        assert server.state(key)["fencing_token"] == 2
        assert server.release(key, other, 2).status_code == 204


class TestManyGuards:
    @SYNC_ONLY
    def test_fifty_guards_share_one_thread_and_stay_held(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """Fifty guards on one client: one renewal loop thread and a bounded few that send
        (never a thread per guard), every lease held past its expiry."""
        keys = [f"{key}-{i}" for i in range(50)]
        before = renewer_threads()
        senders_before = sender_threads()
        with contextlib.ExitStack() as stack:
            guards = [stack.enter_context(sdk.lock(k, ttl=1.5)) for k in keys]
            firsts = [guard.lease for guard in guards]
            assert renewer_threads() == before + 1

            def check() -> None:
                assert not any(guard.lost for guard in guards)

            hold(1.5 + 0.1, check)  # past every first lease's expiry
            for k, guard, first in zip(keys, guards, firsts, strict=True):
                state = server.state(k)
                assert (state["held"], state["fencing_token"]) == (True, 1)
                assert guard.lease.expires_at > first.expires_at
            assert renewer_threads() == before + 1
            assert sender_threads() - senders_before <= MAX_IN_FLIGHT < len(keys)
        assert not any(server.state(k)["held"] for k in keys)


@pytest.mark.anyio
class TestGuardsComingAndGoing:
    TTL = 10.0  # long enough that a loaded machine (load 15) loses no lease by its deadline
    GUARDS = 60
    SECONDS = 12.0

    async def test_guards_let_go_of_while_renewing_lose_no_other(
        self, aclient: volcano.AsyncClient, key: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Issue 34: sixty guards of one AsyncClient come and go for 12 s, each leaving its
        block about when its renewal is under way (a third into the ttl), so some leave
        between the answer and the loop taking it in. The loop never stops: no guard is lost
        and no re-acquire of a key just released is refused."""
        caplog.set_level(logging.WARNING, logger="volcano")
        lost: list[str] = []
        refused: list[str] = []
        cycles = 0
        end = time.monotonic() + self.SECONDS

        async def come_and_go(n: int) -> None:
            nonlocal cycles
            chance = random.Random(n)
            while time.monotonic() < end:
                try:
                    async with aclient.locks.with_lock(f"{key}-{n}", ttl=self.TTL) as guard:
                        await asyncio.sleep(chance.uniform(0.33, 0.36) * self.TTL)
                except volcano.LockHeldError as exc:
                    refused.append(str(exc))
                    continue
                cycles += 1
                if guard.lost:
                    lost.append(f"{guard.key}: {guard.lost_reason}")

        await asyncio.gather(*(come_and_go(n) for n in range(self.GUARDS)))
        assert cycles > self.GUARDS
        assert lost == []
        assert refused == []
        assert "renewer stopped" not in caplog.text


def batches(wire: Wire) -> list[list[str]]:
    """The keys of each batch renewal the SDK sent, in order."""
    return [
        [entry["key"] for entry in json.loads(e.request.content)["leases"]]
        for e in wire.of("renew")
        if e.request.url.path == "/v1/leases/renew"
    ]


class TestBatches:
    def test_guards_entered_together_are_renewed_together(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """Twenty guards entered one after another: their renewals fall due within a tenth of
        a second of each other and go out in batches, each lease renewed (held past its first
        expiry), in fewer requests than leases."""
        keys = [f"{key}-{i}" for i in range(20)]
        with contextlib.ExitStack() as stack:
            guards = [stack.enter_context(sdk.lock(k, ttl=3.0)) for k in keys]
            firsts = [guard.lease for guard in guards]
            for guard, first in zip(guards, firsts, strict=True):
                wait_renewed(guard, first)
            sent = batches(wire)
            assert max(len(batch) for batch in sent) >= 2, sent
            requests = wire.of("renew")
            alone = [
                e.request.url.path.split("/")[3]
                for e in requests
                if "/locks/" in e.request.url.path
            ]
            assert set(keys) == {k for batch in sent for k in batch} | set(alone)
            assert len(requests) < len(keys)
            assert not any(guard.lost for guard in guards)
        assert not any(server.state(k)["held"] for k in keys)

    def test_a_lease_refused_in_a_batch_loses_only_its_guard(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """One of three leases renewed together is force-released behind the SDK's back: the
        server refuses that entry, its guard is lost with LeaseNotHeldError, and the other two
        are renewed on."""
        keys = [f"{key}-{i}" for i in range(3)]
        with contextlib.ExitStack() as stack:
            guards = [stack.enter_context(sdk.lock(k, ttl=1.5)) for k in keys]
            assert server.force_release(keys[1]).json()["released"] is True
            assert sdk.wait_lost(guards[1], WAIT)
            assert isinstance(sdk.read(lambda: guards[1].lost_reason), volcano.LeaseNotHeldError)
            for guard in (guards[0], guards[2]):
                wait_renewed(guard, guard.lease)
                assert not guard.lost
        assert [server.state(k)["held"] for k in keys] == [False, False, False]


class TestMisuse:
    def test_guard_is_single_use(self, sdk: Sdk, server: Locks, key: str) -> None:
        """Entering a guard twice, or again after exit, raises GuardStateError."""
        guard = sdk.with_lock(key, ttl=TTL)
        with pytest.raises(volcano.GuardStateError):
            _ = guard.lease
        with sdk.entered(guard):
            with pytest.raises(volcano.GuardStateError, match="re-entrant"), sdk.entered(guard):
                pass
            assert server.state(key)["held"] is True
        assert server.state(key)["held"] is False
        with pytest.raises(volcano.GuardStateError), sdk.entered(guard):
            pass
        assert server.state(key)["held"] is False

    def test_failed_acquisition_raises_and_spends_the_guard(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """Entering on a held key raises LockHeldError; the guard cannot be retried."""
        server.acquire(key, new_id())
        guard = sdk.with_lock(key, ttl=TTL)
        with pytest.raises(volcano.LockHeldError), sdk.entered(guard):
            pytest.fail("the block ran without the lock")
        with pytest.raises(volcano.GuardStateError), sdk.entered(guard):
            pass

    @SYNC_ONLY
    def test_acquisition_is_retried_once(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """A lost acquisition answer is retried once with the same request; the guard holds."""
        wire.lose = ["acquire"]
        with sdk.lock(key, ttl=TTL) as guard:
            assert guard.lease.fencing_token == 1
        first, retry = wire.of("acquire")
        assert retry.request.headers["X-Request-Id"] == first.request.headers["X-Request-Id"]
        assert retry.request.content == first.request.content
        assert server.state(key)["held"] is False

    def test_closing_the_client_marks_guards_lost(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """close() inside a block: the guard is lost (ClientClosedError), exit is quiet; the
        sync client's renewal thread ends."""
        with sdk.lock(key, ttl=TTL) as guard:
            before = renewer_threads()
            sdk.close_client()
            assert sdk.wait_lost(guard, WAIT) is True
            assert isinstance(guard.lost_reason, volcano.ClientClosedError)
        if sdk.kind == "sync":
            assert renewer_threads() == before - 1
        assert wire.of("release") == []
