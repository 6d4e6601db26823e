"""Sending: every request of the SDK goes out through `Sender.send` (or `AsyncSender.send`).

Each request goes through the generated client's own extension point, `set_httpx_client`,
given a `_Routed` client: an `httpx.Client` subclass that builds requests for the API (base
URL, credentials, and that request's timeout, since a renewal may wait only as long as its
lease has left) and sends them through the caller's `httpx.Client`, keeping the response. The
generated functions parse the body before they return the status, so a non-JSON page (a proxy's
503, say) makes them raise; the kept response still lets the status decide the error.
"""

from __future__ import annotations

import copy
import functools
import time
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from . import _reading

if TYPE_CHECKING:
    from _volcano_api import Client as GeneratedClient

    from .._config import Settings
    from ._calls import Call
    from ._reading import Answer

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
        self, call: Call[T], *, sent_at: float, request_timeout: float | None = None
    ) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error` for anything else.

        Args:
            call: The request.
            sent_at: When (monotonic) its request id was first sent: this send, or the first
                of the retries it repeats. The answer dates from it.
            request_timeout: Seconds it may take; the client's timeout by default.
        """
        routed = self._routed.for_request(request_timeout)
        api = _generated_client(self._settings).set_httpx_client(routed)
        started = time.monotonic()
        try:
            detailed = call.operation.generated().sync_detailed(
                client=api, x_request_id=call.request_id, **call.kwargs
            )
        except _HTTPX_ERRORS as exc:
            raise _reading.send_error(call, exc, self._settings, started) from exc
        except _reading.PARSE_ERRORS:
            if routed.response is None:
                raise  # not a body the generated parse refused: a bug, so let it show
            detailed = None
        return _reading.answer(call, _received(routed.response), detailed, sent_at, started)


class AsyncSender:
    """Sends Calls through the caller's `httpx.AsyncClient`; see `Sender`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings) -> None:
        self._routed = _AsyncRouted(http, settings)
        self._settings = settings

    async def send(
        self, call: Call[T], *, sent_at: float, request_timeout: float | None = None
    ) -> Answer[T]:
        """Send `call` once; return its answer or raise a `volcano.Error`; see `Sender.send`."""
        routed = self._routed.for_request(request_timeout)
        api = _generated_client(self._settings).set_async_httpx_client(routed)
        started = time.monotonic()
        try:
            detailed = await call.operation.generated().asyncio_detailed(
                client=api, x_request_id=call.request_id, **call.kwargs
            )
        except _HTTPX_ERRORS as exc:
            raise _reading.send_error(call, exc, self._settings, started) from exc
        except _reading.PARSE_ERRORS:
            if routed.response is None:
                raise  # not a body the generated parse refused: a bug, so let it show
            detailed = None
        return _reading.answer(call, _received(routed.response), detailed, sent_at, started)


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


@functools.cache
def _client_class() -> type[GeneratedClient]:
    from _volcano_api import Client

    return Client


def _generated_client(settings: Settings) -> GeneratedClient:
    # Undocumented statuses come back as `parsed=None`, never as an exception.
    return _client_class()(base_url=settings.api_url, raise_on_unexpected_status=False)
