"""Waiting for a lock with the SDK (sync and async, one body), through the fault proxy.

A second party (`other`, straight to the server) holds and releases the key; a raw waiter
queues behind the SDK where order matters. Whether a request is in line is read from the
database. Waits stay under the blocking interface's patience (10 s).
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.databases import queued
from tests.support.proxy import FaultProxy
from tests.support.raw import Waiter, wait_for
from tests.support.sdk import PATIENCE, Sdk

TTL = 30.0


@pytest.fixture
def background() -> Iterator[Callable[..., concurrent.futures.Future[Any]]]:
    """Run a blocking SDK call in a thread of its own; its future."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        yield pool.submit


def in_line(target: LiveServer, key: str, count: int) -> None:
    wait_for(lambda: queued(target.database_url, key) == count, f"{count} in line for {key}")


def acquires(proxy: FaultProxy) -> list[dict[str, Any]]:
    """The bodies of the acquire requests that reached the proxy, with their request ids."""
    return [
        {**json.loads(request.body), "request_id": request.header("X-Request-Id")}
        for request in proxy.requests
        if request.path.endswith("/acquire")
    ]


class TestAcquireWaits:
    def test_gets_the_lock_when_its_holder_releases(
        self,
        sdk: Sdk,
        other: volcano.Client,
        target: LiveServer,
        background: Callable[..., concurrent.futures.Future[Any]],
        key: str,
    ) -> None:
        """acquire(wait=) is answered with the lease as soon as the holder releases."""
        held = other.locks.acquire(key, ttl=TTL)
        waiting = background(sdk.acquire, key, ttl=TTL, wait=8)
        in_line(target, key, 1)
        other.locks.release(key, held)
        lease = waiting.result(PATIENCE)
        assert lease.fencing_token == held.fencing_token + 1
        assert sdk.get(key).fencing_token == lease.fencing_token

    def test_lock_held_error_when_the_wait_runs_out(
        self, sdk: Sdk, other: volcano.Client, target: LiveServer, key: str
    ) -> None:
        """A wait that runs out raises LockHeldError, and leaves nobody in line."""
        other.locks.acquire(key, ttl=TTL)
        with pytest.raises(volcano.LockHeldError) as caught:
            sdk.acquire(key, ttl=TTL, wait=timedelta(milliseconds=300))
        assert caught.value.retry_after is not None
        assert queued(target.database_url, key) == 0

    def test_without_wait_the_request_is_the_seeds(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """An acquire without `wait` sends no wait_seconds at all."""
        sdk.acquire(key, ttl=TTL)
        (body,) = acquires(proxy)
        assert set(body) == {"owner_token", "ttl_seconds", "request_id"}

    def test_negative_wait_is_refused_before_sending(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """wait must be 0 or more: InvalidArgumentError, nothing sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="wait"):
            sdk.acquire(key, ttl=TTL, wait=-1)
        assert proxy.requests == []


class TestLongWaits:
    def test_a_long_wait_is_chained_and_keeps_its_place(
        self,
        sdk: Sdk,
        other: volcano.Client,
        target: LiveServer,
        proxy: FaultProxy,
        background: Callable[..., concurrent.futures.Future[Any]],
        monkeypatch: pytest.MonkeyPatch,
        key: str,
    ) -> None:
        """Requests of 0.3 s chain into a longer wait, keeping the place ahead of a later waiter."""
        monkeypatch.setattr("volcano._waiting.WAIT_PER_REQUEST", 0.3)
        held = other.locks.acquire(key, ttl=TTL)
        waiting = background(sdk.acquire, key, ttl=TTL, wait=8)
        in_line(target, key, 1)
        behind = Waiter(target.http(target.project), key, wait=8)
        in_line(target, key, 2)
        wait_for(lambda: len(acquires(proxy)) >= 4, "four requests in the chain")
        in_line(target, key, 2)
        other.locks.release(key, held)
        lease = waiting.result(PATIENCE)
        assert lease.fencing_token == held.fencing_token + 1
        sent = acquires(proxy)
        assert len({body["owner_token"] for body in sent}) == 1
        assert len({body["request_id"] for body in sent}) == len(sent)
        assert all(0 < body["wait_seconds"] <= 0.3 for body in sent)
        assert behind.response is None  # still waiting: it came later
        sdk.release(key, lease)
        assert behind.lease["fencing_token"] == lease.fencing_token + 1

    def test_the_request_timeout_stretches_over_the_wait(
        self,
        make_sdk: Callable[..., Sdk],
        other: volcano.Client,
        target: LiveServer,
        background: Callable[..., concurrent.futures.Future[Any]],
        key: str,
    ) -> None:
        """A client timeout of 1 s does not cut a wait of 3 s."""
        sdk = make_sdk(timeout=1.0)
        held = other.locks.acquire(key, ttl=TTL)
        waiting = background(sdk.acquire, key, ttl=TTL, wait=5)
        in_line(target, key, 1)
        concurrent.futures.wait([waiting], timeout=2.0)
        assert not waiting.done()
        other.locks.release(key, held)
        assert waiting.result(PATIENCE).fencing_token == held.fencing_token + 1


class TestWaitUnderFaults:
    def test_a_cut_wait_is_retried_once_and_keeps_its_place(
        self,
        sdk: Sdk,
        other: volcano.Client,
        target: LiveServer,
        proxy: FaultProxy,
        background: Callable[..., concurrent.futures.Future[Any]],
        key: str,
    ) -> None:
        """A connection cut mid-wait is retried with the same request; it keeps one place."""
        held = other.locks.acquire(key, ttl=TTL)
        proxy.on("POST", r"/acquire$").cut_after(1.5)
        waiting = background(sdk.acquire, key, ttl=TTL, wait=8)
        in_line(target, key, 1)
        behind = Waiter(target.http(target.project), key, wait=8)
        in_line(target, key, 2)
        wait_for(lambda: len(acquires(proxy)) == 2, "the retry")
        first, retry = acquires(proxy)
        assert retry == first  # the very same request, byte for byte in every field
        in_line(target, key, 2)
        other.locks.release(key, held)
        assert waiting.result(PATIENCE).fencing_token == held.fencing_token + 1
        assert behind.response is None

    def test_a_lost_answer_to_a_granted_wait_is_replayed(
        self,
        sdk: Sdk,
        other: volcano.Client,
        target: LiveServer,
        proxy: FaultProxy,
        background: Callable[..., concurrent.futures.Future[Any]],
        key: str,
    ) -> None:
        """The lease granted to a waiter whose answer was lost comes back on the retry."""
        held = other.locks.acquire(key, ttl=TTL)
        proxy.on("POST", r"/acquire$").drop_response()
        waiting = background(sdk.acquire, key, ttl=TTL, wait=8)
        in_line(target, key, 1)
        other.locks.release(key, held)
        lease = waiting.result(PATIENCE)
        assert lease.fencing_token == held.fencing_token + 1
        first, retry = proxy.requests
        assert retry.upstream_response is not None
        assert retry.upstream_response.header("Idempotent-Replayed") == "true"
        assert first.header("X-Request-Id") == retry.header("X-Request-Id")


class TestWithLockWaits:
    def test_a_guard_after_a_long_wait_renews_on_entry(
        self,
        sdk: Sdk,
        other: volcano.Client,
        target: LiveServer,
        proxy: FaultProxy,
        background: Callable[..., concurrent.futures.Future[Any]],
        key: str,
    ) -> None:
        """A guard whose lock came after more than a third of its ttl renews before the block."""
        held = other.locks.acquire(key, ttl=TTL)
        guard = sdk.with_lock(key, ttl=1.5, wait=8)
        entering = background(sdk.enter, guard)
        in_line(target, key, 1)
        concurrent.futures.wait([entering], timeout=0.6)  # more than a third of 1.5 s
        other.locks.release(key, held)
        entering.result(PATIENCE)
        try:
            operations = [request.path.rsplit("/", 1)[-1] for request in proxy.requests]
            assert operations[:2] == ["acquire", "renew"]
            assert not sdk.read(lambda: guard.lost)
            assert sdk.read(lambda: guard.lease).fencing_token == held.fencing_token + 1
        finally:
            sdk.exit(guard)
        assert other.locks.get(key).held is False

    def test_a_guard_answered_at_once_does_not_renew_on_entry(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """A free key's guard (wait or not) enters with the one acquire."""
        guard = sdk.with_lock(key, ttl=TTL, wait=8)
        sdk.enter(guard)
        try:
            assert [request.path.rsplit("/", 1)[-1] for request in proxy.requests] == ["acquire"]
        finally:
            sdk.exit(guard)
