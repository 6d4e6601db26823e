"""The one seam between the SDK and what it is built on: the generated client and httpx.

This is the only module that imports `_volcano_api`. It always calls the generated
`*_detailed` functions, and turns every outcome into an SDK value or a `volcano` error:
no generated type, `Unset` or httpx exception gets past it.

The generated functions parse the body inside `sync_detailed`, so a non-JSON page (a proxy's
503, say) makes them raise before they return the status. They are therefore given, as their
`client`, an `_Exchange` of ours: it adds the call's headers and timeout, sends through the
real `httpx.Client` / `httpx.AsyncClient`, and keeps the `httpx.Response`, so the status still
decides the error when the generated parse fails.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs
import httpx

from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    Error,
    UnexpectedResponseError,
    parse_retry_after,
    status_error,
)
from ._models import ForceReleaseResult, LockLease, LockState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from types import ModuleType

    from _volcano_api import Client as _GeneratedClient
    from _volcano_api.types import Response as _DetailedResponse

    from ._config import Settings

logger = logging.getLogger("volcano")

T = TypeVar("T")

FENCING_TOKEN_MAX = 2**53 - 1

# What the generated parse raises on a body that is not what the spec promises (JSONDecodeError
# and UnicodeDecodeError are ValueErrors), or on a status HTTPStatus does not know.
_PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)

# Everything httpx raises while sending: HTTPError covers RequestError (transport, decoding,
# redirects) and HTTPStatusError; the other three stand apart in httpx's tree.
_HTTPX_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError)


@functools.cache
def _generated() -> ModuleType:
    """The generated operations, imported on first use.

    `import volcano` stays light; the first request pays for loading them (about 8 ms).
    """
    from _volcano_api.api import locks
    from _volcano_api.api.locks import (  # noqa: F401 - loads the operation modules
        acquire_lock,
        force_release_lock,
        get_lock,
        release_lock,
        renew_lock,
    )

    return locks


@functools.cache
def _models() -> ModuleType:
    """The generated models (request bodies and response shapes), imported on first use."""
    from _volcano_api import models

    return models


class _SpecMismatchError(Exception):
    """A body that parsed but does not match the spec; the text says how."""


@attrs.frozen
class Call(Generic[T]):
    """One lock request, ready to send: which generated function, with what, and how to read it."""

    operation: str
    key: str
    request_id: str
    kwargs: Mapping[str, Any]
    sync_detailed: Callable[..., _DetailedResponse[Any]]
    asyncio_detailed: Callable[..., Awaitable[_DetailedResponse[Any]]]
    success_status: int
    convert: Callable[[object], T]


def acquire_call(
    key: str, *, owner_token: str, ttl: float, request_id: str, wait: float = 0.0
) -> Call[LockLease]:
    """The request that acquires `key` for `owner_token` for `ttl` seconds.

    With `wait`, it queues for the key up to that many seconds (the body then carries
    `wait_seconds`; without it, it is exactly the request of a client that never waits).
    """
    body = _models().AcquireRequest(owner_token=owner_token, ttl_seconds=ttl)
    if wait > 0:
        body.wait_seconds = wait
    return Call(
        operation="acquire",
        key=key,
        request_id=request_id,
        kwargs={"key": key, "body": body},
        sync_detailed=_generated().acquire_lock.sync_detailed,
        asyncio_detailed=_generated().acquire_lock.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_lease, key=key, owner_token=owner_token, fencing_token=None),
    )


def renew_call(key: str, lease: LockLease, *, ttl: float, request_id: str) -> Call[LockLease]:
    """The request that extends `lease` to `ttl` seconds from now."""
    body = _models().RenewRequest(
        owner_token=lease.owner_token, fencing_token=lease.fencing_token, ttl_seconds=ttl
    )
    return Call(
        operation="renew",
        key=key,
        request_id=request_id,
        kwargs={"key": key, "body": body},
        sync_detailed=_generated().renew_lock.sync_detailed,
        asyncio_detailed=_generated().renew_lock.asyncio_detailed,
        success_status=200,
        convert=functools.partial(
            _lease, key=key, owner_token=lease.owner_token, fencing_token=lease.fencing_token
        ),
    )


def release_call(key: str, lease: LockLease, *, request_id: str) -> Call[None]:
    """The request that ends `lease`."""
    body = _models().ReleaseRequest(
        owner_token=lease.owner_token, fencing_token=lease.fencing_token
    )
    return Call(
        operation="release",
        key=key,
        request_id=request_id,
        kwargs={"key": key, "body": body},
        sync_detailed=_generated().release_lock.sync_detailed,
        asyncio_detailed=_generated().release_lock.asyncio_detailed,
        success_status=204,
        convert=_nothing,
    )


def get_call(key: str, *, request_id: str) -> Call[LockState]:
    """The request that reads `key`'s state."""
    return Call(
        operation="get",
        key=key,
        request_id=request_id,
        kwargs={"key": key},
        sync_detailed=_generated().get_lock.sync_detailed,
        asyncio_detailed=_generated().get_lock.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_state, key=key),
    )


