"""Retry-once: acquire repeats a transport failure or a 503 exactly once, byte for byte.

Tests that take `sdk` run with Client and AsyncClient alike (tests/support/sdk.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import EXPIRES, REQUEST_ID, TOKEN, FakeApi, FakeClock, error, fail, raw

if TYPE_CHECKING:
    from collections.abc import Callable

NOT_RETRIED = [
    error(500, "internal"),
    error(429, "rate_limited", retry_after="1"),
    error(409, "lock_held", retry_after="5"),
    error(409, "request_id_reused"),
    error(400, "invalid_request"),
    error(401, "unauthorized"),
    error(403, "forbidden"),
    error(404, "not_found"),
    error(422, "validation_error"),
    raw(502, b"bad gateway"),
    raw(200, b"not json"),
]
NOT_RETRIED_IDS = [
    "500",
    "429",
    "409",
    "409-reused",
    "400",
    "401",
    "403",
    "404",
    "422",
    "502",
    "200-bad",
]

RETRIED = [
    fail(httpx.ConnectError("refused")),
    fail(httpx.ReadTimeout("slow")),
    fail(httpx.RemoteProtocolError("peer closed")),
    error(503, "unavailable"),
    raw(503, b"<html>upstream unavailable</html>"),
]
RETRIED_IDS = ["connect", "read-timeout", "protocol", "503", "503-html"]


def fingerprint(request: httpx.Request) -> tuple[object, ...]:
    """Everything the retry must repeat exactly: method, URL, credentials, ids and body."""
    headers = request.headers
    return (
        request.method,
        str(request.url),
        headers["apikey"],
        headers["Authorization"],
        headers["X-Request-Id"],
        headers["User-Agent"],
        request.content,
    )


def earlier_errors(err: BaseException) -> list[volcano.Error]:
    """The volcano errors in err's __context__ chain (what was being handled when it rose)."""
    found = []
    seen = err.__context__
    while seen is not None:
        if isinstance(seen, volcano.Error):
            found.append(seen)
        seen = seen.__context__
    return found


def lease() -> volcano.LockLease:
    return volcano.LockLease(
        key="k", owner_token=TOKEN, fencing_token=7, expires_at=EXPIRES, ttl_seconds=30
    )


class TestAcquireRetry:
    @pytest.mark.parametrize("first", RETRIED, ids=RETRIED_IDS)
    def test_retried_once_identically(
        self, sdk: Sdk, fake_api: FakeApi, first: Callable[..., object]
    ) -> None:
        """A transport failure or 503, then success: two identical requests, and the lease."""
        fake_api.then(first)
        lease = sdk.acquire("k", ttl=30, token=TOKEN, request_id=REQUEST_ID)
        assert len(fake_api.requests) == 2
        assert fingerprint(fake_api.requests[0]) == fingerprint(fake_api.requests[1])
        assert fake_api.requests[1].headers["X-Request-Id"] == REQUEST_ID
        assert lease.owner_token == TOKEN

    def test_generated_identifiers_are_reused_by_the_retry(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """Without token= or request_id=, the retry still repeats the ones made for the call."""
        fake_api.then(fail(httpx.ConnectError("refused")))
        lease = client.locks.acquire("k", ttl=30)
        assert fingerprint(fake_api.requests[0]) == fingerprint(fake_api.requests[1])
        assert f'"owner_token":"{lease.owner_token}"'.encode() in fake_api.requests[0].content

    @pytest.mark.parametrize(
        ("retry_after", "pause"), [(None, 0.1), ("1", 1.0), ("30", 2.0), ("0", 0.0)]
    )
    def test_pause_after_503(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        clock: FakeClock,
        retry_after: str | None,
        pause: float,
    ) -> None:
        """Before retrying a 503 it waits Retry-After, at most 2 s (0.1 s without one)."""
        fake_api.then(error(503, "unavailable", retry_after=retry_after))
        client.locks.acquire("k", ttl=30)
        assert clock.sleeps == [pause]

    def test_short_pause_after_transport_failure(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """After a transport failure it waits a moment (0.05 s) before the retry."""
        fake_api.then(fail(httpx.ConnectError("refused")))
        client.locks.acquire("k", ttl=30)
        assert clock.sleeps == [0.05]

    def test_both_attempts_failing_raises_the_second(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """When the retry fails too, its error is raised, with the first as its context."""
        first, second = httpx.ConnectError("one"), httpx.ReadTimeout("two")
        fake_api.then(fail(first), fail(second))
        with pytest.raises(volcano.APITimeoutError) as caught:
            sdk.acquire("k", ttl=30, token=TOKEN, request_id=REQUEST_ID)
        assert len(fake_api.requests) == 2
        assert caught.value.__cause__ is second
        first_error = earlier_errors(caught.value)[0]
        assert isinstance(first_error, volcano.APIConnectionError)
        assert first_error.__cause__ is first
        assert "first attempt failed with APIConnectionError" in caught.value.__notes__[0]
        assert caught.value.request_id == REQUEST_ID

    def test_a_503_then_a_transport_failure(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A 503, then a transport failure: the second is raised, the 503 as its context."""
        fake_api.then(error(503, "unavailable"), fail(httpx.ConnectError("x")))
        with pytest.raises(volcano.APIConnectionError) as caught:
            sdk.acquire("k", ttl=30)
        assert [type(e) for e in earlier_errors(caught.value)] == [volcano.ServiceUnavailableError]
        assert len(fake_api.requests) == 2

    def test_only_once(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Two 503s in a row: the second is raised; there is no third attempt."""
        fake_api.then(error(503, "unavailable"), error(503, "unavailable"))
        with pytest.raises(volcano.ServiceUnavailableError):
            client.locks.acquire("k", ttl=30)
        assert len(fake_api.requests) == 2

    def test_retry_that_meets_a_conflict_raises_it(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A 503 then a 409: the 409 is raised, not retried again."""
        fake_api.then(error(503, "unavailable"), error(409, "lock_held"))
        with pytest.raises(volcano.LockHeldError):
            client.locks.acquire("k", ttl=30)
        assert len(fake_api.requests) == 2

    @pytest.mark.parametrize("answer", NOT_RETRIED, ids=NOT_RETRIED_IDS)
    def test_other_failures_are_not_retried(
        self, sdk: Sdk, fake_api: FakeApi, clock: FakeClock, answer: Callable[..., object]
    ) -> None:
        """500, 429, 409, other 4xx and broken bodies are raised after a single request."""
        fake_api.then(answer)
        with pytest.raises(volcano.APIStatusError):
            sdk.acquire("k", ttl=30)
        assert len(fake_api.requests) == 1
        assert clock.sleeps == []


class TestOtherMethodsNeverRetry:
    @pytest.mark.parametrize("answer", RETRIED, ids=RETRIED_IDS)
    @pytest.mark.parametrize("operation", ["renew", "release", "get", "force_release"])
    def test_single_attempt(
        self,
        sdk: Sdk,
        fake_api: FakeApi,
        clock: FakeClock,
        operation: str,
        answer: Callable[..., object],
    ) -> None:
        """renew, release, get and force_release make one request, whatever the failure."""
        fake_api.then(answer)
        calls = {
            "renew": lambda: sdk.renew("k", lease()),
            "release": lambda: sdk.release("k", lease()),
            "get": lambda: sdk.get("k"),
            "force_release": lambda: sdk.force_release("k"),
        }
        with pytest.raises(volcano.Error):
            calls[operation]()
        assert len(fake_api.requests) == 1
        assert clock.sleeps == []
