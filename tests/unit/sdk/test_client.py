"""Client and AsyncClient: configuration, and what each lock method sends and returns.

Tests that take `sdk` run with both clients (tests/support/sdk.py)."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import httpx
import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import (
    ANON_KEY,
    API_URL,
    EXPIRES,
    REQUEST_ID,
    SERVICE_KEY,
    TOKEN,
    FakeApi,
    body,
    error,
)

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

# A free key's LockState body, without its key.
FREE = {
    "held": False,
    "expires_at": None,
    "fencing_token": None,
    "limit": 1,
    "holders": [],
    "waiters": 0,
    "version": 0,
}


def lease_for(
    key: str = "daily-report", token: str = TOKEN, ttl: float = 30.0
) -> volcano.LockLease:
    return volcano.LockLease(
        key=key, owner_token=token, fencing_token=7, expires_at=EXPIRES, ttl_seconds=ttl
    )


def assert_credentials(request: httpx.Request) -> None:
    assert request.headers["apikey"] == ANON_KEY
    assert request.headers["Authorization"] == f"Bearer {SERVICE_KEY}"
    assert request.headers["User-Agent"] == f"volcano-python/{volcano.__version__}"


class TestConfiguration:
    def test_keys_and_url_default_to_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, fake_api: FakeApi
    ) -> None:
        """Each argument left out is read from its VOLCANO_* environment variable."""
        monkeypatch.setenv("VOLCANO_ANON_KEY", "env-anon")
        monkeypatch.setenv("VOLCANO_SERVICE_KEY", "env-service")
        monkeypatch.setenv("VOLCANO_API_URL", "http://127.0.0.1:8787/")
        with volcano.Client(http_client=httpx.Client(transport=httpx.MockTransport(fake_api))) as c:
            c.locks.get("k")
        request = fake_api.requests[0]
        assert request.headers["apikey"] == "env-anon"
        assert request.headers["Authorization"] == "Bearer env-service"
        assert str(request.url) == "http://127.0.0.1:8787/v1/locks/k"

    def test_arguments_override_the_environment(
        self, monkeypatch: pytest.MonkeyPatch, fake_api: FakeApi
    ) -> None:
        """Explicit arguments win over the environment."""
        monkeypatch.setenv("VOLCANO_ANON_KEY", "env-anon")
        monkeypatch.setenv("VOLCANO_SERVICE_KEY", "env-service")
        monkeypatch.setenv("VOLCANO_API_URL", "http://elsewhere.test")
        http = httpx.Client(transport=httpx.MockTransport(fake_api))
        with volcano.Client(
            anon_key=ANON_KEY, service_key=SERVICE_KEY, api_url=API_URL, http_client=http
        ) as c:
            c.locks.get("k")
        assert_credentials(fake_api.requests[0])
        assert str(fake_api.requests[0].url) == f"{API_URL}/v1/locks/k"

    def test_api_url_defaults_to_the_hosted_service(
        self, monkeypatch: pytest.MonkeyPatch, fake_api: FakeApi
    ) -> None:
        """Without api_url or VOLCANO_API_URL, requests go to https://api.volcano.dev."""
        monkeypatch.delenv("VOLCANO_API_URL", raising=False)
        http = httpx.Client(transport=httpx.MockTransport(fake_api), base_url="http://ignored.test")
        with volcano.Client(anon_key="a", service_key="s", http_client=http) as c:
            assert c.api_url == "https://api.volcano.dev"
            c.locks.get("k")
        assert str(fake_api.requests[0].url) == "https://api.volcano.dev/v1/locks/k"

    @pytest.mark.parametrize("local", ["anon_key", "service_key"])
    @pytest.mark.parametrize("client_class", [volcano.Client, volcano.AsyncClient])
    def test_local_keys_are_never_sent_to_the_default(
        self, monkeypatch: pytest.MonkeyPatch, fake_api: FakeApi, local: str, client_class: type
    ) -> None:
        """Keys made by volcano-server (vk_local_...) with no URL named are refused before any
        request is sent, with a message naming the fix and not the key."""
        monkeypatch.delenv("VOLCANO_API_URL", raising=False)
        keys = {"anon_key": "vk_anon_hosted", "service_key": "vk_service_hosted"}
        keys[local] = "vk_local_" + local + "_secret"
        transport = httpx.MockTransport(fake_api)
        http = (httpx.Client if client_class is volcano.Client else httpx.AsyncClient)(
            transport=transport
        )
        with pytest.raises(volcano.InvalidArgumentError) as caught:
            client_class(**keys, http_client=http)
        message = str(caught.value)
        assert "VOLCANO_API_URL" in message
        assert "https://api.volcano.dev" in message
        assert "secret" not in message
        assert fake_api.requests == []

    @pytest.mark.parametrize("named", ["argument", "environment"])
    def test_local_keys_go_where_the_user_says(
        self, monkeypatch: pytest.MonkeyPatch, fake_api: FakeApi, named: str
    ) -> None:
        """A URL the user named, even the hosted one, is respected with local keys."""
        keys = {"anon_key": "vk_local_anon_a", "service_key": "vk_local_service_s"}
        url = "https://api.volcano.dev"
        if named == "environment":
            monkeypatch.setenv("VOLCANO_API_URL", url)
        else:
            monkeypatch.delenv("VOLCANO_API_URL", raising=False)
            keys["api_url"] = url
        with volcano.Client(
            **keys, http_client=httpx.Client(transport=httpx.MockTransport(fake_api))
        ) as client:
            client.locks.get("k")
        assert str(fake_api.requests[0].url) == "https://api.volcano.dev/v1/locks/k"

    def test_api_url_keeps_its_path_prefix(self, make_client, fake_api: FakeApi) -> None:
        """A base URL with a path prefix keeps it in front of /v1/..."""
        make_client(api_url="https://gw.test/volcano/").locks.get("k")
        assert str(fake_api.requests[0].url) == "https://gw.test/volcano/v1/locks/k"

    @pytest.mark.parametrize(
        ("missing", "variable"),
        [("anon_key", "VOLCANO_ANON_KEY"), ("service_key", "VOLCANO_SERVICE_KEY")],
    )
    def test_missing_key_names_its_variable(
        self, monkeypatch: pytest.MonkeyPatch, missing: str, variable: str
    ) -> None:
        """A key neither passed nor set fails at construction, naming its variable."""
        monkeypatch.delenv(variable, raising=False)
        keys = {"anon_key": ANON_KEY, "service_key": SERVICE_KEY}
        del keys[missing]
        with pytest.raises(volcano.InvalidArgumentError, match=variable):
            volcano.Client(**keys)
        with pytest.raises(volcano.InvalidArgumentError, match=variable):
            volcano.AsyncClient(**keys)

    @pytest.mark.parametrize("bad", ["with space", "new\nline", ""])
    def test_malformed_key_is_refused_without_echoing_it(self, bad: str) -> None:
        """A key that cannot be a header value is refused, and the message does not show it."""
        with pytest.raises(volcano.InvalidArgumentError) as caught:
            volcano.Client(anon_key=ANON_KEY, service_key=bad)
        assert "service_key" in str(caught.value)
        if bad:
            assert bad not in str(caught.value)

    @pytest.mark.parametrize(
        "url", ["ftp://x.test", "not a url", "https://", "https://x.test/?q=1", "::"]
    )
    def test_malformed_api_url_is_refused(self, url: str) -> None:
        """api_url must be an http(s) URL with a host."""
        with pytest.raises(volcano.InvalidArgumentError, match="api_url"):
            volcano.Client(anon_key=ANON_KEY, service_key=SERVICE_KEY, api_url=url)

    def test_api_url_with_credentials_is_refused_without_echoing_them(self) -> None:
        """A password in api_url is refused and not repeated in the message."""
        with pytest.raises(volcano.InvalidArgumentError) as caught:
            volcano.Client(
                anon_key=ANON_KEY, service_key=SERVICE_KEY, api_url="https://u:hunter2@x.test"
            )
        assert "hunter2" not in str(caught.value)

    def test_timeout_is_sent_with_every_request(self, make_client, fake_api: FakeApi) -> None:
        """The client's timeout (seconds or timedelta) bounds each request."""
        make_client(timeout=timedelta(seconds=2.5)).locks.get("k")
        assert fake_api.requests[0].extensions["timeout"]["read"] == 2.5
        assert make_client(timeout=3).timeout == 3.0

    def test_default_timeout_is_ten_seconds(self, make_client, fake_api: FakeApi) -> None:
        """Without timeout=, each request may take 10 seconds."""
        make_client().locks.get("k")
        assert fake_api.requests[0].extensions["timeout"] == {
            "connect": 10.0,
            "read": 10.0,
            "write": 10.0,
            "pool": 10.0,
        }

    @pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "10", 7200])
    def test_bad_timeout_is_refused(self, bad: object) -> None:
        """timeout must be a finite number of seconds, above 0 and at most an hour."""
        with pytest.raises(volcano.InvalidArgumentError, match="timeout"):
            volcano.Client(anon_key=ANON_KEY, service_key=SERVICE_KEY, timeout=bad)  # type: ignore[arg-type]

    def test_wrong_kind_of_http_client_is_refused(self) -> None:
        """Client takes an httpx.Client and AsyncClient an httpx.AsyncClient, not the other."""
        with pytest.raises(volcano.InvalidArgumentError, match=r"httpx\.Client"):
            volcano.Client(
                anon_key=ANON_KEY,
                service_key=SERVICE_KEY,
                http_client=httpx.AsyncClient(),  # type: ignore[arg-type]
            )
        sync_http = httpx.Client()
        with pytest.raises(volcano.InvalidArgumentError, match=r"httpx\.AsyncClient"):
            volcano.AsyncClient(
                anon_key=ANON_KEY,
                service_key=SERVICE_KEY,
                http_client=sync_http,  # type: ignore[arg-type]
            )
        sync_http.close()

    def test_injected_http_client_stays_open(self, fake_api: FakeApi) -> None:
        """close() leaves an injected httpx.Client open: its owner closes it."""
        http = httpx.Client(transport=httpx.MockTransport(fake_api))
        volcano.Client(anon_key=ANON_KEY, service_key=SERVICE_KEY, http_client=http).close()
        assert not http.is_closed
        http.close()

    def test_own_http_client_is_closed(self) -> None:
        """close() closes the httpx.Client the SDK made."""
        client = volcano.Client(anon_key=ANON_KEY, service_key=SERVICE_KEY)
        client.close()
        assert client._http.is_closed
        assert client.closed

    def test_repr_shows_url_and_timeout_only(self, client: volcano.Client) -> None:
        """repr(client) names the URL and timeout, never a key."""
        assert repr(client) == f"Client(api_url={API_URL!r}, timeout=10.0)"


