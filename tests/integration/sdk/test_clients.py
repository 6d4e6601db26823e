"""Client and AsyncClient against the real server: configuration, lifecycle, transport errors.

Tests that take `sdk` or `client_kind` run with both clients (tests/support/sdk.py)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks
from tests.support.sdk import Kind, Sdk
from tests.support.sockets import closed_url

from .conftest import Wire, credentials

ENV_NAMES = ("VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY", "VOLCANO_API_URL")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, live_server: LiveServer) -> pytest.MonkeyPatch:
    """The three VOLCANO_* variables set for the main project on the live server."""
    for name, value in live_server.project.env(live_server.url).items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback URL that accepts connections (into the backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def held_by(server: Locks, key: str, lease: volcano.LockLease) -> bool:
    state = server.state(key)
    return state["held"] is True and state["fencing_token"] == lease.fencing_token


class TestConfiguration:
    def test_arguments_reach_the_server(
        self, client_kind: Kind, live_server: LiveServer, server: Locks, key: str
    ) -> None:
        """Keys and api_url given as arguments make a working client of that project."""
        with contextlib.closing(Sdk(client_kind, credentials(live_server))) as sdk:
            lease = sdk.acquire(key, ttl=30)
        assert held_by(server, key, lease)

    def test_environment_supplies_every_argument(
        self,
        client_kind: Kind,
        env: pytest.MonkeyPatch,
        live_server: LiveServer,
        server: Locks,
        key: str,
    ) -> None:
        """VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY and VOLCANO_API_URL configure a client made
        without arguments."""
        with contextlib.closing(Sdk(client_kind, {})) as sdk:
            assert sdk.client.api_url == live_server.url
            lease = sdk.acquire(key, ttl=30)
        assert held_by(server, key, lease)

    def test_arguments_override_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, live_server: LiveServer, key: str
    ) -> None:
        """Explicit arguments win over wrong values in the environment."""
        monkeypatch.setenv("VOLCANO_ANON_KEY", live_server.other.anon_key)
        monkeypatch.setenv("VOLCANO_SERVICE_KEY", "wrong-service-key")
        monkeypatch.setenv("VOLCANO_API_URL", closed_url())
        with volcano.Client(**credentials(live_server)) as client:
            assert client.locks.acquire(key, ttl=30).fencing_token == 1

    @pytest.mark.parametrize("make", [volcano.Client, volcano.AsyncClient])
    @pytest.mark.parametrize("missing", ["VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY"])
    def test_missing_key_names_its_variable(
        self,
        env: pytest.MonkeyPatch,
        live_server: LiveServer,
        missing: str,
        make: Callable[[], object],
    ) -> None:
        """A key neither passed nor in the environment fails construction, naming the variable."""
        env.delenv(missing)
        with pytest.raises(volcano.InvalidArgumentError, match=missing) as raised:
            make()
        assert live_server.project.anon_key not in str(raised.value)
        assert live_server.project.service_key not in str(raised.value)

    def test_api_url_defaults_to_the_hosted_service(self, env: pytest.MonkeyPatch) -> None:
        """Without api_url or VOLCANO_API_URL the client aims at https://api.volcano.dev (with
        keys of the hosted kind: a local server's are refused, tests/unit/sdk/test_client.py)."""
        env.delenv("VOLCANO_API_URL")
        env.setenv("VOLCANO_ANON_KEY", "vk_anon_hosted")
        env.setenv("VOLCANO_SERVICE_KEY", "vk_service_hosted")
        with volcano.Client() as client:
            assert client.api_url == "https://api.volcano.dev"

    def test_api_url_with_trailing_slash(
        self, live_server: LiveServer, server: Locks, key: str
    ) -> None:
        """An api_url ending in '/' still reaches the API's paths."""
        args = {**credentials(live_server), "api_url": live_server.url + "/"}
        with volcano.Client(**args) as client:
            lease = client.locks.acquire(key, ttl=30)
        assert held_by(server, key, lease)

    def test_timeout_as_timedelta(self, live_server: LiveServer) -> None:
        """timeout= takes a timedelta and reports seconds."""
        with volcano.Client(**credentials(live_server), timeout=timedelta(seconds=2.5)) as client:
            assert client.timeout == 2.5

    def test_repr_shows_no_key(self, live_server: LiveServer) -> None:
        """repr() of a client names its URL but neither key."""
        with volcano.Client(**credentials(live_server)) as client:
            text = repr(client) + repr(client.locks)
        assert live_server.url in text
        assert live_server.project.anon_key not in text
        assert live_server.project.service_key not in text


