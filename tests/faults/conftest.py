"""Fixtures for the fault suite: the real SDK -> a real FaultProxy -> the real reference server.

`sdk` is a volcano client, sync or async (`client_kind` runs each test with both), behind the one
blocking interface of tests/support/sdk.py, so that one test body covers both. `other` is a second
party talking to the server directly (no proxy), to observe the lock or take it behind the SDK's
back.

`target` is the server behind the proxy: the session's `live_server` (SQLite and PostgreSQL) by
default; a module may override it with `sqlite_server` where the backend does not matter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.proxy import FaultProxy
from tests.support.sdk import TLS, Kind, Sdk


@pytest.fixture
def target(live_server: LiveServer) -> LiveServer:
    """The server behind the proxy."""
    return live_server


@pytest.fixture
def proxy(target: LiveServer) -> Iterator[FaultProxy]:
    """A FaultProxy in front of `target`; it must end without internal errors."""
    with FaultProxy(upstream=target.url) as made:
        yield made
        assert made.errors == []


@pytest.fixture
def make_sdk(
    client_kind: Kind, proxy: FaultProxy, target: LiveServer
) -> Iterator[Callable[..., Sdk]]:
    """Clients of `client_kind` that talk to the server through `proxy`."""
    made: list[Sdk] = []

    def make(*, timeout: float = 5.0) -> Sdk:
        arguments = {**target.project.client_args(proxy.url), "timeout": timeout}
        sdk = Sdk(client_kind, arguments)
        made.append(sdk)
        return sdk

    yield make
    for sdk in made:
        sdk.close()


@pytest.fixture
def sdk(make_sdk: Callable[..., Sdk]) -> Sdk:
    return make_sdk()


@pytest.fixture
def other(target: LiveServer) -> Iterator[volcano.Client]:
    """A second party with the same project's keys, straight to the server (no proxy)."""
    with (
        httpx.Client(verify=TLS) as http,
        volcano.Client(**target.project.client_args(target.url), http_client=http) as client,
    ):
        yield client
