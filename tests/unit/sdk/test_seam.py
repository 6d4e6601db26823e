"""What the seam (volcano/_seam/) relies on in the generated client and in httpx, pinned.

The seam hands each generated `*_detailed` function a generated `Client` whose httpx client it
set with `set_httpx_client` / `set_async_httpx_client` (an `httpx.Client` subclass whose
`request()` builds and sends the request itself), and reads back `parsed` (status and headers it
takes from the httpx response it kept). If a regeneration changes any of that (names,
signatures, what the functions pass to `request()`, what a body parses to, what a refused body
raises), or httpx stops carrying a request's own timeout, a test here fails, naming it, before a
user's request would.
"""

from __future__ import annotations

import inspect
import json
from datetime import datetime
from types import ModuleType
from typing import Any

import httpx
import pytest
from _volcano_api import Client, models
from _volcano_api.api.locks import (
    acquire_lock,
    force_release_lock,
    get_lock,
    release_lock,
    renew_lock,
)
from _volcano_api.types import Response

from tests.unit.sdk.support import REQUEST_ID, TOKEN
from volcano import _config
from volcano._seam import PARSE_ERRORS
from volcano._seam._sending import _OPTIONS, _Exchange, _Route

BASE = "https://volcano.test/prefix"
LEASE = {
    "key": "k",
    "owner_token": TOKEN,
    "fencing_token": 7,
    "expires_at": "2026-11-29T21:15:30.25Z",
    "ttl_seconds": 30,
}
ERROR = {"error": {"code": "lock_held", "message": "held", "request_id": REQUEST_ID}}

# module: (method, path after BASE, body, success status, success body, parsed type)
OPERATIONS: dict[ModuleType, tuple[str, str, Any, int, Any, type | None]] = {
    acquire_lock: (
        "POST",
        "/v1/locks/k/acquire",
        models.AcquireRequest(owner_token=TOKEN, ttl_seconds=30),
        200,
        LEASE,
        models.LockLease,
    ),
    renew_lock: (
        "POST",
        "/v1/locks/k/renew",
        models.RenewRequest(owner_token=TOKEN, fencing_token=7, ttl_seconds=30),
        200,
        LEASE,
        models.LockLease,
    ),
    release_lock: (
        "POST",
        "/v1/locks/k/release",
        models.ReleaseRequest(owner_token=TOKEN, fencing_token=7),
        204,
        None,
        None,
    ),
    get_lock: (
        "GET",
        "/v1/locks/k",
        None,
        200,
        {
            "key": "k",
            "held": True,
            "expires_at": LEASE["expires_at"],
            "fencing_token": 7,
            "limit": 1,
            "holders": [
                {
                    "fencing_token": 7,
                    "expires_at": LEASE["expires_at"],
                    "label": None,
                    "mode": "exclusive",
                }
            ],
            "waiters": 0,
            "version": 13,
        },
        models.LockState,
    ),
    force_release_lock: (
        "DELETE",
        "/v1/locks/k",
        None,
        200,
        {"key": "k", "released": True, "fencing_token": 7, "released_count": 1},
        models.ForceReleaseResult,
    ),
}
IDS = [module.__name__.rsplit(".", 1)[-1] for module in OPERATIONS]
# The query parameters an operation takes by keyword, before x_request_id.
QUERY: dict[ModuleType, list[str]] = {get_lock: ["after_version", "wait_seconds"]}


class Recorder:
    """An httpx MockTransport handler that records the request and answers as told."""

    def __init__(self, status: int, content: bytes) -> None:
        self.status = status
        self.content = content
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, content=self.content)


def generated(recorder: Recorder) -> Client:
    """A generated client around an httpx client of ours, the way the seam makes one."""
    http = httpx.Client(base_url=BASE, transport=httpx.MockTransport(recorder))
    return Client(base_url=BASE, raise_on_unexpected_status=False).set_httpx_client(http)


def call(module: ModuleType, client: Client) -> Response[Any]:
    _, _, body, *_ = OPERATIONS[module]
    extra = {} if body is None else {"body": body}
    response: Response[Any] = module.sync_detailed(
        "k", client=client, x_request_id=REQUEST_ID, **extra
    )
    return response


def encoded(payload: Any) -> bytes:
    return b"" if payload is None else json.dumps(payload).encode()