def force_release_call(key: str, *, request_id: str) -> Call[ForceReleaseResult]:
    """The request that removes `key`'s live lease, whatever its owner."""
    return Call(
        operation="force_release",
        key=key,
        request_id=request_id,
        kwargs={"key": key},
        sync_detailed=_generated().force_release_lock.sync_detailed,
        asyncio_detailed=_generated().force_release_lock.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_force_release, key=key),
    )


class SyncTransport:
    """Sends Calls through an `httpx.Client`."""

    def __init__(self, http: httpx.Client, settings: Settings) -> None:
        self._http = http
        self._settings = settings

    def send(self, call: Call[T], *, request_timeout: float | None = None) -> T:
        """Send `call` once and return its value; raise a `volcano.Error` for anything else."""
        return self.send_noting_replay(call, request_timeout=request_timeout)[0]

    def send_noting_replay(
        self, call: Call[T], *, request_timeout: float | None = None
    ) -> tuple[T, bool]:
        """Like `send`; also say whether the answer was a replayed stored outcome."""
        exchange = _SyncExchange(self._http, self._settings, request_timeout)
        started = time.monotonic()
        try:
            parsed = call.sync_detailed(
                client=cast("_GeneratedClient", exchange),
                x_request_id=call.request_id,
                **call.kwargs,
            ).parsed
        except _HTTPX_ERRORS as exc:
            raise _send_error(call, exc, self._settings, started) from exc
        except _PARSE_ERRORS:
            if exchange.response is None:
                raise  # not a body the generated parse refused: a bug, so let it show
            parsed = None
        response = exchange.received()
        return _finish(call, response, parsed, started), _replayed(response)


