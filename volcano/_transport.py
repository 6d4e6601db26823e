"""The HTTP client the SDK makes for itself when the caller gives none.

A client's CPU per request is mostly its HTTP stack's: httpx's own transport (httpcore and h11)
took twice the CPU of the standard library's `http.client` for one request to the reference
server, and http.client twice that of reading the answer's head with bytes methods (bench/
README.md, issue 36). So the SDK's own `httpx.Client` sends through `Transport`, an
`httpx.BaseTransport` (httpx's public interface for transports) whose connections speak
HTTP/1.1 themselves (`_http11.py`): keep-alive, TLS with httpx's default certificates
(`httpx.create_ssl_context`, made when the first `https` connection is), the timeouts each
request carries in `request.extensions["timeout"]`, and every failure raised as the httpx
exception httpx's own transport raises for it. Like httpx's default pool it has at most
`_pool.MAX_CONNECTIONS` requests under way at once (one more waits up to its pool timeout,
then `httpx.PoolTimeout`) and closes a connection idle for `_pool.KEEPALIVE_EXPIRY` seconds,
or closed by the server, before it would reuse it.

It reads each answer whole (the API's are small) and sends no request through a proxy: where
proxy variables are set (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`), the SDK's own client is
httpx's default, which honours them. The asyncio client's own transport is its twin
(`_async_transport.py`).

`OwnClient` and `AsyncOwnClient` mark the clients made here: the SDK hands their requests to
the transport itself (`direct`), since such a client adds nothing to a request (no auth, hooks,
redirects or cookies of a caller's) that the SDK would want from `httpx.Client.send`.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from . import _pool
from ._http11 import Connection
from ._pool import Origin, Own, origin_of, seconds

if TYPE_CHECKING:
    import ssl

__all__ = [
    "OwnClient",
    "Transport",
    "default_http",
    "direct",
]

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)


class OwnClient(Own, httpx.Client):
    """An `httpx.Client` the SDK made for itself, on `transport`."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport=transport, trust_env=False)
        self.transport = transport


def default_http(http_type: type[HttpT]) -> HttpT:
    """The client the SDK sends through when given none.

    An `OwnClient` (an `AsyncOwnClient`, from `_async_transport`, which only the asyncio client
    imports); where proxy variables are set, httpx's default client, which honours them.
    """
    if _proxied():
        return http_type()
    if http_type is httpx.Client:
        client: httpx.Client | httpx.AsyncClient = OwnClient(Transport())
    else:
        from ._async_transport import AsyncOwnClient  # only the asyncio client needs it

        client = AsyncOwnClient()
    assert isinstance(client, http_type)  # noqa: S101 - for mypy: HttpT is one of the two
    return client


def direct(
    http: httpx.Client | httpx.AsyncClient,
) -> httpx.BaseTransport | httpx.AsyncBaseTransport | None:
    """The transport to hand `http`'s requests to straight away, if any.

    An own client's; None for a caller's client, or httpx's default one (through its `send`).
    """
    if isinstance(http, Own):
        return http.transport
    return None


def _proxied() -> bool:
    # The variables httpx reads when trust_env is on (the default): any of them makes the SDK's
    # client httpx's own, so that NO_PROXY and each scheme's proxy apply as httpx applies them.
    proxies = urllib.request.getproxies()
    return any(scheme in proxies for scheme in ("http", "https", "all"))


class Transport(httpx.BaseTransport):
    """Keep-alive HTTP/1.1 connections (`_http11.Connection`), `_pool.MAX_CONNECTIONS` at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Origin, list[tuple[float, Connection]]] = {}
        self._slots = threading.BoundedSemaphore(_pool.MAX_CONNECTIONS)
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and read its answer whole; httpx's exceptions for what goes wrong."""
        timeouts = request.extensions.get("timeout", {})
        if not self._slots.acquire(timeout=seconds(timeouts.get("pool"))):
            raise httpx.PoolTimeout("no connection came free in time", request=request)
        try:
            return self._exchange(request, timeouts)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections; those under way close when their requests end."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for _, connection in connections:
                connection.close()

    def _exchange(self, request: httpx.Request, timeouts: dict[str, Any]) -> httpx.Response:
        origin = origin_of(request.url)
        connection = self._reuse(origin) or self._connect(request, origin, timeouts)
        try:
            response = connection.exchange(request, timeouts)
        finally:
            if connection.reusable:
                self._keep(origin, connection)
            else:
                connection.close()
        return response

    def _reuse(self, origin: Origin) -> Connection | None:
        """An idle connection to `origin` that is still good, or None."""
        now = time.monotonic()
        while True:
            with self._lock:
                connections = self._idle.get(origin)
                if not connections:
                    return None
                since, connection = connections.pop()
            # Data or EOF on an idle connection: the server closed it (or broke the protocol).
            if now - since < _pool.KEEPALIVE_EXPIRY and connection.idle():
                return connection
            connection.close()

    def _keep(self, origin: Origin, connection: Connection) -> None:
        with self._lock:
            connections = self._idle.setdefault(origin, [])
            if not self._closed and len(connections) < _pool.MAX_IDLE:
                connections.append((time.monotonic(), connection))
                return
        connection.close()

    def _connect(
        self, request: httpx.Request, origin: Origin, timeouts: dict[str, Any]
    ) -> Connection:
        scheme, host, port = origin
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the scheme {scheme!r} is not http or https")
        timeout = seconds(timeouts.get("connect"))
        try:
            sock = socket.create_connection((host, port), timeout)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from exc
        except OSError as exc:  # refused, unreachable, an unknown host
            raise httpx.ConnectError(str(exc), request=request) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":  # the handshake, within the connect timeout
                sock = self._ssl_context().wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:
            sock.close()
            raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from exc
        except OSError as exc:  # a failed handshake, an unknown certificate
            sock.close()
            raise httpx.ConnectError(str(exc), request=request) from exc
        return Connection(sock)

    def _ssl_context(self) -> ssl.SSLContext:
        # Made on first use: loading the certificates takes tens of milliseconds.
        with self._lock:
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            return self._ssl
