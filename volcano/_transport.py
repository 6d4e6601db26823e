"""The one seam between the SDK and what it is built on: the generated client and httpx.

This is the only module that imports `_volcano_api`. It always calls the generated
`*_detailed` functions, and turns every outcome into an SDK value or a `volcano` error:
no generated type, `Unset` or httpx exception gets past it.

Each request goes through the generated client's own extension point, `set_httpx_client`,
given a `_Routed` client: an `httpx.Client` subclass that builds requests for the API (base URL,
credentials, and that request's timeout, since a renewal may wait only as long as its lease has
left) and sends them through the caller's `httpx.Client`, keeping the response. The generated
functions parse the body before they return the status, so a non-JSON page (a proxy's 503,
say) makes them raise; the kept response still lets the status decide the error.
tests/unit/sdk/test_seam.py pins what this module relies on in the generated code.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import httpx

from . import _tracing
from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    Error,
    InvalidArgumentError,
    UnexpectedResponseError,
    parse_retry_after,
    status_error,
)
from ._models import ForceReleaseResult, LockHolder, LockLease, LockState
from ._validate import FENCING_TOKEN_MAX

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from types import ModuleType

    from _volcano_api import Client as GeneratedClient
    from _volcano_api.types import Response as DetailedResponse

    from ._clock import Clock
    from ._config import Settings

logger = logging.getLogger("volcano")

T = TypeVar("T")

# What the generated parse raises on a body that is not what the spec promises (JSONDecodeError
# and UnicodeDecodeError are ValueErrors), or on a status HTTPStatus does not know. Caught only
# once a response has arrived, so they never hide a failure to build or send the request.
PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)

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
        check_lease,
        force_release_lock,
        get_lock,
        list_locks,
        release_lock,
        renew_lock,
    )

    return locks


@functools.cache
def _models() -> ModuleType:
    """The generated models (request bodies and response shapes), imported on first use."""
    from _volcano_api import models

    return models


@functools.cache
def _client_class() -> type[GeneratedClient]:
    from _volcano_api import Client

    return Client


class _SpecMismatchError(Exception):
    """A body that parsed but does not match the spec; the text says how."""


class _FirstSend:
    """When a request id was first sent: a retry repeats it, and its answer dates from then."""

    def __init__(self) -> None:
        self.at: float | None = None

    def stamp(self, now: float) -> float:
        if self.at is None:
            self.at = now
        return self.at


@attrs.frozen
class Call(Generic[T]):
    """One lock request, ready to send: which generated function, with what, and how to read it.

    A Call is one request id: sending it again is a retry of the same request.
    """

    operation: str
    key: str
    request_id: str
    kwargs: Mapping[str, Any]
    sync_detailed: Callable[..., DetailedResponse[Any]]
    asyncio_detailed: Callable[..., Awaitable[DetailedResponse[Any]]]
    success_status: int
    convert: Callable[[object], T]
    first_send: _FirstSend = attrs.field(factory=_FirstSend, eq=False, repr=False)


@attrs.frozen
class Answer(Generic[T]):
    """A successful answer: the value, when its request id was first sent, whether replayed.

    `sent_at` (the client's monotonic clock) is the only send time the SDK uses: the server made
    whatever the answer describes no earlier than that, so a lease lives at least until
    `sent_at + ttl`.
    """

    value: T
    sent_at: float
    replayed: bool


def acquire_call(
    key: str,
    *,
    owner_token: str,
    ttl: float,
    request_id: str,
    wait: float = 0.0,
    limit: int = 1,
    label: str | None = None,
) -> Call[LockLease]:
    """The request that acquires `key` for `owner_token` for `ttl` seconds.

    With `wait`, it queues for the key up to that many seconds (the body then carries
    `wait_seconds`; without it, it is exactly the request of a client that never waits). A
    `limit` above 1 asks for one of that many slots; 1, the server's default, is not sent, so a
    plain lock's request stays the one a client without semaphores sends. A `label` is sent
    only when given.
    """
    body = _models().AcquireRequest(owner_token=owner_token, ttl_seconds=ttl)
    if wait > 0:
        body.wait_seconds = wait
    if limit != 1:
        body.limit = limit
    if label is not None:
        body.label = label
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


def renew_call(
    key: str, lease: LockLease, *, ttl: float, request_id: str, label: str | None = None
) -> Call[LockLease]:
    """The request that extends `lease` to `ttl` seconds from now.

    With `label`, the lease's label becomes it (an empty one: none); without, it is kept.
    """
    body = _models().RenewRequest(
        owner_token=lease.owner_token, fencing_token=lease.fencing_token, ttl_seconds=ttl
    )
    if label is not None:
        body.label = label
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


def check_call(key: str, fencing_token: int, *, request_id: str) -> Call[bool]:
    """The fence check: whether `fencing_token` names a live lease of `key`."""
    return Call(
        operation="check",
        key=key,
        request_id=request_id,
        kwargs={"key": key, "fencing_token": fencing_token},
        sync_detailed=_generated().check_lease.sync_detailed,
        asyncio_detailed=_generated().check_lease.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_live, key=key, fencing_token=fencing_token),
    )


def watch_call(key: str, *, after_version: int, wait: float, request_id: str) -> Call[LockState]:
    """The long poll that reads `key` once its version differs from `after_version`.

    The server answers then, or when `wait` seconds pass, with the key's state either way.
    """
    return Call(
        operation="watch",
        key=key,
        request_id=request_id,
        kwargs={"key": key, "after_version": after_version, "wait_seconds": wait},
        sync_detailed=_generated().get_lock.sync_detailed,
        asyncio_detailed=_generated().get_lock.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_state, key=key),
    )


@attrs.frozen
class Page:
    """One page of a listing: the keys' states, and the `after` of the next page (or None)."""

    states: tuple[LockState, ...]
    next_after: str | None


def list_call(*, prefix: str, after: str, limit: int, request_id: str) -> Call[Page]:
    """The request for one page of the keys that are held or waited for."""
    kwargs: dict[str, Any] = {"limit": limit}
    if prefix:
        kwargs["prefix"] = prefix
    if after:
        kwargs["after"] = after
    return Call(
        operation="list",
        key=prefix or "*",
        request_id=request_id,
        kwargs=kwargs,
        sync_detailed=_generated().list_locks.sync_detailed,
        asyncio_detailed=_generated().list_locks.asyncio_detailed,
        success_status=200,
        convert=functools.partial(_page, prefix=prefix, after=after),
    )


class SyncTransport:
    """Sends Calls through the caller's `httpx.Client`, timing each by `clock`."""

    def __init__(self, http: httpx.Client, settings: Settings, clock: Clock) -> None:
        self._routed = _Routed(http, settings)
        self._settings = settings
        self._clock = clock

    def send(self, call: Call[T], *, request_timeout: float | None = None) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error` for anything else.

        Args:
            call: The request.
            request_timeout: Seconds it may take; the client's timeout by default.
        """
        with _tracing.request(call, self._settings) as answered:
            routed = self._routed.for_request(request_timeout)
            api = _generated_client(self._settings).set_httpx_client(routed)
            sent_at = call.first_send.stamp(self._clock.monotonic())
            started = time.monotonic()
            try:
                detailed = call.sync_detailed(
                    client=api, x_request_id=call.request_id, **call.kwargs
                )
            except _HTTPX_ERRORS as exc:
                raise _send_error(call, exc, self._settings, started) from exc
            except PARSE_ERRORS:
                if routed.response is None:
                    raise  # not a body the generated parse refused: a bug, so let it show
                detailed = None
            response = _received(routed.response)
            answered(response.status_code)
            return _answer(call, response, detailed, sent_at, started)


class AsyncTransport:
    """Sends Calls through the caller's `httpx.AsyncClient`, timing each by `clock`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings, clock: Clock) -> None:
        self._routed = _AsyncRouted(http, settings)
        self._settings = settings
        self._clock = clock

    async def send(self, call: Call[T], *, request_timeout: float | None = None) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error`; see `SyncTransport`."""
        with _tracing.request(call, self._settings) as answered:
            routed = self._routed.for_request(request_timeout)
            api = _generated_client(self._settings).set_async_httpx_client(routed)
            sent_at = call.first_send.stamp(self._clock.monotonic())
            started = time.monotonic()
            try:
                detailed = await call.asyncio_detailed(
                    client=api, x_request_id=call.request_id, **call.kwargs
                )
            except _HTTPX_ERRORS as exc:
                raise _send_error(call, exc, self._settings, started) from exc
            except PARSE_ERRORS:
                if routed.response is None:
                    raise  # not a body the generated parse refused: a bug, so let it show
                detailed = None
            response = _received(routed.response)
            answered(response.status_code)
            return _answer(call, response, detailed, sent_at, started)


class _NoTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The transport of a `_Routed` client, which never sends through its own."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError("volcano sends every request through the caller's httpx client")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError("volcano sends every request through the caller's httpx client")


_NO_TRANSPORT = _NoTransport()


class _Routed(httpx.Client):
    """An `httpx.Client` that builds requests for the API and sends them through the caller's.

    It builds each request as httpx does, under the API's base URL with the credentials (and
    the caller's default headers, cookies and query parameters as they were when the volcano
    client was made); `send` hands it to the caller's client, so their auth, event hooks,
    redirects, proxies and connection pool apply. `for_request` gives each request a shallow
    copy with its own timeout, which keeps that request's response: the generated functions
    parse the body before they return the status, and raise on a body they cannot read.
    """

    def __init__(self, through: httpx.Client, settings: Settings) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False, **_defaults(through, settings))
        self._through = through
        self.response: httpx.Response | None = None

    def for_request(self, timeout: float | None) -> _Routed:
        """A copy for one request: `timeout` seconds (None: the client's), its own response."""
        routed = copy.copy(self)
        if timeout is not None:
            routed.timeout = httpx.Timeout(timeout)
        return routed

    def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        """Send `request` through the caller's client, and keep its response."""
        _tracing.inject(request.headers)
        self.response = self._through.send(request, **options)
        return self.response


class _AsyncRouted(httpx.AsyncClient):
    """The asyncio twin of `_Routed`."""

    def __init__(self, through: httpx.AsyncClient, settings: Settings) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False, **_defaults(through, settings))
        self._through = through
        self.response: httpx.Response | None = None

    def for_request(self, timeout: float | None) -> _AsyncRouted:
        """A copy for one request: `timeout` seconds (None: the client's), its own response."""
        routed = copy.copy(self)
        if timeout is not None:
            routed.timeout = httpx.Timeout(timeout)
        return routed

    async def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        """Send `request` through the caller's client, and keep its response."""
        _tracing.inject(request.headers)
        self.response = await self._through.send(request, **options)
        return self.response