class AsyncTransport:
    """Sends Calls through an `httpx.AsyncClient`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings) -> None:
        self._http = http
        self._settings = settings

    async def send(self, call: Call[T], *, request_timeout: float | None = None) -> T:
        """Send `call` once and return its value; raise a `volcano.Error` for anything else."""
        return (await self.send_noting_replay(call, request_timeout=request_timeout))[0]

    async def send_noting_replay(
        self, call: Call[T], *, request_timeout: float | None = None
    ) -> tuple[T, bool]:
        """Like `send`; also say whether the answer was a replayed stored outcome."""
        exchange = _AsyncExchange(self._http, self._settings, request_timeout)
        started = time.monotonic()
        try:
            detailed = await call.asyncio_detailed(
                client=cast("_GeneratedClient", exchange),
                x_request_id=call.request_id,
                **call.kwargs,
            )
            parsed = detailed.parsed
        except _HTTPX_ERRORS as exc:
            raise _send_error(call, exc, self._settings, started) from exc
        except _PARSE_ERRORS:
            if exchange.response is None:
                raise  # not a body the generated parse refused: a bug, so let it show
            parsed = None
        response = exchange.received()
        return _finish(call, response, parsed, started), _replayed(response)


class _Exchange:
    """The part of the generated client the generated functions use, for one request."""

    raise_on_unexpected_status = False

    def __init__(self, settings: Settings, timeout: float | None) -> None:
        self._settings = settings
        self._timeout = settings.timeout if timeout is None else timeout
        self.response: httpx.Response | None = None

    def received(self) -> httpx.Response:
        """The response the generated function was given."""
        if self.response is None:
            raise RuntimeError("the generated client returned without sending a request")
        return self.response

    def _request_args(self, url: str, headers: Mapping[str, str] | None) -> dict[str, Any]:
        return {
            "url": self._settings.url(url),
            "headers": {**(headers or {}), **self._settings.headers()},
            "timeout": self._timeout,
        }


class _SyncExchange(_Exchange):
    def __init__(self, http: httpx.Client, settings: Settings, timeout: float | None) -> None:
        super().__init__(settings, timeout)
        self._http = http

    def get_httpx_client(self) -> _SyncExchange:
        return self

    def request(
        self, *, method: str, url: str, headers: Mapping[str, str] | None = None, **rest: Any
    ) -> httpx.Response:
        self.response = self._http.request(method, **self._request_args(url, headers), **rest)
        return self.response


class _AsyncExchange(_Exchange):
    def __init__(self, http: httpx.AsyncClient, settings: Settings, timeout: float | None) -> None:
        super().__init__(settings, timeout)
        self._http = http

    def get_async_httpx_client(self) -> _AsyncExchange:
        return self

    async def request(
        self, *, method: str, url: str, headers: Mapping[str, str] | None = None, **rest: Any
    ) -> httpx.Response:
        args = self._request_args(url, headers)
        self.response = await self._http.request(method, **args, **rest)
        return self.response


def _finish(call: Call[T], response: httpx.Response, parsed: object, started: float) -> T:
    """Turn what arrived into the call's value, or raise the error it stands for."""
    _log_outcome(call, response, started)
    if response.status_code != call.success_status:
        raise _status_error(call, response)
    try:
        return call.convert(parsed)
    except _SpecMismatchError as exc:
        raise UnexpectedResponseError(
            f"{call.operation}: HTTP {response.status_code}, a body that breaks the spec: {exc}",
            status_code=response.status_code,
            request_id=response.headers.get("X-Request-Id", call.request_id),
        ) from None


def _replayed(response: httpx.Response) -> bool:
    """Whether the server answered with an outcome stored under the request id."""
    value: str = response.headers.get("Idempotent-Replayed", "")
    return value.lower() == "true"


def _status_error(call: Call[Any], response: httpx.Response) -> APIStatusError:
    # A proxy's page carries no id; the one sent still names the request.
    header_request_id = response.headers.get("X-Request-Id", call.request_id)
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    detail = _error_detail(response)
    if detail is None:
        return status_error(
            response.status_code,
            code=None,
            message=f"{call.operation}: {_status_text(response)} without a Volcano error body",
            request_id=header_request_id,
            retry_after=retry_after,
        )
    code, message, request_id = detail
    return status_error(
        response.status_code,
        code=code,
        message=message,
        request_id=request_id or header_request_id,
        retry_after=retry_after,
    )


def _error_detail(response: httpx.Response) -> tuple[str, str, str] | None:
    """The (code, message, request_id) of a Volcano error body, or None for anything else."""
    try:
        detail = _models().Error.from_dict(response.json()).error
    except _PARSE_ERRORS:
        return None
    fields = (detail.code, detail.message, detail.request_id)
    if not all(isinstance(field, str) for field in fields):
        return None
    return fields