class TestAcquire:
    def test_request_and_lease(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """acquire POSTs {owner_token, ttl_seconds} to .../acquire and returns the lease."""
        lease = sdk.acquire("daily-report", ttl=30, token=TOKEN, request_id=REQUEST_ID)
        (request,) = fake_api.requests
        assert request.method == "POST"
        assert request.url.path == "/v1/locks/daily-report/acquire"
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        assert request.headers["Content-Type"] == "application/json"
        assert json.loads(request.content) == {"owner_token": TOKEN, "ttl_seconds": 30}
        assert lease == volcano.LockLease(
            key="daily-report",
            owner_token=TOKEN,
            fencing_token=7,
            expires_at=EXPIRES,
            ttl_seconds=30.0,
        )

    def test_fresh_token_and_request_id_per_call(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """Without token= and request_id=, every call makes new UUID4s."""
        first = client.locks.acquire("k", ttl=1)
        second = client.locks.acquire("k", ttl=1)
        ids = [r.headers["X-Request-Id"] for r in fake_api.requests]
        tokens = [first.owner_token, second.owner_token]
        assert all(UUID_RE.fullmatch(value) for value in ids + tokens)
        assert len(set(ids)) == 2
        assert len(set(tokens)) == 2

    def test_uuid_objects_are_sent_as_strings(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """uuid.UUID values are accepted for token and request_id and sent as str(u)."""
        token, request_id = uuid.UUID(TOKEN), uuid.UUID(REQUEST_ID)
        lease = client.locks.acquire("k", ttl=1, token=token, request_id=request_id)
        assert fake_api.requests[0].headers["X-Request-Id"] == str(request_id)
        assert json.loads(fake_api.requests[0].content)["owner_token"] == str(token)
        assert lease.owner_token == str(token)

    def test_ttl_as_timedelta_and_float(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """ttl takes a timedelta or float seconds and sends the number of seconds."""
        client.locks.acquire("k", ttl=timedelta(minutes=1, milliseconds=500))
        client.locks.acquire("k", ttl=0.25)
        sent = [json.loads(r.content)["ttl_seconds"] for r in fake_api.requests]
        assert sent == [60.5, 0.25]

    def test_key_is_escaped_in_the_path(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Keys with ':' and '.' reach the server intact."""
        client.locks.acquire("jobs:daily.report_1-a", ttl=1)
        assert fake_api.requests[0].url.path == "/v1/locks/jobs:daily.report_1-a/acquire"

    def test_lock_held(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """409 lock_held raises LockHeldError with Retry-After as seconds."""
        fake_api.then(error(409, "lock_held", message="k is held", retry_after="12"))
        with pytest.raises(volcano.LockHeldError) as caught:
            client.locks.acquire("k", ttl=1)
        assert isinstance(caught.value, volcano.ConflictError)
        assert caught.value.retry_after == 12.0
        assert caught.value.message == "k is held"


class TestLimit:
    def test_a_limit_above_one_is_sent(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """acquire(limit=4) sends `limit: 4`; the lease it returns is an ordinary LockLease."""
        lease = sdk.acquire("slots", ttl=30, limit=4, token=TOKEN)
        assert json.loads(fake_api.requests[0].content) == {
            "owner_token": TOKEN,
            "ttl_seconds": 30,
            "limit": 4,
        }
        assert lease.fencing_token == 7

    def test_limit_one_sends_the_plain_lock_request(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """limit=1 (a lock, the server's default) is not sent: the request a lock always sent."""
        client.locks.acquire("k", ttl=1, limit=1, token=TOKEN)
        assert json.loads(fake_api.requests[0].content) == {"owner_token": TOKEN, "ttl_seconds": 1}

    def test_with_lock_acquires_with_its_limit(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """with_lock(limit=3) acquires one of three slots."""
        with sdk.lock("slots", ttl=30, limit=3):
            pass
        assert json.loads(fake_api.of("acquire")[0].content)["limit"] == 3

    def test_every_request_of_a_long_wait_keeps_the_limit(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A chained wait asks each time for the same limit (and the same owner token)."""
        fake_api.then(error(409, "lock_held"))
        client.locks.acquire("slots", ttl=1, limit=2, wait=120, token=TOKEN)
        bodies = [json.loads(r.content) for r in fake_api.of("acquire")]
        assert [(b["limit"], b["owner_token"]) for b in bodies] == [(2, TOKEN), (2, TOKEN)]

    def test_limit_mismatch(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """409 limit_mismatch raises LimitMismatchError carrying the key's own limit; no retry."""
        fake_api.then(error(409, "limit_mismatch", message="slots is in use with limit 4", limit=4))
        with pytest.raises(volcano.LimitMismatchError) as caught:
            sdk.acquire("slots", ttl=30, limit=2)
        assert isinstance(caught.value, volcano.ConflictError)
        assert caught.value.limit == 4
        assert "limit 4" in str(caught.value)
        assert len(fake_api.requests) == 1


class TestCheck:
    def test_request_and_live(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """check GETs /v1/locks/{key}/leases/{token} and answers the body's `live`."""
        assert sdk.check("daily-report", 7, request_id=REQUEST_ID) is True
        (request,) = fake_api.requests
        assert request.method == "GET"
        assert request.url.path == "/v1/locks/daily-report/leases/7"
        assert request.content == b""
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID

    def test_not_live(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """A token that is not live is False, not an error."""
        assert client.locks.check("daily-report", 6) is False

    @pytest.mark.parametrize(
        "answer",
        [
            {"key": "other", "fencing_token": 7, "live": True, "expires_at": None},
            {"key": "k", "fencing_token": 8, "live": True, "expires_at": None},
            {"key": "k", "fencing_token": 7, "live": "yes", "expires_at": None},
            {"key": "k", "fencing_token": 7},
        ],
    )
    def test_an_answer_about_something_else_breaks_the_spec(
        self, client: volcano.Client, fake_api: FakeApi, answer: dict[str, object]
    ) -> None:
        """An answer for another key or token, or without a boolean `live`, is never read as
        live: UnexpectedResponseError."""
        fake_api.then(body(200, answer))
        with pytest.raises(volcano.UnexpectedResponseError):
            client.locks.check("k", 7)

    @pytest.mark.parametrize("token", [0, -1, 2**53, True, 1.0, "7", None])
    def test_a_bad_token_is_refused_before_sending(
        self, client: volcano.Client, fake_api: FakeApi, token: object
    ) -> None:
        """The fencing token is a whole number from 1 to 2^53-1; the error names it."""
        with pytest.raises(volcano.InvalidArgumentError, match="fencing_token"):
            client.locks.check("k", token)  # type: ignore[arg-type]
        assert fake_api.requests == []

    def test_not_retried(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """A 503 to a check is raised at once: only acquisitions retry."""
        fake_api.then(error(503, "unavailable"))
        with pytest.raises(volcano.ServiceUnavailableError):
            client.locks.check("k", 7)
        assert len(fake_api.requests) == 1


class TestRenew:
    def test_request_and_new_lease(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """renew POSTs {owner_token, fencing_token, ttl_seconds}; it returns a new lease."""
        old = lease_for()
        new = sdk.renew("daily-report", old, ttl=60, request_id=REQUEST_ID)
        (request,) = fake_api.requests
        assert request.method == "POST"
        assert request.url.path == "/v1/locks/daily-report/renew"
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        assert json.loads(request.content) == {
            "owner_token": TOKEN,
            "fencing_token": 7,
            "ttl_seconds": 60,
        }
        assert new is not old
        assert new.ttl_seconds == 60.0
        assert new.expires_at > old.expires_at
        assert old == lease_for()  # unchanged

    def test_ttl_defaults_to_the_leases(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Without ttl=, renew asks for the lease's own ttl_seconds."""
        client.locks.renew("daily-report", lease_for(ttl=12.5))
        assert json.loads(fake_api.requests[0].content)["ttl_seconds"] == 12.5

    def test_lease_of_another_key_is_refused(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """renew refuses a lease acquired for a different key, sending nothing."""
        with pytest.raises(volcano.InvalidArgumentError, match="'other'"):
            client.locks.renew("other", lease_for())
        assert fake_api.requests == []

    def test_lease_not_held(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """409 lease_not_held raises LeaseNotHeldError."""
        fake_api.then(error(409, "lease_not_held"))
        with pytest.raises(volcano.LeaseNotHeldError):
            client.locks.renew("daily-report", lease_for())

    def test_changed_fencing_token_is_a_broken_answer(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A renewal that comes back with another fencing token breaks the contract."""
        fake_api.fencing_token = 8
        with pytest.raises(volcano.UnexpectedResponseError, match="fencing_token"):
            client.locks.renew("daily-report", lease_for())


class TestRelease:
    def test_request(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """release POSTs {owner_token, fencing_token} to .../release and returns None on 204."""
        result = sdk.release("daily-report", lease_for(), request_id=REQUEST_ID)
        (request,) = fake_api.requests
        assert result is None
        assert request.method == "POST"
        assert request.url.path == "/v1/locks/daily-report/release"
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        assert json.loads(request.content) == {"owner_token": TOKEN, "fencing_token": 7}

    def test_lease_of_another_key_is_refused(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """release refuses a lease acquired for a different key, sending nothing."""
        with pytest.raises(volcano.InvalidArgumentError):
            client.locks.release("other", lease_for())
        assert fake_api.requests == []

    def test_non_lease_is_refused(self, client: volcano.Client) -> None:
        """release wants a LockLease, not something shaped like one."""
        with pytest.raises(volcano.InvalidArgumentError, match="LockLease"):
            client.locks.release("k", {"key": "k"})  # type: ignore[arg-type]


class TestGet:
    def test_request_and_state(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """get GETs /v1/locks/{key} without a body and returns a LockState."""
        state = sdk.get("daily-report", request_id=REQUEST_ID)
        (request,) = fake_api.requests
        assert request.method == "GET"
        assert request.url.path == "/v1/locks/daily-report"
        assert request.content == b""
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        assert state == volcano.LockState(
            key="daily-report",
            held=True,
            expires_at=EXPIRES,
            fencing_token=7,
            holders=(volcano.LockHolder(fencing_token=7, expires_at=EXPIRES),),
            version=13,
        )

    def test_free_key(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """A free key has expires_at None and may have no fencing token yet."""
        fake_api.then(body(200, {"key": "k", **FREE}))
        assert client.locks.get("k") == volcano.LockState(
            key="k", held=False, expires_at=None, fencing_token=None
        )


class TestForceRelease:
    def test_request_and_result(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """force_release DELETEs /v1/locks/{key} and returns what it removed."""
        result = sdk.force_release("daily-report", request_id=REQUEST_ID)
        (request,) = fake_api.requests
        assert request.method == "DELETE"
        assert request.url.path == "/v1/locks/daily-report"
        assert_credentials(request)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        assert result == volcano.ForceReleaseResult(
            key="daily-report", released=True, fencing_token=7, released_count=1
        )

    def test_nothing_released(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Removing nothing is a result, not an error."""
        fake_api.then(
            body(200, {"key": "k", "released": False, "fencing_token": None, "released_count": 0})
        )
        assert client.locks.force_release("k") == volcano.ForceReleaseResult(
            key="k", released=False, fencing_token=None
        )


class TestClosedClient:
    def test_every_method_refuses(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A closed client raises ClientClosedError and sends nothing."""
        sdk.close_client()
        sdk.close_client()  # idempotent
        calls = [
            lambda: sdk.acquire("k", ttl=1),
            lambda: sdk.renew("daily-report", lease_for()),
            lambda: sdk.release("daily-report", lease_for()),
            lambda: sdk.get("k"),
            lambda: sdk.force_release("k"),
            lambda: sdk.check("k", 1),
            lambda: sdk.enter(sdk.with_lock("k", ttl=1)),
            lambda: sdk.enter(sdk.client),
        ]
        for call in calls:
            with pytest.raises(volcano.ClientClosedError):
                call()
        assert fake_api.requests == []
        assert "closed" in repr(sdk.client)

    def test_context_manager_closes(self, make_client) -> None:
        """Leaving `with Client(...)` closes it."""
        with make_client() as client:
            assert not client.closed
        assert client.closed


class TestAsyncClient:
    @pytest.mark.anyio
    async def test_context_manager_closes_own_http_client(self) -> None:
        """Leaving `async with AsyncClient(...)` closes the httpx.AsyncClient it made."""
        async with volcano.AsyncClient(anon_key=ANON_KEY, service_key=SERVICE_KEY) as client:
            assert repr(client) == "AsyncClient(api_url='https://api.volcano.dev', timeout=10.0)"
        assert client.closed
        assert client._http.is_closed
