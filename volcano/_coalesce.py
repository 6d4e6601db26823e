"""The SDK's own httpx client: each request leaves in one send, not two.

httpx (through httpcore and h11) writes a request's head and its body with a socket send each.
On a keep-alive connection to a server nearby, each send wakes the server, which then reads,
parses and schedules twice for one request; and each costs the client a system call. Measured
on an uncontended acquire+release against the reference server (issue 27, bench/README.md):
the two sends made httpx's cycle cost more client CPU than http.client's (which joins head and
body), and more server CPU per cycle.

Here the connection's stream holds what is written until the next read (a request is always
followed by reading its answer) or until `HOLD_BYTES` are held, and sends it as one. Only the
client the SDK makes for itself gets it; an `http_client` given by the caller is used as it
is. It rests on httpcore's network backend, which httpx's default transports keep at
`_pool._network_backend`; should a release of httpx or httpcore move it, the client is the
plain one (`coalescing` tells), with every behaviour as before.
"""

from __future__ import annotations

import ssl
import typing
from typing import Any, TypeVar

import httpcore
import httpx

__all__ = ["HOLD_BYTES", "coalescing", "default_http"]

HOLD_BYTES = 64 * 1024
"""Held writes are sent once they reach this size, without waiting for a read."""

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)


def default_http(http_type: type[HttpT]) -> HttpT:
    """An `httpx.Client` (or `AsyncClient`) as `http_type()` makes it, sending in one go."""
    client = http_type()
    transport: Any = getattr(client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    elif isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _AsyncBackend(backend)  # type: ignore[union-attr]
    return client


def coalescing(client: httpx.Client | httpx.AsyncClient) -> bool:
    """Whether `client`'s default transport sends each request in one go."""
    transport: Any = getattr(client, "_transport", None)
    backend = getattr(getattr(transport, "_pool", None), "_network_backend", None)
    return isinstance(backend, _Backend | _AsyncBackend)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _Stream(httpcore.NetworkStream):
    """Holds writes until the next read (or HOLD_BYTES), then sends them as one."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0
        self._timeout: float | None = None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._size += len(buffer)
        self._timeout = timeout
        if self._size >= HOLD_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._size = 0
            self._stream.write(data, self._timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        return self._stream.read(max_bytes, timeout)

    def close(self) -> None:
        self._held.clear()
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        self._flush()
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _AsyncStream(httpcore.AsyncNetworkStream):
    """The asyncio twin of `_Stream`."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0
        self._timeout: float | None = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        self._held.append(buffer)
        self._size += len(buffer)
        self._timeout = timeout
        if self._size >= HOLD_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._size = 0
            await self._stream.write(data, self._timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        await self._flush()
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._held.clear()
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        await self._flush()
        return _AsyncStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
