"""Fixtures for the fault suite: the real SDK -> a real FaultProxy -> the real reference server.

`sdk` (and each client of `make_sdk`, tests/conftest.py) is a volcano client, sync or async
(`client_kind` runs each test with both), behind the one blocking interface of
tests/support/sdk.py, so that one test body covers both; `sdk_target` aims them at the proxy.
`other` is a second party talking to the server directly (no proxy), to observe the lock or take
it behind the SDK's back.

`target` is the server behind the proxy: the session's `live_server` (SQLite and PostgreSQL) by
default; a module may override it with `sqlite_server` where the backend does not matter.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.proxy import FaultProxy
from tests.support.sdk import TLS, SdkTarget


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
def sdk_target(proxy: FaultProxy, target: LiveServer) -> SdkTarget:
    """`make_sdk`'s clients (tests/conftest.py) talk to the server through `proxy`, with a
    timeout of 5 s unless a test gives another."""
    return SdkTarget({**target.project.client_args(proxy.url), "timeout": 5.0})


@pytest.fixture
def other(target: LiveServer) -> Iterator[volcano.Client]:
    """A second party with the same project's keys, straight to the server (no proxy)."""
    with (
        httpx.Client(verify=TLS) as http,
        volcano.Client(**target.project.client_args(target.url), http_client=http) as client,
    ):
        yield client