def _defaults(through: httpx.Client | httpx.AsyncClient, settings: Settings) -> dict[str, Any]:
    headers = httpx.Headers(through.headers)
    headers.update(settings.headers())
    return {
        "base_url": settings.api_url,
        "headers": headers,
        "cookies": through.cookies,
        "params": through.params,
        "timeout": settings.timeout,
    }


def _received(response: httpx.Response | None) -> httpx.Response:
    if response is None:
        raise RuntimeError("the generated client returned without sending a request")
    return response


def _generated_client(settings: Settings) -> GeneratedClient:
    # Undocumented statuses come back as `parsed=None`, never as an exception.
    return _client_class()(base_url=settings.api_url, raise_on_unexpected_status=False)


def _answer(
    call: Call[T],
    response: httpx.Response,
    detailed: DetailedResponse[Any] | None,
    sent_at: float,
    started: float,
) -> Answer[T]:
    """Turn what arrived into the call's answer, or raise the error it stands for.

    `detailed` is None when the generated parse refused the body.
    """
    _log_outcome(call, response, started)
    if response.status_code != call.success_status:
        raise _status_error(call, response, detailed)
    try:
        value = call.convert(None if detailed is None else detailed.parsed)
    except _SpecMismatchError as exc:
        raise UnexpectedResponseError(
            f"{call.operation}: HTTP {response.status_code}, a body that breaks the spec: {exc}",
            status_code=response.status_code,
            request_id=response.headers.get("X-Request-Id", call.request_id),
        ) from None
    return Answer(value, sent_at, _replayed(response))