class Asking(httpx.Client):
    """An httpx client that records what a generated function passes to `request()`."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(base_url=BASE, transport=httpx.MockTransport(recorder))
        self.asked: list[dict[str, Any]] = []

    def request(self, method: str, url: httpx.URL | str, **options: Any) -> httpx.Response:
        self.asked.append({"method": method, "url": url, **options})
        return super().request(method, url, **options)


class TestClient:
    def test_takes_our_httpx_clients(self) -> None:
        """Client(base_url=, raise_on_unexpected_status=) takes our httpx clients through
        set_httpx_client / set_async_httpx_client, returns itself, and hands them back."""
        sync, asynchronous = httpx.Client(), httpx.AsyncClient()
        client = Client(base_url=BASE, raise_on_unexpected_status=False)
        assert client.set_httpx_client(sync) is client
        assert client.set_async_httpx_client(asynchronous) is client
        assert client.get_httpx_client() is sync
        assert client.get_async_httpx_client() is asynchronous
        assert client.raise_on_unexpected_status is False
        sync.close()

    def test_the_seams_request_refuses_what_it_would_drop(self) -> None:
        """The seam's `request()` (what the generated functions call) raises TypeError for any
        option but json, params and headers, rather than send a request without it."""
        settings = _config.resolve(anon_key="a", service_key="s", api_url=BASE, timeout=5)
        with httpx.Client(transport=httpx.MockTransport(Recorder(200, b"{}"))) as http:
            exchange = _Exchange(_Route(http, settings), http, None)
            with pytest.raises(TypeError, match="content"):
                exchange.request("POST", "/v1/locks/k/acquire", content=b"{}")
            assert exchange.request("GET", "/v1/locks/k").status_code == 200


class TestOperations:
    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_signatures(self, module: ModuleType) -> None:
        """sync_detailed and asyncio_detailed take the key, then client, body (if any), query
        parameters (if any) and x_request_id by keyword: the only arguments the seam passes."""
        _, _, body, *_ = OPERATIONS[module]
        body_names = ["body"] if body is not None else []
        expected = ["key", "client", *body_names, *QUERY.get(module, []), "x_request_id"]
        for function in (module.sync_detailed, module.asyncio_detailed):
            parameters = inspect.signature(function).parameters
            assert list(parameters) == expected
            assert parameters["key"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
            assert all(
                parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in expected[1:]
            )
        assert inspect.iscoroutinefunction(module.asyncio_detailed)

    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_a_request_goes_through_our_httpx_client(self, module: ModuleType) -> None:
        """The request is built by the httpx client we set (base URL path kept), with the
        request id spelled as given and the body's to_dict() as JSON; the answer's body comes
        back as the parsed model (the seam reads status and headers from the response itself)."""
        method, path, body, status, payload, parsed_type = OPERATIONS[module]
        recorder = Recorder(status, encoded(payload))
        response = call(module, generated(recorder))
        (request,) = recorder.requests
        assert (request.method, str(request.url)) == (method, BASE + path)
        assert request.headers["X-Request-Id"] == REQUEST_ID
        if body is not None:
            assert request.headers["Content-Type"] == "application/json"
            assert json.loads(request.content) == body.to_dict()
        assert response.status_code == status
        if parsed_type is None:
            assert response.parsed is None
        else:
            assert isinstance(response.parsed, parsed_type)

    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_request_is_asked_for_by_method_url_json_params_headers(
        self, module: ModuleType
    ) -> None:
        """The functions call `request()` of the httpx client we set once, with a path under
        the base URL and nothing but json, params and headers besides: all the seam's
        `request()` takes (it refuses anything more, so nothing is dropped unseen)."""
        method, path, _, status, payload, _ = OPERATIONS[module]
        http = Asking(Recorder(status, encoded(payload)))
        call(module, Client(base_url=BASE).set_httpx_client(http))
        (asked,) = http.asked
        assert (asked.pop("method").upper(), asked.pop("url")) == (method, path)
        assert set(asked) <= _OPTIONS
        assert asked["headers"]["X-Request-Id"] == REQUEST_ID
        http.close()

    @pytest.mark.anyio
    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    async def test_the_asyncio_twin_goes_through_our_httpx_client(self, module: ModuleType) -> None:
        """asyncio_detailed sends through the async httpx client we set."""
        method, path, body, status, payload, _ = OPERATIONS[module]
        recorder = Recorder(status, encoded(payload))
        http = httpx.AsyncClient(base_url=BASE, transport=httpx.MockTransport(recorder))
        client = Client(base_url=BASE).set_async_httpx_client(http)
        extra = {} if body is None else {"body": body}
        response = await module.asyncio_detailed(
            "k", client=client, x_request_id=REQUEST_ID, **extra
        )
        assert response.status_code == status
        assert [(r.method, str(r.url)) for r in recorder.requests] == [(method, BASE + path)]
        await http.aclose()

    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_error_bodies_of_listed_statuses_parse_to_error(self, module: ModuleType) -> None:
        """A listed error status with a Volcano error body parses to models.Error, the one
        reading of that body the seam uses."""
        for status in (400, 401, 403, 404, 405, 408, 422, 429, 431, 500, 503):
            response = call(module, generated(Recorder(status, encoded(ERROR))))
            assert isinstance(response.parsed, models.Error), status
            detail = response.parsed.error
            assert (detail.code, detail.message, detail.request_id) == (
                "lock_held",
                "held",
                REQUEST_ID,
            )

    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_other_statuses_parse_to_none(self, module: ModuleType) -> None:
        """A status the spec does not list (418, a proxy's 502 or 504) is parsed to None, never
        raised: the seam reads those bodies itself."""
        for status in (418, 502, 504):
            assert call(module, generated(Recorder(status, encoded(ERROR)))).parsed is None

    @pytest.mark.parametrize(
        "content",
        [b"<html>busy</html>", b"{}", b"[]", b'{"error": 1}', b"\xff\xfe", b""],
        ids=["html", "empty-object", "array", "wrong-shape", "not-utf8", "no-body"],
    )
    @pytest.mark.parametrize("module", OPERATIONS, ids=IDS)
    def test_refused_bodies_raise_only_what_the_seam_catches(
        self, module: ModuleType, content: bytes
    ) -> None:
        """A body the generated parse cannot read, on a listed status, raises one of
        PARSE_ERRORS (which the seam catches once a response has arrived), nothing else."""
        _, _, _, status, payload, _ = OPERATIONS[module]
        for answered in (503, status) if payload is not None else (503,):
            with pytest.raises(PARSE_ERRORS):
                call(module, generated(Recorder(answered, content)))

    def test_timestamps_are_aware_datetimes(self) -> None:
        """expires_at parses to a timezone-aware datetime ("Z" kept as UTC); the SDK's models
        check the offset, and refuse a naive one."""
        parsed = models.LockLease.from_dict(LEASE).expires_at
        assert isinstance(parsed, datetime)
        assert parsed.utcoffset() is not None
        naive = models.LockLease.from_dict({**LEASE, "expires_at": "2026-11-29T21:15:30"})
        assert naive.expires_at.utcoffset() is None


class TestHttpx:
    """What the seam relies on in httpx: a request carries its own timeout."""

    def test_a_timeout_is_four_phases_in_seconds(self) -> None:
        """httpx.Timeout(s).as_dict() is the `timeout` extension: connect, read, write, pool."""
        assert httpx.Timeout(2.5).as_dict() == {
            "connect": 2.5,
            "read": 2.5,
            "write": 2.5,
            "pool": 2.5,
        }

    def test_send_keeps_a_requests_own_timeout(self) -> None:
        """`Client.send` keeps the timeout a request carries in its extensions, as the
        transport gets it (httpx's `_set_timeout` fills in only a missing one), so a caller's
        client sends each request with the seam's timeout, not its own."""
        seen: list[object] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request.extensions["timeout"])
            return httpx.Response(204)

        with httpx.Client(transport=httpx.MockTransport(record), timeout=30) as http:
            own = {"timeout": httpx.Timeout(1.5).as_dict()}
            http.send(httpx.Request("GET", BASE, extensions=own))
            http.send(httpx.Request("GET", BASE))
        assert seen == [httpx.Timeout(1.5).as_dict(), httpx.Timeout(30).as_dict()]


class TestBatchRenewal:
    """renew_leases, the one operation without a key in its path."""

    def test_signature(self) -> None:
        """Its functions take client, body and x_request_id by keyword: what the seam passes."""
        from _volcano_api.api.locks import renew_leases

        for function in (renew_leases.sync_detailed, renew_leases.asyncio_detailed):
            parameters = inspect.signature(function).parameters
            assert list(parameters) == ["client", "body", "x_request_id"]
            assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())

    def test_results_parse_in_order_as_renewed_or_refused(self) -> None:
        """The request goes to /v1/leases/renew with the entries as JSON; a result with a lease
        parses as LeaseRenewed and one with an error as LeaseRefused, in the order sent."""
        from _volcano_api.api.locks import renew_leases

        refused = {"key": "k", "status": 409, "error": ERROR["error"]}
        recorder = Recorder(200, encoded({"results": [{"key": "k", "lease": LEASE}, refused]}))
        entry = models.LeaseRenewal(key="k", owner_token=TOKEN, fencing_token=7, ttl_seconds=30)
        body = models.RenewLeasesRequest(leases=[entry, entry])
        response = renew_leases.sync_detailed(
            client=generated(recorder), body=body, x_request_id=REQUEST_ID
        )
        (request,) = recorder.requests
        assert (request.method, str(request.url)) == ("POST", BASE + "/v1/leases/renew")
        assert json.loads(request.content) == body.to_dict()
        first, second = response.parsed.results
        assert isinstance(first, models.LeaseRenewed)
        assert isinstance(first.lease, models.LockLease)
        assert isinstance(second, models.LeaseRefused)
        assert (second.status, second.error.code) == (409, "lock_held")
