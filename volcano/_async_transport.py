"""The asyncio twin of `_transport.Transport`: the SDK's own HTTP/1.1 for `volcano.AsyncClient`.

httpx's own async transport runs each request through httpcore, anyio and h11: about four fifths
of the asyncio client's CPU per lock call (bench/README.md, issue 36). `AsyncTransport`, an
`httpx.AsyncBaseTransport` (httpx's public interface for transports), keeps each connection as
an `asyncio.Protocol` that gathers what arrives, and reads the answer with the same HTTP/1.1
reader as the threaded transport (`_http11.Connection`), over the bytes gathered so far: an
answer that has not all arrived is read again once more has (the API's answers are small, and
come in one piece nearly always). The rest is the threaded transport's: keep-alive, at most
`MAX_CONNECTIONS` requests under way (one more waits up to its pool timeout, then
`httpx.PoolTimeout`), idle connections closed after `KEEPALIVE_EXPIRY` or when the server closed
them, TLS with httpx's default certificates, the timeouts in `request.extensions["timeout"]`,
and httpx's exception for each failure.

Under another async library than asyncio (trio, through anyio), requests go through httpx's
own async transport, made on first use.
"""

from __future__ import annotations

import asyncio
import select
import time
from typing import TYPE_CHECKING, Any, cast

import httpx
from sniffio import current_async_library

from . import _pool
from ._http11 import Broken, Connection, NeedMore, head_of
from ._pool import Origin, origin_of, seconds

if TYPE_CHECKING:
    import ssl

__all__ = ["AsyncOwnClient", "AsyncTransport"]


class _Gathered(Connection):
    """The HTTP/1.1 reader over the bytes a connection has gathered.

    It asks for more by raising `NeedMore` until the connection has ended (then, as a closed
    socket would, it reads nothing more).
    """

    __slots__ = ("_ended",)

    def __init__(self, data: bytes, ended: bool) -> None:  # no socket: nothing to send on
        self._buffer = bytearray(data)
        self.reusable = False
        self._ended = ended

    def _fill(self) -> bool:
        if self._ended:
            return False
        raise NeedMore


class _Link(asyncio.Protocol):
    """One connection: what has arrived on it, and whether it has ended."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.data = bytearray()
        self.ended = False
        self.error: Exception | None = None
        self.reusable = False
        self._arrived: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (uvloop's are not asyncio.Transport subclasses, but quack alike).
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        self.data += data
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    def idle(self) -> bool:
        """Whether nothing came since the last answer, neither data nor the server's close.

        Asked of the socket too (as httpcore does), since the loop may not have run the
        callbacks of what arrived just now.
        """
        transport = self.transport
        if self.data or self.ended or transport is None or transport.is_closing():
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return True
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return not poller.poll(0)
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, request: httpx.Request, timeouts: dict[str, Any]) -> httpx.Response:
        """Send `request` (its body read whole) and read its answer whole."""
        self.reusable = False
        body = await request.aread()
        message = head_of(request, body) + body
        transport = self.transport
        if transport is None or transport.is_closing() or self.ended:
            raise httpx.WriteError("the connection is closed", request=request)
        transport.write(message)  # one write; asyncio sends what the socket takes at once
        try:
            async with asyncio.timeout(seconds(timeouts.get("read"))):
                while True:
                    reader = _Gathered(bytes(self.data), self.ended)
                    try:
                        response = reader.answer(request)
                        break
                    except NeedMore:
                        self._arrived = asyncio.get_running_loop().create_future()
                        await self._arrived
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
        except Broken as exc:
            if isinstance(self.error, OSError):  # reset, say: what the socket said
                raise httpx.ReadError(str(self.error), request=request) from self.error
            raise httpx.RemoteProtocolError(str(exc), request=request) from None
        self.data.clear()
        self.reusable = reader.reusable and not self.ended
        return response


class AsyncTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 connections on asyncio (`_Link`), `MAX_CONNECTIONS` at once."""

    def __init__(self) -> None:
        self._idle: dict[Origin, list[tuple[float, _Link]]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._ssl: ssl.SSLContext | None = None
        self._other: httpx.AsyncHTTPTransport | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and read its answer whole; httpx's exceptions for what goes wrong."""
        if current_async_library() != "asyncio":
            if self._other is None:
                self._other = httpx.AsyncHTTPTransport()
            return await self._other.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        if self._slots is None:
            self._slots = asyncio.Semaphore(_pool.MAX_CONNECTIONS)
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(seconds(timeouts.get("pool"))):
                    await slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout(
                    "no connection came free in time", request=request
                ) from None
        else:
            await slots.acquire()
        try:
            return await self._exchange(request, timeouts)
        finally:
            slots.release()

    async def aclose(self) -> None:
        """Close the idle connections; those under way close when their requests end."""
        self._closed = True
        idle, self._idle = self._idle, {}
        for links in idle.values():
            for _, link in links:
                link.close()
        if self._other is not None:
            await self._other.aclose()

    async def _exchange(self, request: httpx.Request, timeouts: dict[str, Any]) -> httpx.Response:
        origin = origin_of(request.url)
        link = self._reuse(origin) or await self._connect(request, origin, timeouts)
        try:
            response = await link.exchange(request, timeouts)
        except BaseException:
            link.close()  # cancelled or failed mid-answer: never reused
            raise
        if link.reusable:
            self._keep(origin, link)
        else:
            link.close()
        return response

    def _reuse(self, origin: Origin) -> _Link | None:
        """An idle connection to `origin` that is still good, or None."""
        now = time.monotonic()
        links = self._idle.get(origin)
        while links:
            since, link = links.pop()
            if now - since < _pool.KEEPALIVE_EXPIRY and link.idle():
                return link
            link.close()
        return None

    def _keep(self, origin: Origin, link: _Link) -> None:
        links = self._idle.setdefault(origin, [])
        if not self._closed and len(links) < _pool.MAX_IDLE:
            links.append((time.monotonic(), link))
        else:
            link.close()

    async def _connect(
        self, request: httpx.Request, origin: Origin, timeouts: dict[str, Any]
    ) -> _Link:
        scheme, host, port = origin
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the scheme {scheme!r} is not http or https")
        tls = self._ssl_context() if scheme == "https" else None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(seconds(timeouts.get("connect"))):
                _, link = await loop.create_connection(
                    _Link, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from exc
        except OSError as exc:  # refused, unreachable, an unknown host, a failed handshake
            raise httpx.ConnectError(str(exc), request=request) from exc
        return link

    def _ssl_context(self) -> ssl.SSLContext:
        # Made on first use: loading the certificates takes tens of milliseconds.
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context()
        return self._ssl


class AsyncOwnClient(_pool.Own, httpx.AsyncClient):
    """An `httpx.AsyncClient` the SDK made for itself, on `AsyncTransport`."""

    def __init__(self) -> None:
        self.transport = AsyncTransport()
        super().__init__(transport=self.transport, trust_env=False)
