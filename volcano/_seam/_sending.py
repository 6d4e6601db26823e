"""Sending: every request of the SDK goes out through `Sender.send` (or `AsyncSender.send`).

Each request goes through the generated client's own extension point, `set_httpx_client`: the
generated function is handed an `_Exchange`, an `httpx.Client` subclass lent to one request at a
time, whose `request()` builds the request for the API (`_Route`: base URL, credentials, the
caller's default headers, cookies and query parameters, and that request's timeout in
`request.extensions["timeout"]`, where httpx carries a request's own, since a renewal may wait
only as long as its lease has left) and sends it through the caller's `httpx.Client` (or
straight to the transport of the client the SDK made for itself: `_transport.direct`), keeping
the response, so that a non-JSON page the generated parse refuses (a proxy's 503, say) still
lets the status decide the error. What went wrong becomes its `volcano` error here, and nowhere
else.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from .. import _tracing, _transport
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
    from ._reading import Success

logger = logging.getLogger("volcano")

T = TypeVar("T")

# Everything httpx raises while sending: HTTPError covers RequestError (transport, decoding,
# redirects) and HTTPStatusError; the other three stand apart in httpx's tree.
_HTTPX_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError)

# What the generated functions pass to `request()` (tests/unit/sdk/test_seam.py pins it).
_OPTIONS = frozenset({"json", "params", "headers"})

URLS_KEPT = 256
"""Parsed URLs each client keeps, by path: httpx checks every character of a URL it parses,
about a fifth of building a request, and a lock's requests repeat the same few paths."""


class Sender:
    """Sends Calls through the caller's `httpx.Client` (or the SDK's own transport)."""

    def __init__(self, http: httpx.Client, settings: Settings) -> None:
        direct = _transport.direct(http)
        self._route = _Route(http, settings)
        self._through = http
        self._direct = direct if isinstance(direct, httpx.BaseTransport) else None
        self._settings = settings
        self._free: list[_Exchange] = []  # lent to one request at a time

    def send(
        self,
        call: Call[T],
        *,
        sent_at: float,
        resend: bool = False,
        request_timeout: float | None = None,
    ) -> Success[T]:
        """Send `call` once; return its answer or raise a `volcano.Error` for anything else.

        Args:
            call: The request.
            sent_at: When (monotonic) its request id was first sent: this send, or the first
                of the retries it repeats. The answer dates from it.
            resend: Whether this is such a retry (its span says so).
            request_timeout: Seconds it may take; the client's timeout by default.
        """
        exchange = self._lend()
        exchange.seconds = request_timeout
        try:
            with _request_span(call, self._settings, resend) as answered:
                started = time.monotonic()
                try:
                    detailed = call.operation.generated().sync_detailed(
                        client=exchange.api, x_request_id=call.request_id, **call.kwargs
                    )
                except Exception as exc:  # noqa: BLE001 - _refused_body raises all but a refused body
                    _refused_body(call, exc, exchange.response, self._settings, started)
                    detailed = None
                response = _received(exchange.response)
                answered(response.status_code)
                return _answer(call, response, detailed, sent_at, started)
        finally:
            exchange.response = None
            self._free.append(exchange)

    def _lend(self) -> _Exchange:
        try:
            return self._free.pop()
        except IndexError:
            return _Exchange(self._route, self._through, self._direct)


