"""Sending: every request of the SDK goes out through `Sender.send` (or `AsyncSender.send`).

Each request goes through the generated client's own extension point, `set_httpx_client`,
given a `_Routed` client: an `httpx.Client` subclass that builds requests for the API (base
URL, credentials, and that request's timeout, since a renewal may wait only as long as its
lease has left) and sends them through the caller's `httpx.Client`, keeping the response, so
that a non-JSON page the generated parse refuses (a proxy's 503, say) still lets the status
decide the error. What went wrong becomes its `volcano` error here, and nowhere else.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Self, TypeVar

import httpx

from .. import _tracing
from .._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    Error,
    UnexpectedResponseError,
    parse_retry_after,
    status_error,
)
from . import _reading

if TYPE_CHECKING:
    from collections.abc import Callable

    from _volcano_api import Client as GeneratedClient
    from _volcano_api.types import Response as DetailedResponse

    from .._config import Settings
    from ._operations import Call
    from ._reading import Answer

logger = logging.getLogger("volcano")

T = TypeVar("T")

# Everything httpx raises while sending: HTTPError covers RequestError (transport, decoding,
# redirects) and HTTPStatusError; the other three stand apart in httpx's tree.
_HTTPX_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError)


class Sender:
    """Sends Calls through the caller's `httpx.Client`."""

    def __init__(self, http: httpx.Client, settings: Settings) -> None:
        self._routed = _Routed(http, settings)
        self._settings = settings

    def send(
        self,
        call: Call[T],
        *,
        sent_at: float,
        resend: bool = False,
        request_timeout: float | None = None,
    ) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error` for anything else.

        Args:
            call: The request.
            sent_at: When (monotonic) its request id was first sent: this send, or the first
                of the retries it repeats. The answer dates from it.
            resend: Whether this is such a retry (its span says so).
            request_timeout: Seconds it may take; the client's timeout by default.
        """
        with _request_span(call, self._settings, resend) as answered:
            routed = self._routed.for_request(request_timeout)
            api = _generated_client(self._settings).set_httpx_client(routed)
            started = time.monotonic()
            try:
                detailed = call.operation.generated().sync_detailed(
                    client=api, x_request_id=call.request_id, **call.kwargs
                )
            except Exception as exc:  # noqa: BLE001 - _refused_body raises all but a refused body
                _refused_body(call, exc, routed.response, self._settings, started)
                detailed = None
            response = _received(routed.response)
            answered(response.status_code)
            return _answer(call, response, detailed, sent_at, started)


class AsyncSender:
    """Sends Calls through the caller's `httpx.AsyncClient`; see `Sender`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings) -> None:
        self._routed = _AsyncRouted(http, settings)
        self._settings = settings

    async def send(
        self,
        call: Call[T],
        *,
        sent_at: float,
        resend: bool = False,
        request_timeout: float | None = None,
    ) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error`; see `Sender.send`."""
        with _request_span(call, self._settings, resend) as answered:
            routed = self._routed.for_request(request_timeout)
            api = _generated_client(self._settings).set_async_httpx_client(routed)
            started = time.monotonic()
            try:
                detailed = await call.operation.generated().asyncio_detailed(
                    client=api, x_request_id=call.request_id, **call.kwargs
                )
            except Exception as exc:  # noqa: BLE001 - _refused_body raises all but a refused body
                _refused_body(call, exc, routed.response, self._settings, started)
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


class _Routing:
    """What both routed clients share: a copy per request, which keeps that request's response.

    A routed client builds each request as httpx does, under the API's base URL with the
    credentials (and the caller's default headers, cookies and query parameters as they were
    when the volcano client was made); its `send` hands it to the caller's client, so their
    auth, event hooks, redirects, proxies and connection pool apply. The generated functions
    parse the body before they return the status, and raise on a body they cannot read: the
    kept response still tells the status.
    """

    timeout: httpx.Timeout
    response: httpx.Response | None = None

    def for_request(self, timeout: float | None) -> Self:
        """A copy for one request: `timeout` seconds (None: the client's), its own response."""
        routed = copy.copy(self)
        if timeout is not None:
            routed.timeout = httpx.Timeout(timeout)
        return routed


class _Routed(_Routing, httpx.Client):
    """An `httpx.Client` that builds requests for the API and sends them through the caller's."""

    def __init__(self, through: httpx.Client, settings: Settings) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False, **_defaults(through, settings))
        self._through = through

    def send(self, request: httpx.Request, **options: Any) -> httpx.Response:
        """Send `request` through the caller's client, and keep its response."""
        _tracing.inject(request.headers)
        self.response = self._through.send(request, **options)
        return self.response


