"""Semaphores through the SDK, against the real server on both backends: `acquire(limit=)`,
`with_lock(limit=)`, slot waiters served in order, `LimitMismatchError` and the fence check
`check`. Each test runs with both clients (`sdk`)."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.databases import queued
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import Sdk

from .conftest import Wire


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """Threads for SDK calls that wait in line while the test goes on."""
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


def in_line(live_server: LiveServer, key: str, count: int) -> None:
    wait_for(lambda: queued(live_server.database_url, key) == count, f"{count} in line")


class TestSlots:
    def test_n_holders_and_the_next_one_is_refused(self, sdk: Sdk, key: str) -> None:
        """Three leases on a limit-3 key, tokens 1..3; a fourth gets LockHeldError; get shows
        the limit and every holder, never an owner token."""
        leases = [sdk.acquire(key, ttl=30, limit=3) for _ in range(3)]
        assert [lease.fencing_token for lease in leases] == [1, 2, 3]
        with pytest.raises(volcano.LockHeldError) as caught:
            sdk.acquire(key, ttl=30, limit=3)
        assert caught.value.retry_after is not None
        state = sdk.get(key)
        assert (state.held, state.limit, state.waiters, state.fencing_token) == (True, 3, 0, 3)
        assert [h.fencing_token for h in state.holders] == [1, 2, 3]
        assert [h.expires_at for h in state.holders] == [lease.expires_at for lease in leases]
        assert not any(lease.owner_token in repr(state) for lease in leases)

    def test_a_lost_answer_is_retried_into_the_same_slot(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """The acquire's answer is lost; its retry (same token, request id and limit) gets the
        slot the first attempt took, not a second one."""
        wire.lose = ["acquire"]
        lease = sdk.acquire(key, ttl=30, limit=2)
        sent = [json.loads(e.request.content) for e in wire.of("acquire")]
        assert len(sent) == 2
        assert sent[0] == sent[1]
        assert sent[0]["limit"] == 2
        holders = sdk.get(key).holders
        assert [h.fencing_token for h in holders] == [lease.fencing_token]

    def test_a_different_limit_while_in_use(self, sdk: Sdk, key: str) -> None:
        """LimitMismatchError carries the key's limit; once the key is free, a new one holds."""
        lease = sdk.acquire(key, ttl=30, limit=2)
        with pytest.raises(volcano.LimitMismatchError) as caught:
            sdk.acquire(key, ttl=30, limit=5, wait=3)
        assert caught.value.limit == 2
        assert caught.value.code == "limit_mismatch"
        sdk.release(key, lease)
        sdk.acquire(key, ttl=30, limit=5)
        assert sdk.get(key).limit == 5

    def test_force_release_ends_every_slot(self, sdk: Sdk, key: str) -> None:
        """force_release removes all holders and says how many and the highest token."""
        leases = [sdk.acquire(key, ttl=30, limit=4) for _ in range(3)]
        result = sdk.force_release(key)
        assert (result.released, result.released_count, result.fencing_token) == (True, 3, 3)
        assert sdk.get(key).holders == ()
        assert not any(sdk.check(key, lease.fencing_token) for lease in leases)

    def test_with_lock_holds_one_slot_and_renews_it(self, sdk: Sdk, key: str) -> None:
        """Two guards on a limit-2 key at once, each renewed past its ttl; leaving frees both."""
        with sdk.lock(key, ttl=0.6, limit=2) as first, sdk.lock(key, ttl=0.6, limit=2) as second:
            tokens = sdk.read(lambda: {first.lease.fencing_token, second.lease.fencing_token})
            assert tokens == {1, 2}
            assert not sdk.wait_lost(first, 1.5)  # three ttls: only renewals keep it
            assert sdk.check(key, 1)
            assert sdk.check(key, 2)
        assert sdk.get(key).holders == ()


class TestSlotWaiters:
    def test_freed_slots_go_to_waiters_in_arrival_order(
        self,
        sdk: Sdk,
        live_server: LiveServer,
        pool: concurrent.futures.ThreadPoolExecutor,
        key: str,
    ) -> None:
        """Two SDK waiters for a full limit-2 key: each release hands over one slot, to the
        first in line, and the other keeps waiting."""
        held = [sdk.acquire(key, ttl=30, limit=2) for _ in range(2)]
        first = pool.submit(sdk.acquire, key, ttl=30, limit=2, wait=8)
        in_line(live_server, key, 1)
        second = pool.submit(sdk.acquire, key, ttl=30, limit=2, wait=8)
        in_line(live_server, key, 2)
        assert sdk.get(key).waiters == 2
        sdk.release(key, held[0])
        assert first.result().fencing_token == 3
        assert not second.done()  # one slot freed, one waiter served
        assert sdk.get(key).waiters == 1
        sdk.release(key, held[1])
        assert second.result().fencing_token == 4

    def test_an_expiry_frees_exactly_one_slot(
        self,
        sdk: Sdk,
        live_server: LiveServer,
        pool: concurrent.futures.ThreadPoolExecutor,
        key: str,
    ) -> None:
        """Of two holders, the short lease expires: the first waiter gets its slot, the second
        still waits, and the expired token is no longer live."""
        short = sdk.acquire(key, ttl=0.5, limit=2)
        long = sdk.acquire(key, ttl=30, limit=2)
        first = pool.submit(sdk.acquire, key, ttl=30, limit=2, wait=8)
        in_line(live_server, key, 1)
        second = pool.submit(sdk.acquire, key, ttl=30, limit=2, wait=8)
        in_line(live_server, key, 2)
        assert first.result().fencing_token == 3
        assert not second.done()
        assert not sdk.check(key, short.fencing_token)
        assert sdk.check(key, long.fencing_token)
        sdk.release(key, long)
        assert second.result().fencing_token == 4


class TestCheck:
    def test_live_then_dead_after_release(self, sdk: Sdk, server: Locks, key: str) -> None:
        """check is True for a live lease and False after its release, as the server says."""
        lease = sdk.acquire(key, ttl=30)
        assert sdk.check(key, lease.fencing_token) is True
        assert server.check(key, lease.fencing_token).json()["live"] is True
        sdk.release(key, lease)
        assert sdk.check(key, lease.fencing_token) is False

    def test_dead_after_expiry(self, sdk: Sdk, key: str) -> None:
        """An expired lease's token is not live."""
        lease = sdk.acquire(key, ttl=0.2, limit=3)
        wait_for(lambda: not sdk.check(key, lease.fencing_token), "the lease expired")
        assert not sdk.get(key).held

    def test_dead_after_a_takeover_by_force(self, sdk: Sdk, server: Locks, key: str) -> None:
        """After a force release and a new holder, the old token is dead and the new one live."""
        old = sdk.acquire(key, ttl=30)
        server.force_release(key)
        assert server.acquire(key, new_id(), 30).status_code == 200
        assert sdk.check(key, old.fencing_token) is False
        assert sdk.check(key, old.fencing_token + 1) is True

    def test_a_token_never_issued_is_not_live(self, sdk: Sdk, key: str) -> None:
        """A key never acquired: any token is False, not an error."""
        assert sdk.check(key, 1) is False
        assert sdk.check(key, 2**53 - 1) is False