def _send_error(call: Call[Any], exc: Exception, settings: Settings, started: float) -> Error:
    """The volcano error for an exception httpx raised while sending `call`."""
    elapsed = time.monotonic() - started
    logger.debug(
        "%s %s failed after %.3fs: %s (request_id=%s)",
        call.operation,
        call.key,
        elapsed,
        type(exc).__name__,
        call.request_id,
    )
    text = _scrub(f"{type(exc).__name__}: {exc}", settings)
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{call.operation} timed out: {text}", request_id=call.request_id)
    if isinstance(exc, httpx.RequestError):
        return APIConnectionError(f"{call.operation} failed: {text}", request_id=call.request_id)
    return Error(f"{call.operation} could not be sent: {text}")


def _scrub(text: str, settings: Settings) -> str:
    # httpx and h11 sometimes quote header values in their messages.
    for secret in (settings.service_key, settings.anon_key):
        text = text.replace(secret, "<redacted>")
    return text


def _log_outcome(call: Call[Any], response: httpx.Response, started: float) -> None:
    logger.debug(
        "%s %s -> %s in %.3fs (request_id=%s)",
        call.operation,
        call.key,
        response.status_code,
        time.monotonic() - started,
        call.request_id,
    )


def _status_text(response: httpx.Response) -> str:
    try:
        return f"HTTP {response.status_code} {HTTPStatus(response.status_code).phrase}"
    except ValueError:
        return f"HTTP {response.status_code}"


def _nothing(parsed: object) -> None:
    return None


def _lease(parsed: object, *, key: str, owner_token: str, fencing_token: int | None) -> LockLease:
    body = _body(parsed, _models().LockLease, "LockLease")
    lease = LockLease(
        key=_string(body.key, "key"),
        owner_token=_string(body.owner_token, "owner_token"),
        fencing_token=_fencing_token(body.fencing_token),
        expires_at=_timestamp(body.expires_at),
        ttl_seconds=_ttl_seconds(body.ttl_seconds),
    )
    if lease.key != key:
        raise _SpecMismatchError(f"key {lease.key!r} is not the key {key!r} asked for")
    if lease.owner_token != owner_token:
        raise _SpecMismatchError("owner_token differs from the one sent")
    if fencing_token is not None and lease.fencing_token != fencing_token:
        raise _SpecMismatchError(
            f"renew changed fencing_token {fencing_token} to {lease.fencing_token}"
        )
    return lease


def _state(parsed: object, *, key: str) -> LockState:
    body = _body(parsed, _models().LockState, "LockState")
    state = LockState(
        key=_string(body.key, "key"),
        held=_boolean(body.held, "held"),
        expires_at=None if body.expires_at is None else _timestamp(body.expires_at),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
    )
    if state.key != key:
        raise _SpecMismatchError(f"key {state.key!r} is not the key {key!r} asked for")
    return state


def _force_release(parsed: object, *, key: str) -> ForceReleaseResult:
    body = _body(parsed, _models().ForceReleaseResult, "ForceReleaseResult")
    result = ForceReleaseResult(
        key=_string(body.key, "key"),
        released=_boolean(body.released, "released"),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
    )
    if result.key != key:
        raise _SpecMismatchError(f"key {result.key!r} is not the key {key!r} asked for")
    return result


_B = TypeVar("_B")


def _body(parsed: object, cls: type[_B], name: str) -> _B:
    if not isinstance(parsed, cls):
        raise _SpecMismatchError(f"it is not a {name} object")
    return parsed


def _string(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise _SpecMismatchError(f"{name} is not a string")
    return value


def _boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise _SpecMismatchError(f"{name} is not a boolean")
    return value


def _fencing_token(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _SpecMismatchError("fencing_token is not an integer")
    if not 1 <= value <= FENCING_TOKEN_MAX:
        raise _SpecMismatchError(f"fencing_token {value} is outside 1..2^53-1")
    return value


def _timestamp(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise _SpecMismatchError("expires_at is not an RFC 3339 timestamp")
    if value.utcoffset() is None:
        raise _SpecMismatchError("expires_at has no UTC offset")
    return value


def _ttl_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _SpecMismatchError("ttl_seconds is not a positive number")
    return float(value)
