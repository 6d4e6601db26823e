"""The renewal engine on the wire: renewals due together go out as one `POST /v1/leases/renew`,
each lease's result judged by its own guard, and an older server gets one renewal per request.

Every test runs with both clients (the `guards` fixture, tests/unit/sdk/support.py). Guards are
acquired at t=100 (the FakeClock stands still while they enter) with ttl=30: their renewals are
all due at 110, one batch.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import volcano
from tests.unit.sdk.support import FakeApi, FakeClock, Guards, echo, error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.anyio

BATCH = "/v1/leases/renew"


def renewal_requests(fake_api: FakeApi) -> list[str]:
    """Each renewal request's path (a batch's, or a single renew's)."""
    return [r.url.path for r in fake_api.requests if r.url.path.endswith("/renew")]


def answered(fake_api: FakeApi, change: Callable[[int, dict[str, Any]], dict[str, Any]]) -> Any:
    """A responder that answers a batch as the default would, each result passed through
    `change(index, result)`."""

    def respond(request: httpx.Request) -> httpx.Response:
        results = json.loads(fake_api.default(request).content)["results"]
        changed = [change(index, result) for index, result in enumerate(results)]
        return httpx.Response(200, json={"results": changed}, headers=echo(request))

    return respond


def refused(index: int) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    def change(at: int, result: dict[str, Any]) -> dict[str, Any]:
        if at != index:
            return result
        detail = {"code": "lease_not_held", "message": "taken over", "request_id": "r"}
        return {"key": result["key"], "status": 409, "error": detail}

    return change


@contextlib.asynccontextmanager
async def three_guards(guards: Guards) -> AsyncIterator[list[Any]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(guards.lock(key, ttl=30)) for key in "abc"]


class TestOneRequestPerBatch:
    async def test_leases_due_together_go_out_in_one_request(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """Three leases due at 110: one request carries all three, each with its own tokens
        and ttl, and each guard takes its own renewed lease from the answer."""
        async with three_guards(guards) as held:
            acquired = [guard.lease for guard in held]
            await guards.advance(10)
            assert renewal_requests(fake_api) == [BATCH]
            (batch,) = [r for r in fake_api.requests if r.url.path == BATCH]
            assert json.loads(batch.content) == {
                "leases": [
                    {
                        "key": lease.key,
                        "owner_token": lease.owner_token,
                        "fencing_token": lease.fencing_token,
                        "ttl_seconds": 30.0,
                    }
                    for lease in acquired
                ]
            }
            for guard, before in zip(held, acquired, strict=True):
                assert guard.lease.expires_at > before.expires_at
                assert guard.lease.owner_token == before.owner_token
            await guards.advance(10)
            assert renewal_requests(fake_api) == [BATCH, BATCH]

    async def test_a_lone_renewal_is_a_plain_renew(self, guards: Guards, fake_api: FakeApi) -> None:
        """One lease due on its own goes out on its key's renew path, as it always did."""
        async with guards.lock("k", ttl=30):
            await guards.advance(10)
        assert renewal_requests(fake_api) == ["/v1/locks/k/renew"]

    async def test_the_deadline_counts_from_the_batchs_send(
        self, guards: Guards, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A batch sent at 110 whose answer took 5 s: each lease is lost at 140, not 145."""

        def slow(request: httpx.Request) -> httpx.Response:
            clock.now += 5
            return fake_api.default(request)

        async with three_guards(guards) as held:
            fake_api.then(slow, *[error(503, "unavailable")] * 200)
            await guards.advance(10)
            await guards.advance(24.9)  # t=139.9
            assert not any(guard.lost for guard in held)
            await guards.advance(0.1)
            assert all(guard.lost for guard in held)


class TestEachLeaseItsOwn:
    async def test_a_lease_refused_inside_a_batch_loses_only_its_guard(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """The second result is 409 lease_not_held: that guard is lost with it; the others are
        renewed and go on being renewed."""
        async with three_guards(guards) as (first, second, third):
            fake_api.then(answered(fake_api, refused(1)))
            await guards.advance(10)
            assert second.lost
            assert isinstance(second.lost_reason, volcano.LeaseNotHeldError)
            assert not first.lost
            assert not third.lost
            await guards.advance(10)
            (_, batch) = [r for r in fake_api.requests if r.url.path == BATCH]
            assert [entry["key"] for entry in json.loads(batch.content)["leases"]] == ["a", "c"]
        released = sorted(r.url.path for r in fake_api.of("release"))
        assert released == ["/v1/locks/a/release", "/v1/locks/c/release"]

    async def test_a_result_that_breaks_the_spec_is_retried_for_its_lease(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """A result naming another fencing token: that lease alone is retried shortly (as a
        single renew's unexpected answer is), the others are renewed."""

        def other_token(index: int, result: dict[str, Any]) -> dict[str, Any]:
            if index == 2:
                result["lease"]["fencing_token"] = 99
            return result

        async with three_guards(guards) as held:
            fake_api.then(answered(fake_api, other_token))
            await guards.advance(10)
            assert not any(guard.lost for guard in held)
            await guards.advance(0.1)
            assert renewal_requests(fake_api) == [BATCH, "/v1/locks/c/renew"]

    async def test_a_whole_batch_failing_retries_every_lease(
        self, guards: Guards, fake_api: FakeApi
    ) -> None:
        """A 503 for the batch: each lease is retried after its backoff (together again)."""
        async with three_guards(guards) as held:
            fake_api.then(error(503, "unavailable"))
            await guards.advance(10)
            await guards.advance(0.1)
            assert renewal_requests(fake_api) == [BATCH, BATCH]
            assert not any(guard.lost for guard in held)


class TestOlderServers:
    @pytest.mark.parametrize("status", [404, 405, 413])
    async def test_without_batches_each_lease_goes_alone_from_then_on(
        self, guards: Guards, fake_api: FakeApi, status: int
    ) -> None:
        """A server that answers the batch 404 (or 405, or 413) gets the same leases at once as
        plain renews, and every renewal after that too; no lease is lost."""
        async with three_guards(guards) as held:
            fake_api.then(error(status))
            await guards.advance(10)
            await guards.advance(10)
            singles = [f"/v1/locks/{key}/renew" for key in "abc"]
            sent = renewal_requests(fake_api)
            assert sent[0] == BATCH
            assert (sorted(sent[1:4]), sorted(sent[4:])) == (singles, singles)
            assert not any(guard.lost for guard in held)