class AsyncSender:
    """Sends Calls through the caller's `httpx.AsyncClient`; see `Sender`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings) -> None:
        direct = _transport.direct(http)
        self._route = _Route(http, settings)
        self._through = http
        self._direct = direct if isinstance(direct, httpx.AsyncBaseTransport) else None
        self._settings = settings
        self._free: list[_AsyncExchange] = []

    async def send(
        self,
        call: Call[T],
        *,
        sent_at: float,
        resend: bool = False,
        request_timeout: float | None = None,
    ) -> Success[T]:
        """Send `call` once; return its answer or raise a `volcano.Error`; see `Sender.send`."""
        exchange = self._lend()
        exchange.seconds = request_timeout
        try:
            with _request_span(call, self._settings, resend) as answered:
                started = time.monotonic()
                try:
                    detailed = await call.operation.generated().asyncio_detailed(
                        client=exchange.api, x_request_id=call.request_id, **call.kwargs
                    )
                except Exception as exc:  # noqa: BLE001 - _refused_body raises all but a refused body
                    _refused_body(call, exc, exchange.response, self._settings, started)
                    detailed = None
                response = _received(exchange.response)
                answered(response.status_code)
                return _answer(call, response, detailed, sent_at, started)
        finally:
            exchange.response = None
            self._free.append(exchange)

    def _lend(self) -> _AsyncExchange:
        try:
            return self._free.pop()
        except IndexError:
            return _AsyncExchange(self._route, self._through, self._direct)


class _Route:
    """How every request of one client is built.

    Its URL under the API's, its headers (the caller's client's default headers with the
    credentials), cookies and query parameters (the caller's, read once, here), and its timeout
    where httpx carries a request's own. The caller's client then sends it, so its auth, event
    hooks, redirects, proxies and connection pool apply.
    """

    def __init__(self, through: httpx.Client | httpx.AsyncClient, settings: Settings) -> None:
        headers = httpx.Headers(through.headers)
        headers.update(settings.headers())
        self._headers = headers
        self._cookies = httpx.Cookies(through.cookies) if through.cookies else None
        self._params = httpx.QueryParams(through.params)
        self.base = settings.api_url
        self._timeout = httpx.Timeout(settings.timeout).as_dict()
        self._url = functools.lru_cache(maxsize=URLS_KEPT)(self._parse)

    def _parse(self, path: str) -> httpx.URL:
        return httpx.URL(self.base + path)

    def build(
        self, method: str, url: httpx.URL | str, seconds: float | None, **options: Any
    ) -> httpx.Request:
        """The request a generated function asks for, taking `seconds` (None: the client's).

        `options` are what the function passes to `httpx.Client.request`.
        """
        unexpected = options.keys() - _OPTIONS
        if unexpected:  # a regenerated client passing more: never drop it silently
            raise TypeError(f"volcano cannot send a request with {sorted(unexpected)}")
        headers = self._headers.copy()
        if options.get("headers"):
            headers.update(options["headers"])
        params = options.get("params")
        query = self._params.merge(params) if params else self._params
        timeout = self._timeout if seconds is None else httpx.Timeout(seconds).as_dict()
        request = httpx.Request(
            method,
            self._url(str(url)),
            json=options.get("json"),
            params=query or None,
            headers=headers,
            cookies=self._cookies,
            extensions={"timeout": timeout},
        )
        _tracing.inject(request.headers)
        return request


class _NoTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The transport of an exchange, which never sends through its own."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError("volcano sends every request through the caller's httpx client")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError("volcano sends every request through the caller's httpx client")


_NO_TRANSPORT = _NoTransport()


class _Exchange(httpx.Client):
    """The httpx client a generated function is handed, lent to one request at a time.

    It builds that request (`_Route`), sends it, and keeps its response: the generated functions
    parse the body before they return the status, and raise on a body they cannot read, and the
    kept response still tells the status.
    """

    def __init__(
        self, route: _Route, through: httpx.Client, direct: httpx.BaseTransport | None
    ) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False)
        self._route = route
        self._through = through
        self._direct = direct
        self.api = _generated_client(route.base).set_httpx_client(self)
        self.seconds: float | None = None
        self.response: httpx.Response | None = None

    def request(self, method: str, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """Build the request, send it, and keep its response."""
        request = self._route.build(method, url, self.seconds, **options)
        if self._direct is None:
            self.response = self._through.send(request)
        else:
            self.response = self._direct.handle_request(request)
            self.response.read()
        return self.response


class _AsyncExchange(httpx.AsyncClient):
    """The asyncio twin of `_Exchange`."""

    def __init__(
        self, route: _Route, through: httpx.AsyncClient, direct: httpx.AsyncBaseTransport | None
    ) -> None:
        super().__init__(transport=_NO_TRANSPORT, trust_env=False)
        self._route = route
        self._through = through
        self._direct = direct
        self.api = _generated_client(route.base).set_async_httpx_client(self)
        self.seconds: float | None = None
        self.response: httpx.Response | None = None

    async def request(self, method: str, url: httpx.URL | str, **options: Any) -> httpx.Response:
        """Build the request, send it, and keep its response."""
        request = self._route.build(method, url, self.seconds, **options)
        if self._direct is None:
            self.response = await self._through.send(request)
        else:
            self.response = await self._direct.handle_async_request(request)
            await self.response.aread()
        return self.response


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


def _generated_client(base_url: str) -> GeneratedClient:
    # Undocumented statuses come back as `parsed=None`, never as an exception.
    return _client_class()(base_url=base_url, raise_on_unexpected_status=False)


def _answer(
    call: Call[T],
    response: httpx.Response,
    detailed: DetailedResponse[Any] | None,
    sent_at: float,
    started: float,
) -> _reading.Success[T]:
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
    return _reading.Success(value, sent_at, _replayed(response))


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
