"""Every answer and every httpx failure becomes an SDK value or a volcano error."""

from __future__ import annotations

import inspect
import pickle
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import (
    EXPIRES,
    REQUEST_ID,
    SERVER_REQUEST_ID,
    TOKEN,
    FakeApi,
    body,
    error,
    fail,
    raw,
)

if TYPE_CHECKING:
    from collections.abc import Callable

DOCUMENTED = [
    (400, "invalid_request", volcano.BadRequestError),
    (401, "unauthorized", volcano.AuthenticationError),
    (403, "forbidden", volcano.PermissionDeniedError),
    (404, "not_found", volcano.NotFoundError),
    (405, "method_not_allowed", volcano.MethodNotAllowedError),
    (409, "lock_held", volcano.LockHeldError),
    (409, "lease_not_held", volcano.LeaseNotHeldError),
    (409, "limit_mismatch", volcano.LimitMismatchError),
    (409, "mode_mismatch", volcano.ModeMismatchError),
    (409, "shared_with_limit", volcano.SharedWithLimitError),
    (409, "request_id_reused", volcano.RequestIdReusedError),
    (409, "a_newer_code", volcano.ConflictError),
    (413, "payload_too_large", volcano.PayloadTooLargeError),
    (422, "validation_error", volcano.UnprocessableEntityError),
    (429, "rate_limited", volcano.RateLimitError),
    (500, "internal", volcano.InternalServerError),
    (503, "unavailable", volcano.ServiceUnavailableError),
]

OPERATIONS: dict[str, Callable[[volcano.Client], object]] = {
    "acquire": lambda c: c.locks.acquire("daily-report", ttl=30, token=TOKEN),
    "renew": lambda c: c.locks.renew("daily-report", _lease()),
    "release": lambda c: c.locks.release("daily-report", _lease()),
    "get": lambda c: c.locks.get("daily-report"),
    "force_release": lambda c: c.locks.force_release("daily-report"),
    "check": lambda c: c.locks.check("daily-report", 7),
}


def _lease() -> volcano.LockLease:
    return volcano.LockLease(
        key="daily-report",
        owner_token=TOKEN,
        fencing_token=7,
        expires_at=EXPIRES,
        ttl_seconds=30,
    )


def httpx_exception_classes() -> list[type[Exception]]:
    """Every exception class httpx exports, so a new one cannot slip through unmapped."""
    return [
        obj
        for name in httpx.__all__
        if inspect.isclass(obj := getattr(httpx, name)) and issubclass(obj, Exception)
    ]


def make_httpx_exception(cls: type[Exception]) -> Exception:
    request = httpx.Request("GET", "https://volcano.test/v1/locks/k")
    if issubclass(cls, httpx.HTTPStatusError):
        return cls("status", request=request, response=httpx.Response(500, request=request))
    if issubclass(cls, httpx.RequestError):
        return cls("boom", request=request)
    try:
        return cls("boom")
    except TypeError:  # StreamConsumed and friends take no message
        return cls()


