"""Fixtures for the SDK's integration tests: real clients, the real server, and a second party.

`sdk` (and each client of `make_sdk`, tests/conftest.py) is a `volcano.Client` or
`volcano.AsyncClient` (`client_kind` runs each test with both) behind the one blocking
interface of tests/support/sdk.py, so that one test body covers both. It sends through a `Wire`
(`sdk_target`): the real HTTP transport with a record of every exchange (so a test can
count what reached the server) and two switchable faults, a refused connection and a lost answer,
for what a real network does without a proxy; every answer is checked against openapi.yaml.
`aclient` is an `AsyncClient` alone, for what only asyncio has (cancellation). `server` is
another party speaking raw HTTP with the same project's keys, to act on the lock behind the
SDK's back or to read the server's state independently.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator

import attrs
import httpx
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, operation
from tests.support.sdk import TLS, Kind, SdkTarget

WAIT = 10.0
"""Upper bound (seconds) on waiting for something that should happen much sooner."""


@attrs.define
class Exchange:
    """One request the SDK handed to the network, and the answer (None: none came back)."""

    request: httpx.Request
    status: int | None = None
    headers: httpx.Headers | None = None
    content: bytes | None = None


class Wire:
    """Every request the SDK sent and what came back, with faults switched on per operation.

    `refuse`: operations whose requests fail to connect (nothing reaches the server).
    `lose`: one entry per answer to lose: the server acts, then the client sees a ReadError
    (`wire.lose = ["acquire"]` loses the next acquire's answer only).
    """

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.refuse: set[str] = set()
        self.lose: list[str] = []
        self._lock = threading.Lock()

    def of(self, name: str) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if operation(e.request) == name]

    def count(self) -> int:
        with self._lock:
            return len(self.exchanges)

    def sending(self, request: httpx.Request) -> Exchange:
        """Record `request`; raise ConnectError when its operation is refused."""
        exchange = Exchange(request)
        with self._lock:
            self.exchanges.append(exchange)
        if operation(request) in self.refuse:
            raise httpx.ConnectError("connection refused (test fault)", request=request)
        return exchange

    def answered(self, exchange: Exchange, response: httpx.Response) -> bool:
        """Record the answer; True when it is to be lost."""
        exchange.status = response.status_code
        exchange.headers = response.headers
        exchange.content = response.content
        name = operation(exchange.request)
        with self._lock:
            if name in self.lose:
                self.lose.remove(name)
                return True
        return False


class SyncWire(httpx.BaseTransport):
    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.inner = httpx.HTTPTransport(verify=TLS)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        exchange = self.wire.sending(request)
        response = self.inner.handle_request(request)
        response.read()
        if self.wire.answered(exchange, response):
            response.close()
            raise httpx.ReadError("the answer was lost (test fault)", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncWire(httpx.AsyncBaseTransport):
    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.inner = httpx.AsyncHTTPTransport(verify=TLS)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = self.wire.sending(request)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if self.wire.answered(exchange, response):
            await response.aclose()
            raise httpx.ReadError("the answer was lost (test fault)", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def credentials(live_server: LiveServer) -> dict[str, str]:
    """The Client arguments for the main project on the live server."""
    return live_server.project.client_args(live_server.url)


@pytest.fixture(scope="session")
def server(live_server: LiveServer) -> Iterator[Locks]:
    """Another party with the main project's keys; every answer checked against openapi.yaml."""
    with live_server.http(live_server.project, verify=TLS) as http:
        yield Locks(http)


@pytest.fixture
async def aclient(live_server: LiveServer) -> AsyncIterator[volcano.AsyncClient]:
    """An AsyncClient of the main project."""
    async with (
        httpx.AsyncClient(verify=TLS) as http,
        volcano.AsyncClient(**credentials(live_server), http_client=http) as made,
    ):
        yield made


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
def sdk_target(live_server: LiveServer, wire: Wire) -> SdkTarget:
    """`make_sdk`'s clients send to the live server through `wire`, every answer checked
    against openapi.yaml."""

    def transport(kind: Kind) -> SyncWire | AsyncWire:
        return SyncWire(wire) if kind == "sync" else AsyncWire(wire)

    return SdkTarget(credentials(live_server), transport, check=True)
