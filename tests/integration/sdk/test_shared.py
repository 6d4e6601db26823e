"""Shared locks through the SDK, against the real server on both backends: `acquire(shared=)`,
`with_lock(shared=)`, the holders' `LockMode`, fair waiting across modes, and the errors of the
two new codes. Each test runs with both clients (`sdk`)."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.databases import queued
from tests.support.raw import wait_for
from tests.support.sdk import Sdk

from .conftest import Wire

SHARED, EXCLUSIVE = volcano.LockMode.SHARED, volcano.LockMode.EXCLUSIVE


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """Threads for SDK calls that wait in line while the test goes on."""
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


def in_line(live_server: LiveServer, key: str, count: int) -> None:
    wait_for(lambda: queued(live_server.database_url, key) == count, f"{count} in line")


def modes(sdk: Sdk, key: str) -> list[tuple[int, volcano.LockMode]]:
    return [(h.fencing_token, h.mode) for h in sdk.get(key).holders]


class TestSharedLeases:
    def test_shared_holders_hold_at_once_and_show_their_mode(self, sdk: Sdk, key: str) -> None:
        """Three shared leases, tokens 1..3, each holder SHARED; an exclusive acquire is
        LockHeldError while they hold."""
        leases = [sdk.acquire(key, ttl=30, shared=True) for _ in range(3)]
        assert [lease.fencing_token for lease in leases] == [1, 2, 3]
        assert sorted(modes(sdk, key)) == [(1, SHARED), (2, SHARED), (3, SHARED)]
        with pytest.raises(volcano.LockHeldError) as caught:
            sdk.acquire(key, ttl=30)
        assert caught.value.retry_after is not None
        assert "held shared" in caught.value.message

    def test_an_exclusive_holder_shows_its_mode_and_keeps_readers_out(
        self, sdk: Sdk, key: str
    ) -> None:
        """An exclusive lease is EXCLUSIVE in get; a shared acquire is LockHeldError."""
        sdk.acquire(key, ttl=30)
        assert modes(sdk, key) == [(1, EXCLUSIVE)]
        with pytest.raises(volcano.LockHeldError):
            sdk.acquire(key, ttl=30, shared=True)

    def test_a_lost_answer_is_retried_into_the_same_shared_lease(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """The shared acquire's answer is lost; its retry (same body, `shared` in it) gets the
        lease the first attempt took, not a second one."""
        wire.lose = ["acquire"]
        lease = sdk.acquire(key, ttl=30, shared=True)
        sent = [json.loads(e.request.content) for e in wire.of("acquire")]
        assert len(sent) == 2
        assert sent[0] == sent[1]
        assert sent[0]["shared"] is True
        assert modes(sdk, key) == [(lease.fencing_token, SHARED)]

    def test_an_exclusive_acquire_sends_no_shared_field(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """A plain acquire's body is the one a client without shared locks sends."""
        sdk.acquire(key, ttl=30)
        (exchange,) = wire.of("acquire")
        assert "shared" not in json.loads(exchange.request.content)

    def test_a_mode_change_by_the_same_token_is_mode_mismatch(self, sdk: Sdk, key: str) -> None:
        """Acquiring exclusive with a shared lease's token raises ModeMismatchError; the
        shared lease stays."""
        lease = sdk.acquire(key, ttl=30, shared=True)
        with pytest.raises(volcano.ModeMismatchError) as caught:
            sdk.acquire(key, ttl=30, token=lease.owner_token)
        assert (caught.value.status_code, caught.value.code) == (409, "mode_mismatch")
        assert modes(sdk, key) == [(lease.fencing_token, SHARED)]
        again = sdk.acquire(key, ttl=60, shared=True, token=lease.owner_token)
        assert again.fencing_token == lease.fencing_token

    def test_shared_on_a_semaphore_is_shared_with_limit(self, sdk: Sdk, key: str) -> None:
        """A shared acquire of a key in use as a semaphore raises SharedWithLimitError, and
        so does a limit on a key held shared."""
        semaphore = sdk.acquire(key, ttl=30, limit=2)
        with pytest.raises(volcano.SharedWithLimitError) as caught:
            sdk.acquire(key, ttl=30, shared=True)
        assert caught.value.code == "shared_with_limit"
        sdk.release(key, semaphore)
        sdk.acquire(key, ttl=30, shared=True)
        with pytest.raises(volcano.SharedWithLimitError):
            sdk.acquire(key, ttl=30, limit=2)

    def test_shared_with_a_limit_is_refused_before_sending(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """shared=True with limit=2 is InvalidArgumentError, and nothing is sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="do not mix"):
            sdk.acquire(key, ttl=30, shared=True, limit=2)
        with pytest.raises(volcano.InvalidArgumentError, match="shared must be True or False"):
            sdk.acquire(key, ttl=30, shared="yes")
        assert wire.of("acquire") == []

    def test_with_lock_holds_a_shared_lease_and_renews_it(self, sdk: Sdk, key: str) -> None:
        """Two shared guards at once, each renewed past its ttl; leaving frees both."""
        with (
            sdk.lock(key, ttl=0.6, shared=True) as first,
            sdk.lock(key, ttl=0.6, shared=True) as second,
        ):
            tokens = sdk.read(lambda: {first.lease.fencing_token, second.lease.fencing_token})
            assert tokens == {1, 2}
            assert not sdk.wait_lost(first, 1.5)  # three ttls: only renewals keep it
            assert sorted(modes(sdk, key)) == [(1, SHARED), (2, SHARED)]
        assert sdk.get(key).holders == ()

    def test_listing_and_watching_show_the_mode(self, sdk: Sdk, key: str) -> None:
        """list and watch report each holder's mode, as get does."""
        stream = sdk.watch(key)
        try:
            assert stream.next().holders == ()
            sdk.acquire(key, ttl=30, shared=True)
            assert [h.mode for h in stream.next().holders] == [SHARED]
        finally:
            stream.close()
        (listed,) = sdk.listed(key)
        assert [h.mode for h in listed.holders] == [SHARED]


class TestWaiting:
    def test_a_waiting_exclusive_request_is_not_overtaken_by_later_shared_ones(
        self,
        sdk: Sdk,
        live_server: LiveServer,
        pool: concurrent.futures.ThreadPoolExecutor,
        key: str,
    ) -> None:
        """A shared holder; an exclusive waiter; a later shared waiter. The release hands the
        key to the exclusive waiter, and the shared one waits for it."""
        reader = sdk.acquire(key, ttl=30, shared=True)
        writer = pool.submit(sdk.acquire, key, ttl=30, wait=8)
        in_line(live_server, key, 1)
        with pytest.raises(volcano.LockHeldError):
            sdk.acquire(key, ttl=30, shared=True)
        late = pool.submit(sdk.acquire, key, ttl=30, shared=True, wait=8)
        in_line(live_server, key, 2)
        sdk.release(key, reader)
        assert writer.result().fencing_token == 2
        assert modes(sdk, key) == [(2, EXCLUSIVE)]
        assert sdk.get(key).waiters == 1
        sdk.release(key, writer.result())
        assert late.result().fencing_token == 3

    def test_shared_waiters_at_the_head_are_served_together(
        self,
        sdk: Sdk,
        live_server: LiveServer,
        pool: concurrent.futures.ThreadPoolExecutor,
        key: str,
    ) -> None:
        """Two shared waiters behind an exclusive holder both get the key by its release."""
        holder = sdk.acquire(key, ttl=30)
        readers = []
        for count in (1, 2):
            readers.append(pool.submit(sdk.acquire, key, ttl=30, shared=True, wait=8))
            in_line(live_server, key, count)
        sdk.release(key, holder)
        assert sorted(reader.result().fencing_token for reader in readers) == [2, 3]
        assert sorted(modes(sdk, key)) == [(2, SHARED), (3, SHARED)]