class TestStatusMapping:
    @pytest.mark.parametrize(("status", "code", "cls"), DOCUMENTED)
    def test_documented_status(
        self, client: volcano.Client, fake_api: FakeApi, status: int, code: str, cls: type
    ) -> None:
        """Each documented status and code raises its own class with the body's fields."""
        fake_api.then(error(status, code, message="what went wrong", retry_after="3"))
        with pytest.raises(volcano.APIStatusError) as caught:
            client.locks.get("daily-report")
        err = caught.value
        assert type(err) is cls
        assert (err.status_code, err.code, err.message) == (status, code, "what went wrong")
        assert err.request_id == SERVER_REQUEST_ID
        assert err.retry_after == 3.0

    @pytest.mark.parametrize("operation", sorted(OPERATIONS))
    @pytest.mark.parametrize(("status", "code", "cls"), DOCUMENTED)
    def test_every_operation_maps_every_status(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        operation: str,
        status: int,
        code: str,
        cls: type,
    ) -> None:
        """Whatever the operation, a status maps to the same class (nothing is swallowed)."""
        fake_api.then(error(status, code), error(status, code))  # acquire may retry a 503
        with pytest.raises(cls):
            OPERATIONS[operation](client)

    @pytest.mark.parametrize(
        ("status", "cls"),
        [
            (502, volcano.InternalServerError),
            (504, volcano.InternalServerError),
            (599, volcano.InternalServerError),
            (418, volcano.UnexpectedResponseError),
            (410, volcano.UnexpectedResponseError),
            (302, volcano.UnexpectedResponseError),
            (201, volcano.UnexpectedResponseError),
            (299, volcano.UnexpectedResponseError),
        ],
    )
    def test_undocumented_status(
        self, client: volcano.Client, fake_api: FakeApi, status: int, cls: type
    ) -> None:
        """Other 5xx are InternalServerError; any other status is UnexpectedResponseError."""
        fake_api.then(raw(status, b"<html>proxy</html>"))
        with pytest.raises(cls) as caught:
            client.locks.get("daily-report")
        assert caught.value.status_code == status
        assert caught.value.code is None

    def test_undocumented_status_with_volcano_body_keeps_its_code(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A Volcano error body on an undocumented status still gives code and message."""
        fake_api.then(error(418, "teapot", message="short and stout"))
        with pytest.raises(volcano.UnexpectedResponseError) as caught:
            client.locks.get("daily-report")
        assert (caught.value.code, caught.value.message) == ("teapot", "short and stout")

    def test_success_status_of_another_operation_is_unexpected(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A 200 to release (which answers 204) is not taken as success."""
        fake_api.then(body(200, {}))
        with pytest.raises(volcano.UnexpectedResponseError) as caught:
            client.locks.release("daily-report", _lease())
        assert caught.value.status_code == 200

    @pytest.mark.parametrize(
        ("status", "cls"),
        [
            (409, volcano.ConflictError),
            (503, volcano.ServiceUnavailableError),
            (401, volcano.AuthenticationError),
        ],
    )
    @pytest.mark.parametrize(
        "content", [b"<html>Service Unavailable</html>", b"", b"[1, 2]", b'{"error": "x"}']
    )
    def test_status_without_volcano_body_keeps_its_class(
        self, client: volcano.Client, fake_api: FakeApi, status: int, cls: type, content: bytes
    ) -> None:
        """A body that is not a Volcano error still maps by status, with code None."""
        fake_api.then(raw(status, content, {"Retry-After": "2"}))
        with pytest.raises(cls) as caught:
            client.locks.get("daily-report", request_id=REQUEST_ID)
        assert type(caught.value) is cls
        assert caught.value.code is None
        assert caught.value.retry_after == 2.0
        assert caught.value.request_id == REQUEST_ID  # the one sent, as nothing came back

    @pytest.mark.parametrize(
        ("extra", "limit"),
        [({"limit": 4}, 4), ({}, None), ({"limit": "4"}, None), ({"limit": True}, None)],
    )
    def test_limit_mismatch_carries_the_keys_limit(
        self, client: volcano.Client, fake_api: FakeApi, extra: dict[str, object], limit: int | None
    ) -> None:
        """LimitMismatchError.limit is the body's `limit` when it is one; else None, and the
        error is still a LimitMismatchError."""
        fake_api.then(error(409, "limit_mismatch", message="in use with limit 4", **extra))
        with pytest.raises(volcano.LimitMismatchError) as caught:
            client.locks.acquire("daily-report", ttl=30)
        assert caught.value.limit == limit
        assert caught.value.message == "in use with limit 4"

    def test_request_id_falls_back_to_the_response_header(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """Without a Volcano body, request_id comes from the X-Request-Id response header."""
        fake_api.then(raw(503, b"down", {"X-Request-Id": SERVER_REQUEST_ID}))
        with pytest.raises(volcano.ServiceUnavailableError) as caught:
            client.locks.get("daily-report")
        assert caught.value.request_id == SERVER_REQUEST_ID

    @pytest.mark.parametrize("header", ["soon", "-1", "nan", ""])
    def test_unreadable_retry_after_is_none(
        self, client: volcano.Client, fake_api: FakeApi, header: str
    ) -> None:
        """A Retry-After that is not a number of seconds is ignored."""
        fake_api.then(error(429, "rate_limited", retry_after=header))
        with pytest.raises(volcano.RateLimitError) as caught:
            client.locks.get("daily-report")
        assert caught.value.retry_after is None


LEASE = {
    "key": "daily-report",
    "owner_token": TOKEN,
    "fencing_token": 7,
    "expires_at": "2026-11-29T21:15:30.250000Z",
    "ttl_seconds": 30,
}


def _with(**changes: Any) -> dict[str, Any]:
    payload = dict(LEASE)
    for name, value in changes.items():
        if value is ...:
            del payload[name]
        else:
            payload[name] = value
    return payload


def _state_with_holder(**changes: Any) -> dict[str, Any]:
    """A LockState body with one holder whose fields `changes` alters (`...`: left out)."""
    holder = {"fencing_token": 7, "expires_at": LEASE["expires_at"], "label": None}
    holder |= {"mode": "exclusive", **changes}
    holder = {name: value for name, value in holder.items() if value is not ...}
    state = {"key": "daily-report", "held": True, "expires_at": LEASE["expires_at"]}
    return state | {
        "fencing_token": 7,
        "limit": 1,
        "holders": [holder],
        "waiters": 0,
        "version": 1,
    }


class TestBrokenSuccessBodies:
    @pytest.mark.parametrize(
        "payload",
        [
            _with(key=...),
            _with(owner_token=...),
            _with(fencing_token="7"),
            _with(fencing_token=True),
            _with(fencing_token=0),
            _with(fencing_token=2**53),
            _with(fencing_token=7.0),
            _with(expires_at="yesterday"),
            _with(expires_at="2026-11-29T21:15:30"),  # no offset
            _with(expires_at=1764450930),
            _with(ttl_seconds="30"),
            _with(ttl_seconds=0),
            _with(key=5),
            _with(key="another-key"),
            _with(owner_token="6F9619FF-8B86-D011-B42D-00C04FC964FF"),
            _with(owner_token=TOKEN.lower()),  # spelling must survive
            [LEASE],
            "lease",
            None,
        ],
    )
    def test_lease_body_that_breaks_the_spec(
        self, client: volcano.Client, fake_api: FakeApi, payload: Any
    ) -> None:
        """A 200 whose body is not the LockLease the spec promises is UnexpectedResponseError."""
        fake_api.then(body(200, payload))
        with pytest.raises(volcano.UnexpectedResponseError) as caught:
            client.locks.acquire("daily-report", ttl=30, token=TOKEN)
        assert caught.value.status_code == 200
        assert caught.value.code is None
        assert len(fake_api.requests) == 1  # not retried
        assert TOKEN not in str(caught.value)

    @pytest.mark.parametrize("content", [b"not json", b"{", b"\xff\xfe", b"<html>ok</html>", b""])
    def test_non_json_success_body(
        self, client: volcano.Client, fake_api: FakeApi, content: bytes
    ) -> None:
        """A 200 that is not JSON is UnexpectedResponseError, not a crash."""
        fake_api.then(raw(200, content))
        with pytest.raises(volcano.UnexpectedResponseError):
            client.locks.get("daily-report")

    @pytest.mark.parametrize(
        "payload",
        [
            {"key": "daily-report", "held": "yes", "expires_at": None, "fencing_token": None},
            {"key": "daily-report", "held": True, "expires_at": "soon", "fencing_token": 1},
            {"key": "daily-report", "held": True, "expires_at": None, "fencing_token": -1},
            {"key": "daily-report", "held": False, "expires_at": None},
            {"key": "elsewhere", "held": False, "expires_at": None, "fencing_token": None},
            _state_with_holder(mode="reading"),
            _state_with_holder(mode=None),
            _state_with_holder(mode=...),
        ],
    )
    def test_state_body_that_breaks_the_spec(
        self, client: volcano.Client, fake_api: FakeApi, payload: Any
    ) -> None:
        """A LockState with wrong types or missing fields is UnexpectedResponseError."""
        fake_api.then(body(200, payload))
        with pytest.raises(volcano.UnexpectedResponseError):
            client.locks.get("daily-report")

    @pytest.mark.parametrize(
        "payload",
        [
            {"key": "daily-report", "released": 1, "fencing_token": None},
            {"key": "daily-report", "released": True, "fencing_token": "7"},
            {"key": "daily-report", "fencing_token": None},
        ],
    )
    def test_force_release_body_that_breaks_the_spec(
        self, client: volcano.Client, fake_api: FakeApi, payload: Any
    ) -> None:
        """A ForceReleaseResult with wrong types or missing fields is UnexpectedResponseError."""
        fake_api.then(body(200, payload))
        with pytest.raises(volcano.UnexpectedResponseError):
            client.locks.force_release("daily-report")

    def test_unknown_fields_are_ignored(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """A later minor version may add response fields; they are ignored."""
        fake_api.then(body(200, _with(region="eu-west")))
        assert client.locks.acquire("daily-report", ttl=30, token=TOKEN).fencing_token == 7

    def test_offsets_become_utc(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """An expires_at with a non-zero offset is converted to UTC."""
        fake_api.then(body(200, _with(expires_at="2026-11-29T23:15:30.250000+02:00")))
        lease = client.locks.acquire("daily-report", ttl=30, token=TOKEN)
        assert lease.expires_at.isoformat() == "2026-11-29T21:15:30.250000+00:00"


class TestTransportErrors:
    @pytest.mark.parametrize("cls", httpx_exception_classes(), ids=lambda c: c.__name__)
    def test_every_httpx_exception_is_mapped(
        self, sdk: Sdk, fake_api: FakeApi, cls: type[Exception]
    ) -> None:
        """No httpx exception reaches the caller of either client: each becomes a volcano.Error
        caused by it."""
        exc = make_httpx_exception(cls)
        fake_api.then(fail(exc))
        with pytest.raises(volcano.Error) as caught:
            sdk.get("daily-report", request_id=REQUEST_ID)
        assert caught.value.__cause__ is exc
        if isinstance(exc, httpx.TimeoutException):
            assert type(caught.value) is volcano.APITimeoutError
        elif isinstance(exc, httpx.RequestError):
            assert type(caught.value) is volcano.APIConnectionError
        else:
            assert type(caught.value) is volcano.Error
        if isinstance(caught.value, volcano.APIConnectionError):
            assert caught.value.request_id == REQUEST_ID

    def test_timeout_is_a_connection_error(self) -> None:
        """Catching APIConnectionError also catches timeouts."""
        assert issubclass(volcano.APITimeoutError, volcano.APIConnectionError)

    def test_secret_in_an_httpx_message_is_scrubbed(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """If httpx quotes a header value in its message, the key is redacted from ours."""
        fake_api.then(
            fail(httpx.LocalProtocolError(f"bad header b'Bearer {fake_api.service_key}'"))
        )
        with pytest.raises(volcano.APIConnectionError) as caught:
            client.locks.get("daily-report")
        assert fake_api.service_key not in str(caught.value)
        assert "<redacted>" in str(caught.value)

    def test_unrelated_exceptions_are_not_swallowed(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A bug (not an httpx failure) is not dressed up as a volcano error."""
        fake_api.then(fail(ZeroDivisionError("bug")))
        with pytest.raises(ZeroDivisionError):
            client.locks.get("daily-report")


class TestErrorValues:
    def test_str_and_repr(self) -> None:
        """Errors read as status, code, message and request id."""
        err = volcano.LockHeldError(
            "daily-report is held for 12 more seconds",
            status_code=409,
            code="lock_held",
            request_id=REQUEST_ID,
            retry_after=12,
        )
        assert str(err) == (
            f"409 lock_held: daily-report is held for 12 more seconds (request_id={REQUEST_ID})"
        )
        assert repr(err) == (
            "LockHeldError(409 lock_held: daily-report is held for 12 more seconds, "
            f"request_id='{REQUEST_ID}')"
        )
        timeout = volcano.APITimeoutError("acquire timed out", request_id=REQUEST_ID)
        assert str(timeout) == f"acquire timed out (request_id={REQUEST_ID})"
        assert repr(timeout) == f"APITimeoutError('acquire timed out', request_id='{REQUEST_ID}')"

    @pytest.mark.parametrize(
        "err",
        [
            volcano.LeaseNotHeldError(
                "gone", status_code=409, code="lease_not_held", request_id=REQUEST_ID
            ),
            volcano.ServiceUnavailableError("down", status_code=503, retry_after=1.5),
            volcano.LimitMismatchError(
                "in use with limit 4", status_code=409, code="limit_mismatch", limit=4
            ),
            volcano.APITimeoutError("slow", request_id=REQUEST_ID),
            volcano.InvalidArgumentError("bad key"),
        ],
        ids=lambda e: type(e).__name__,
    )
    def test_errors_pickle(self, err: volcano.Error) -> None:
        """Errors survive pickling (they cross process boundaries) with every field."""
        copy = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes
        assert type(copy) is type(err)
        assert copy.__dict__ == err.__dict__
        assert str(copy) == str(err)

    def test_argument_error_is_a_value_error(self) -> None:
        """InvalidArgumentError can be caught as ValueError too."""
        assert issubclass(volcano.InvalidArgumentError, ValueError)
        assert issubclass(volcano.InvalidArgumentError, volcano.Error)