def _replayed(response: httpx.Response) -> bool:
    """Whether the server answered with an outcome stored under the request id."""
    value: str = response.headers.get("Idempotent-Replayed", "")
    return value.lower() == "true"


def _status_error(
    call: Call[Any], response: httpx.Response, detailed: DetailedResponse[Any] | None
) -> APIStatusError:
    # A proxy's page carries no id; the one sent still names the request.
    header_request_id = response.headers.get("X-Request-Id", call.request_id)
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    detail = _error_detail(response, detailed)
    if detail is None:
        return status_error(
            response.status_code,
            code=None,
            message=f"{call.operation}: {_status_text(response)} without a Volcano error body",
            request_id=header_request_id,
            retry_after=retry_after,
        )
    code, message, request_id, limit = detail
    return status_error(
        response.status_code,
        code=code,
        message=message,
        request_id=request_id or header_request_id,
        retry_after=retry_after,
        limit=limit,
    )


def _error_detail(
    response: httpx.Response, detailed: DetailedResponse[Any] | None
) -> tuple[str, str, str, int | None] | None:
    """The (code, message, request_id, limit) of a Volcano error body, or None for anything else.

    `limit` is the key's limit a `limit_mismatch` names, None when absent or not a limit.

    The body is read once: the generated parse read it for the statuses the spec lists (None:
    it refused the body); only for another status (a 404 or 405 from routing) is it read here.
    """
    if detailed is None:
        return None
    parsed = detailed.parsed
    if parsed is None:
        try:
            parsed = _models().Error.from_dict(response.json())
        except PARSE_ERRORS:
            return None
    if not isinstance(parsed, _models().Error):
        return None
    code, message, request_id = (parsed.error.code, parsed.error.message, parsed.error.request_id)
    if not (isinstance(code, str) and isinstance(message, str) and isinstance(request_id, str)):
        return None
    limit = parsed.error.limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        limit = None
    return code, message, request_id, limit


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
    lease = _value(
        LockLease,
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
    state = _value(
        LockState,
        key=_string(body.key, "key"),
        held=_boolean(body.held, "held"),
        expires_at=None if body.expires_at is None else _timestamp(body.expires_at),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
        limit=_count(body.limit, "limit"),
        holders=tuple(_holder(holder) for holder in body.holders),
        waiters=_count(body.waiters, "waiters"),
        version=_count(body.version, "version"),
    )
    if state.key != key:
        raise _SpecMismatchError(f"key {state.key!r} is not the key {key!r} asked for")
    return state


def _page(parsed: object, *, prefix: str, after: str) -> Page:
    body = _body(parsed, _models().LockList, "LockList")
    states: list[LockState] = []
    for item in body.locks:
        state = _state(item, key=_string(getattr(item, "key", None), "key"))
        if not state.key.startswith(prefix) or state.key <= after:
            raise _SpecMismatchError(f"key {state.key!r} is outside the page asked for")
        if states and state.key <= states[-1].key:
            raise _SpecMismatchError("the keys are not in order")
        states.append(state)
    following = body.next_
    if following is not None and (not states or following != states[-1].key):
        raise _SpecMismatchError("next is not the last key of the page")
    return Page(tuple(states), following)


def _force_release(parsed: object, *, key: str) -> ForceReleaseResult:
    body = _body(parsed, _models().ForceReleaseResult, "ForceReleaseResult")
    result = ForceReleaseResult(
        key=_string(body.key, "key"),
        released=_boolean(body.released, "released"),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
        released_count=_count(body.released_count, "released_count"),
    )
    if result.key != key:
        raise _SpecMismatchError(f"key {result.key!r} is not the key {key!r} asked for")
    return result


def _live(parsed: object, *, key: str, fencing_token: int) -> bool:
    body = _body(parsed, _models().LeaseCheck, "LeaseCheck")
    if _string(body.key, "key") != key:
        raise _SpecMismatchError(f"key {body.key!r} is not the key {key!r} asked for")
    if _fencing_token(body.fencing_token) != fencing_token:
        raise _SpecMismatchError(f"fencing_token {body.fencing_token} is not {fencing_token}")
    return _boolean(body.live, "live")


_B = TypeVar("_B")
_V = TypeVar("_V")


def _body(parsed: object, cls: type[_B], name: str) -> _B:
    if not isinstance(parsed, cls):
        raise _SpecMismatchError(f"it is not a {name} object")
    return parsed


def _holder(holder: object) -> LockHolder:
    body = _body(holder, _models().LockHolder, "LockHolder")
    label = body.label
    if label is not None and not isinstance(label, str):
        raise _SpecMismatchError("a holder's label is not a string")
    return _value(
        LockHolder,
        fencing_token=_fencing_token(body.fencing_token),
        expires_at=_timestamp(body.expires_at),
        label=label,
    )


def _count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _SpecMismatchError(f"{name} is not a count")
    return value


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
    # Its offset is the model's to judge (LockLease and LockState keep UTC only).
    if not isinstance(value, datetime):
        raise _SpecMismatchError("expires_at is not an RFC 3339 timestamp")
    return value


def _value(cls: Callable[..., _V], **fields: Any) -> _V:
    """An SDK value from checked fields; what its own converters refuse breaks the spec."""
    try:
        return cls(**fields)
    except InvalidArgumentError as exc:
        raise _SpecMismatchError(str(exc)) from None


def _ttl_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _SpecMismatchError("ttl_seconds is not a positive number")
    return float(value)
