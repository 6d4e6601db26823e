"""Fixtures for the SDK's unit tests (helpers in support.py).

`client` and `aclient` answer from the FakeApi (`fake_api`) on the FakeClock (`clock`); `sdk` is
either of them (`client_kind` runs a test with both) behind the blocking interface of
tests/support/sdk.py; `guards` is either of them behind the awaitable interface of support.py's
`Guards`, for with_lock guards, whose renewals the clock steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

import volcano
from tests.support.sdk import Kind, Sdk
from tests.unit.sdk.support import ANON_KEY, API_URL, SERVICE_KEY, FakeApi, FakeClock, Guards

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator


@pytest.fixture
def fake_api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock(fake_api: FakeApi) -> FakeClock:
    fake = FakeClock()
    fake_api.clock = fake
    return fake


@pytest.fixture
def make_client(fake_api: FakeApi, clock: FakeClock) -> Iterator[Callable[..., volcano.Client]]:
    made: list[volcano.Client] = []

    def make(**overrides: Any) -> volcano.Client:
        options: dict[str, Any] = {
            "anon_key": ANON_KEY,
            "service_key": SERVICE_KEY,
            "api_url": API_URL,
            "http_client": httpx.Client(transport=httpx.MockTransport(fake_api)),
        }
        options.update(overrides)
        client = volcano.Client(**options, _clock=clock)
        clock.follow(client._engine.settled)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., volcano.Client]) -> volcano.Client:
    return make_client()


@pytest.fixture
async def aclient(fake_api: FakeApi, clock: FakeClock) -> AsyncIterator[volcano.AsyncClient]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake_api))
    client = volcano.AsyncClient(
        anon_key=ANON_KEY, service_key=SERVICE_KEY, api_url=API_URL, http_client=http, _clock=clock
    )
    clock.follow(client._engine.settled)
    yield client
    await client.close()
    await http.aclose()


@pytest.fixture
def sdk(client_kind: Kind, fake_api: FakeApi, clock: FakeClock) -> Iterator[Sdk]:
    arguments = {"anon_key": ANON_KEY, "service_key": SERVICE_KEY, "api_url": API_URL}
    made = Sdk(client_kind, {**arguments, "_clock": clock}, transport=httpx.MockTransport(fake_api))
    client = made.client
    clock.follow(client._engine.settled)
    yield made
    made.close()


@pytest.fixture(params=["sync", "async"])
async def make_guards(
    request: pytest.FixtureRequest,
    make_client: Callable[..., volcano.Client],
    fake_api: FakeApi,
    clock: FakeClock,
) -> AsyncIterator[Callable[..., Guards]]:
    """`Guards` of a Client, then of an AsyncClient; keyword arguments override the client's."""
    made: list[tuple[volcano.AsyncClient, httpx.AsyncClient]] = []

    def make(**overrides: Any) -> Guards:
        if request.param == "sync":
            return Guards(make_client(**overrides), clock, fake_api)
        http = httpx.AsyncClient(transport=httpx.MockTransport(fake_api))
        arguments: dict[str, Any] = {
            "anon_key": ANON_KEY,
            "service_key": SERVICE_KEY,
            "api_url": API_URL,
            **overrides,
        }
        client = volcano.AsyncClient(**arguments, http_client=http, _clock=clock)
        clock.follow(client._engine.settled)
        made.append((client, http))
        return Guards(client, clock, fake_api)

    yield make
    for client, http in made:
        await client.close()
        await http.aclose()


@pytest.fixture
def guards(make_guards: Callable[..., Guards]) -> Guards:
    return make_guards()