class _AsyncRouted(_Routing, httpx.AsyncClient):
    """The asyncio twin of `_Routed`."""

    def __init__(self, through: httpx.AsyncClient, settings: Settings) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False, **_defaults(through, settings))
        self._through = through

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


def _request_span(
    call: Call[Any], settings: Settings, resend: bool
) -> contextlib.AbstractContextManager[Callable[[int], None]]:
    """The request's span while tracing is on; what it yields records the answer's status."""
    wait = getattr(call.kwargs.get("body"), "wait_seconds", None)
    return _tracing.request(
        call.operation.name, call.request_id, settings, resend=resend, wait=wait
    )


def _refused_body(
    call: Call[Any],
    exc: Exception,
    response: httpx.Response | None,
    settings: Settings,
    started: float,
) -> None:
    """Return if the generated function raised `exc` refusing the body of `response`.

    Its status still decides then. Otherwise raise the volcano error for a failure to send, or
    `exc` itself (not a body the generated parse refused: a bug, so let it show).
    """
    if isinstance(exc, _HTTPX_ERRORS):
        raise _send_error(call, exc, settings, started) from exc
    if not isinstance(exc, _reading.PARSE_ERRORS) or response is None:
        raise exc


def _received(response: httpx.Response | None) -> httpx.Response:
    if response is None:
        raise RuntimeError("the generated client returned without sending a request")
    return response


@functools.cache
def _client_class() -> type[GeneratedClient]:
    from _volcano_api import Client

    return Client


def _generated_client(settings: Settings) -> GeneratedClient:
    # Undocumented statuses come back as `parsed=None`, never as an exception.
    return _client_class()(base_url=settings.api_url, raise_on_unexpected_status=False)


def _answer(
    call: Call[T],
    response: httpx.Response,
    detailed: DetailedResponse[Any] | None,
    sent_at: float,
    started: float,
) -> _reading.Answer[T]:
    """Turn what arrived into the call's answer, or raise the error it stands for.

    `detailed` is None when the generated parse refused the body.
    """
    _log_outcome(call, response, started)
    if response.status_code != call.operation.success_status:
        raise _status_error(call, response, detailed)
    try:
        value = call.convert(None if detailed is None else detailed.parsed)
    except _reading.SpecMismatchError as exc:
        raise UnexpectedResponseError(
            f"{call.operation.name}: HTTP {response.status_code}, a body that breaks the spec:"
            f" {exc}",
            status_code=response.status_code,
            request_id=response.headers.get("X-Request-Id", call.request_id),
        ) from None
    return _reading.Answer(value, sent_at, _replayed(response))


def _send_error(call: Call[Any], exc: Exception, settings: Settings, started: float) -> Error:
    """The volcano error for an exception httpx raised while sending `call`."""
    elapsed = time.monotonic() - started
    name = call.operation.name
    logger.debug(
        "%s %s failed after %.3fs: %s (request_id=%s)",
        name,
        call.subject,
        elapsed,
        type(exc).__name__,
        call.request_id,
    )
    text = _scrub(f"{type(exc).__name__}: {exc}", settings)
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{name} timed out: {text}", request_id=call.request_id)
    if isinstance(exc, httpx.RequestError):
        return APIConnectionError(f"{name} failed: {text}", request_id=call.request_id)
    return Error(f"{name} could not be sent: {text}")


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
            message=f"{call.operation.name}: {_status_text(response)} without a Volcano error body",
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
            parsed = _reading.models().Error.from_dict(response.json())
        except _reading.PARSE_ERRORS:
            return None
    if not isinstance(parsed, _reading.models().Error):
        return None
    return _reading.error_detail(parsed.error)


def _scrub(text: str, settings: Settings) -> str:
    # httpx and h11 sometimes quote header values in their messages.
    for secret in (settings.service_key, settings.anon_key):
        text = text.replace(secret, "<redacted>")
    return text


def _log_outcome(call: Call[Any], response: httpx.Response, started: float) -> None:
    logger.debug(
        "%s %s -> %s in %.3fs (request_id=%s)",
        call.operation.name,
        call.subject,
        response.status_code,
        time.monotonic() - started,
        call.request_id,
    )


def _status_text(response: httpx.Response) -> str:
    try:
        return f"HTTP {response.status_code} {HTTPStatus(response.status_code).phrase}"
    except ValueError:
        return f"HTTP {response.status_code}"
