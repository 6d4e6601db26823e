"""Single requests through the fault proxy: lost answers, 503s, errors that must not be retried,
and a server slower than the client's timeout.

The contract: acquire retries a transport failure (timeout included) or a 503 exactly once, by
repeating the very same request; nothing else is retried, and no other method retries. Each test
counts what reached the proxy, so a missing or extra retry fails it, and asks the server (not
through the proxy) what it recorded.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import httpx
import pytest

import volcano
from tests.support.proxy import FaultProxy, RecordedRequest
from tests.support.sdk import PATIENCE, Sdk

TTL = 30.0
"""Long enough that no lease here expires while a test looks at it."""


def new_id() -> str:
    return str(uuid.uuid4())


def to(proxy: FaultProxy, name: str) -> list[RecordedRequest]:
    """The requests for operation `name` that reached the proxy."""
    return [r for r in proxy.requests if operation_of(r) == name]


def operation_of(request: RecordedRequest) -> str:
    if request.method == "GET":
        return "get"
    if request.method == "DELETE":
        return "force_release"
    return request.path.rsplit("/", 1)[-1]


def replayed(request: RecordedRequest) -> bool | None:
    """Whether the server answered `request` as a replay; None if it never answered it."""
    if request.upstream_response is None:
        return None
    return request.upstream_response.header("Idempotent-Replayed") == "true"


def assert_same_request(first: RecordedRequest, retry: RecordedRequest) -> None:
    """The retry repeats the first attempt exactly: bytes, then each field the contract names."""
    for name in ("apikey", "Authorization", "X-Request-Id"):
        assert retry.header(name) == first.header(name), name
        assert first.header(name), name
    assert (retry.method, retry.target) == (first.method, first.target)  # the key
    first_body: dict[str, Any] = json.loads(first.body)
    retry_body: dict[str, Any] = json.loads(retry.body)
    assert retry_body["owner_token"] == first_body["owner_token"]
    assert retry_body["ttl_seconds"] == first_body["ttl_seconds"]
    assert retry_body == first_body
    assert retry.raw == first.raw


def assert_one_acquisition(other: volcano.Client, key: str, lease: volcano.LockLease) -> None:
    """The server holds `lease` on a fresh key: exactly one acquisition (fencing token 1)."""
    state = other.locks.get(key)
    assert (state.held, state.fencing_token) == (True, 1)
    assert lease.fencing_token == 1
    assert state.expires_at is not None
    assert state.expires_at >= lease.expires_at


class TestLostAcquireAnswer:
    @pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
    def test_retry_recovers_the_committed_lease(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str, rst: bool
    ) -> None:
        """An acquire answer lost after the commit: the one retry is replayed, same lease."""
        proxy.on("POST", r"/acquire$").drop_response(rst=rst)
        lease = sdk.acquire(key, ttl=TTL)
        first, retry = to(proxy, "acquire")
        assert (first.action, first.upstream_status) == ("drop_response", 200)
        assert replayed(first) is False
        assert replayed(retry) is True
        assert retry.upstream_response is not None
        assert retry.upstream_response.json() == first.upstream_response.json()  # type: ignore[union-attr]
        assert_same_request(first, retry)
        assert lease.fencing_token == first.upstream_response.json()["fencing_token"]  # type: ignore[union-attr]
        assert lease.owner_token == first.json()["owner_token"]
        assert_one_acquisition(other, key, lease)

    def test_both_answers_lost_then_the_same_ids_recover_the_lease(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """Both attempts lost: a volcano.APIConnectionError; the same token and request id then
        recover exactly the lease the first attempt created."""
        owner, request_id = new_id(), new_id()
        proxy.on("POST", r"/acquire$").drop_response(times=2)
        with pytest.raises(volcano.APIConnectionError) as caught:
            sdk.acquire(key, ttl=TTL, token=owner, request_id=request_id)
        assert not isinstance(caught.value, httpx.HTTPError)
        assert caught.value.request_id == request_id
        assert len(to(proxy, "acquire")) == 2

        lease = sdk.acquire(key, ttl=TTL, token=owner, request_id=request_id)
        first, retry, recovery = to(proxy, "acquire")
        assert [replayed(first), replayed(retry), replayed(recovery)] == [False, True, True]
        assert recovery.raw == first.raw
        assert lease.owner_token == owner
        assert lease.fencing_token == first.upstream_response.json()["fencing_token"]  # type: ignore[union-attr]
        assert_one_acquisition(other, key, lease)

    def test_same_token_with_a_new_request_id_recovers_and_extends(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """Both attempts lost, then the same owner token under a fresh request id: the same lease
        (same fencing token) with its expiry moved later, not a second acquisition."""
        owner = new_id()
        proxy.on("POST", r"/acquire$").drop_response(times=2)
        with pytest.raises(volcano.APIConnectionError):
            sdk.acquire(key, ttl=TTL, token=owner)
        lost = to(proxy, "acquire")[0].upstream_response
        assert lost is not None

        lease = sdk.acquire(key, ttl=TTL, token=owner)
        assert replayed(to(proxy, "acquire")[2]) is False
        assert lease.fencing_token == lost.json()["fencing_token"]
        assert lease.expires_at > datetime.fromisoformat(lost.json()["expires_at"])
        assert_one_acquisition(other, key, lease)


class TestUnavailableOnce:
    @pytest.mark.parametrize(
        "fault",
        [
            pytest.param(lambda rule: rule.error_response(503, retry_after=None), id="api"),
            pytest.param(lambda rule: rule.error_response(503), id="api-retry-after"),
            pytest.param(lambda rule: rule.html_error(503), id="load-balancer-html"),
        ],
    )
    def test_retried_once_with_the_same_request(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str, fault: Any
    ) -> None:
        """A 503 once (the API's JSON or a load balancer's HTML page): one retry, byte-identical
        in owner token, request id, key, ttl and credentials, and it acquires."""
        fault(proxy.on("POST", r"/acquire$"))
        lease = sdk.acquire(key, ttl=TTL)
        first, retry = to(proxy, "acquire")
        assert (first.client_status, first.upstream_response) == (503, None)
        assert replayed(retry) is False  # the 503 never reached the server
        assert_same_request(first, retry)
        assert_one_acquisition(other, key, lease)

    def test_a_second_503_is_raised(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """Two 503s in a row: ServiceUnavailableError after exactly two attempts."""
        proxy.on("POST", r"/acquire$").error_response(503, retry_after=None, times=2)
        with pytest.raises(volcano.ServiceUnavailableError):
            sdk.acquire(key, ttl=TTL)
        first, retry = to(proxy, "acquire")
        assert_same_request(first, retry)
        assert other.locks.get(key).fencing_token is None


class TestNotRetried:
    @pytest.mark.parametrize(
        ("status", "error"),
        [
            (500, volcano.InternalServerError),
            (502, volcano.InternalServerError),
            (504, volcano.InternalServerError),
            (429, volcano.RateLimitError),
            (409, volcano.LockHeldError),
        ],
    )
    def test_acquire_error_statuses(
        self,
        sdk: Sdk,
        proxy: FaultProxy,
        other: volcano.Client,
        key: str,
        status: int,
        error: type[volcano.APIStatusError],
    ) -> None:
        """An acquire answered 500, 502, 504, 429 or 409 raises at once: one request only."""
        proxy.on("POST", r"/acquire$").error_response(status)
        with pytest.raises(error) as caught:
            sdk.acquire(key, ttl=TTL)
        assert caught.value.status_code == status
        assert len(to(proxy, "acquire")) == 1
        assert other.locks.get(key).fencing_token is None

    @pytest.mark.parametrize(
        ("fault", "error", "reaches_server"),
        [
            pytest.param(
                lambda rule: rule.drop_response(), volcano.APIConnectionError, True, id="lost"
            ),
            pytest.param(
                lambda rule: rule.reset_before_forward(),
                volcano.APIConnectionError,
                False,
                id="reset",
            ),
            pytest.param(
                lambda rule: rule.error_response(503, retry_after=None),
                volcano.ServiceUnavailableError,
                False,
                id="503",
            ),
            pytest.param(
                lambda rule: rule.html_error(503),
                volcano.ServiceUnavailableError,
                False,
                id="html-503",
            ),
        ],
    )
    @pytest.mark.parametrize("name", ["renew", "release", "get", "force_release"])
    def test_other_operations_never_retry(
        self,
        sdk: Sdk,
        proxy: FaultProxy,
        other: volcano.Client,
        key: str,
        name: str,
        fault: Any,
        error: type[volcano.Error],
        reaches_server: bool,
    ) -> None:
        """renew, release, get and force_release after a transport failure or a 503: raised at
        once, one request; the server shows whether that one request took effect."""
        lease = sdk.acquire(key, ttl=TTL)
        method, path = {
            "renew": ("POST", r"/renew$"),
            "release": ("POST", r"/release$"),
            "get": ("GET", r"^/v1/locks/"),
            "force_release": ("DELETE", r"^/v1/locks/"),
        }[name]
        fault(proxy.on(method, path))
        call = {
            "renew": lambda: sdk.renew(key, lease, ttl=TTL * 2),
            "release": lambda: sdk.release(key, lease),
            "get": lambda: sdk.get(key),
            "force_release": lambda: sdk.force_release(key),
        }[name]
        with pytest.raises(error):
            call()
        [sent] = to(proxy, name)
        assert (sent.upstream_response is not None) == reaches_server

        state = other.locks.get(key)
        assert state.fencing_token == lease.fencing_token
        took_effect = reaches_server and name != "get"
        if name in ("release", "force_release"):
            assert state.held is not took_effect
        else:
            assert state.held
            assert state.expires_at is not None
            assert (state.expires_at > lease.expires_at) is took_effect


class TestSlowServer:
    TIMEOUT = 0.5
    SLOW = 1.5

    def test_first_answer_too_slow_then_the_retry_recovers(
        self, make_sdk: Any, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """The first answer slower than the timeout: the retry, answered at once, is replayed
        and returns the lease the first attempt created."""
        sdk = make_sdk(timeout=self.TIMEOUT)
        proxy.on("POST", r"/acquire$").delay_response(self.SLOW)
        lease = sdk.acquire(key, ttl=TTL)
        first, retry = to(proxy, "acquire")
        assert first.upstream_status == 200
        assert replayed(retry) is True
        assert_same_request(first, retry)
        assert_one_acquisition(other, key, lease)

    def test_both_answers_too_slow_then_the_same_ids_recover(
        self, make_sdk: Any, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """Both answers slower than the timeout: volcano.APITimeoutError; the same token and
        request id then recover exactly the lease the first attempt created."""
        sdk = make_sdk(timeout=self.TIMEOUT)
        owner, request_id = new_id(), new_id()
        proxy.on("POST", r"/acquire$").delay_response(self.SLOW, times=2)
        with pytest.raises(volcano.APITimeoutError) as caught:
            sdk.acquire(key, ttl=TTL, token=owner, request_id=request_id)
        assert not isinstance(caught.value, httpx.HTTPError)
        assert caught.value.request_id == request_id
        assert len(to(proxy, "acquire")) == 2

        lease = sdk.acquire(key, ttl=TTL, token=owner, request_id=request_id)
        first, retry, recovery = to(proxy, "acquire")
        assert [replayed(first), replayed(retry), replayed(recovery)] == [False, True, True]
        assert (lease.owner_token, lease.fencing_token) == (owner, 1)
        assert_one_acquisition(other, key, lease)

    def test_original_arriving_after_the_retry_changes_nothing(
        self, make_sdk: Any, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """The first attempt held on its way in past the timeout: the retry acquires, and the
        original, reaching the server later, is answered as a replay of that acquisition."""
        sdk = make_sdk(timeout=self.TIMEOUT)
        proxy.on("POST", r"/acquire$").delay(self.SLOW)
        lease = sdk.acquire(key, ttl=TTL)
        first, retry = to(proxy, "acquire")
        assert replayed(retry) is False
        proxy.wait_until(lambda _: first.upstream_response is not None, PATIENCE, "the original")
        assert replayed(first) is True
        assert first.upstream_response is not None
        assert retry.upstream_response is not None
        assert first.upstream_response.json() == retry.upstream_response.json()
        assert_one_acquisition(other, key, lease)