class TestLifecycle:
    def test_context_manager_closes(self, sdk: Sdk) -> None:
        """`with client as c` (`async with`) gives the client itself and closes it on exit."""
        with sdk.entered(sdk.client) as entered:
            assert entered is sdk.client
            assert not sdk.client.closed
        assert sdk.client.closed

    def test_closed_client_refuses_every_method_and_sends_nothing(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """close() may come twice; after it every method, entering a guard and entering the
        client raise ClientClosedError without a request."""
        lease = sdk.acquire(key, ttl=30)
        sent = wire.count()
        sdk.close_client()
        sdk.close_client()
        calls: list[Callable[[], object]] = [
            lambda: sdk.acquire(key, ttl=30),
            lambda: sdk.renew(key, lease),
            lambda: sdk.release(key, lease),
            lambda: sdk.get(key),
            lambda: sdk.force_release(key),
            lambda: sdk.enter(sdk.with_lock(key, ttl=30)),
            lambda: sdk.enter(sdk.client),
        ]
        for call in calls:
            with pytest.raises(volcano.ClientClosedError):
                call()
        assert wire.count() == sent

    def test_injected_http_client_is_used_and_left_open(
        self, live_server: LiveServer, key: str
    ) -> None:
        """Requests go through http_client with the SDK's User-Agent; close() leaves it open."""
        seen: list[httpx.Request] = []
        with httpx.Client(event_hooks={"request": [seen.append]}) as http:
            client = volcano.Client(**credentials(live_server), http_client=http)
            client.locks.get(key)
            client.close()
            assert http.get(f"{live_server.url}/healthz").status_code == 200
        assert seen[0].headers["User-Agent"] == f"volcano-python/{volcano.__version__}"

    @pytest.mark.anyio
    async def test_injected_async_http_client_is_used_and_left_open(
        self, live_server: LiveServer, key: str
    ) -> None:
        """Requests go through http_client with the SDK's User-Agent; close() leaves it open."""
        seen: list[httpx.Request] = []

        async def record(request: httpx.Request) -> None:
            seen.append(request)

        async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
            client = volcano.AsyncClient(**credentials(live_server), http_client=http)
            await client.locks.get(key)
            await client.close()
            assert (await http.get(f"{live_server.url}/healthz")).status_code == 200
        assert seen[0].headers["User-Agent"] == f"volcano-python/{volcano.__version__}"


class TestTransportErrors:
    def test_closed_port_acquire_is_tried_twice(
        self, make_sdk: Callable[..., Sdk], wire: Wire, key: str
    ) -> None:
        """A refused connection raises APIConnectionError after exactly one retry of acquire."""
        sdk = make_sdk(api_url=closed_url())
        with pytest.raises(volcano.APIConnectionError) as raised:
            sdk.acquire(key, ttl=30)
        assert not isinstance(raised.value, volcano.APITimeoutError)
        first, second = wire.of("acquire")
        assert first.request.headers["X-Request-Id"] == second.request.headers["X-Request-Id"]
        assert first.request.content == second.request.content
        assert raised.value.request_id == first.request.headers["X-Request-Id"]
        assert wire.count() == 2

    def test_closed_port_other_methods_are_tried_once(
        self, make_sdk: Callable[..., Sdk], wire: Wire, key: str
    ) -> None:
        """get, renew, release and force_release raise APIConnectionError with no retry."""
        sdk = make_sdk(api_url=closed_url())
        lease = volcano.LockLease(
            key=key,
            owner_token="0F8FAD5B-D9CB-469F-A165-70867728950E",
            fencing_token=1,
            expires_at=datetime(2030, 1, 1, tzinfo=UTC),
            ttl_seconds=30,
        )
        calls: list[Callable[[], object]] = [
            lambda: sdk.get(key),
            lambda: sdk.renew(key, lease),
            lambda: sdk.release(key, lease),
            lambda: sdk.force_release(key),
        ]
        for call in calls:
            with pytest.raises(volcano.APIConnectionError):
                call()
        assert wire.count() == len(calls)

    def test_closed_port_without_wire(self, live_server: LiveServer) -> None:
        """The client's own HTTP stack maps a refused connection to APIConnectionError."""
        args = {**credentials(live_server), "api_url": closed_url()}
        with volcano.Client(**args) as client, pytest.raises(volcano.APIConnectionError):
            client.locks.get("k")

    def test_silent_server_times_out(
        self, client_kind: Kind, live_server: LiveServer, silent_url: str
    ) -> None:
        """No answer within timeout= raises APITimeoutError (an APIConnectionError)."""
        args = {**credentials(live_server), "api_url": silent_url, "timeout": 0.2}
        with contextlib.closing(Sdk(client_kind, args)) as sdk:
            with pytest.raises(volcano.APITimeoutError) as raised:
                sdk.acquire("k", ttl=30)
            assert isinstance(raised.value, volcano.APIConnectionError)
            with pytest.raises(volcano.APITimeoutError):
                sdk.get("k")
