"""The renewal engine on the wire: renewals due together go out as one `POST /v1/leases/renew`,
each lease's result judged by its own guard, and an older server gets one renewal per request.

Guards are acquired at t=100 (the FakeClock stands still while they enter) with ttl=30: their
renewals are all due at 110, one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import volcano
from tests.unit.sdk.support import FakeApi, FakeClock, echo, error

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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


@contextlib.contextmanager
def three_guards(client: volcano.Client) -> Iterator[list[volcano.LockGuard]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(client.locks.with_lock(key, ttl=30)) for key in "abc"]


class TestOneRequestPerBatch:
    def test_leases_due_together_go_out_in_one_request(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Three leases due at 110: one request carries all three, each with its own tokens
        and ttl, and each guard takes its own renewed lease from the answer."""
        with three_guards(client) as guards:
            acquired = [guard.lease for guard in guards]
            clock.advance(10)
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
            for guard, before in zip(guards, acquired, strict=True):
                assert guard.lease.expires_at > before.expires_at
                assert guard.lease.owner_token == before.owner_token
            clock.advance(10)
            assert renewal_requests(fake_api) == [BATCH, BATCH]

    def test_a_lone_renewal_is_a_plain_renew(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """One lease due on its own goes out on its key's renew path, as it always did."""
        with client.locks.with_lock("k", ttl=30):
            clock.advance(10)
        assert renewal_requests(fake_api) == ["/v1/locks/k/renew"]

    def test_the_deadline_counts_from_the_batchs_send(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A batch sent at 110 whose answer took 5 s: each lease is lost at 140, not 145."""

        def slow(request: httpx.Request) -> httpx.Response:
            clock.now += 5
            return fake_api.default(request)

        with three_guards(client) as guards:
            fake_api.then(slow, *[error(503, "unavailable")] * 200)
            clock.advance(10)
            clock.advance(24.9)  # t=139.9
            assert not any(guard.lost for guard in guards)
            clock.advance(0.1)
            assert all(guard.lost for guard in guards)


class TestEachLeaseItsOwn:
    def test_a_lease_refused_inside_a_batch_loses_only_its_guard(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """The second result is 409 lease_not_held: that guard is lost with it; the others are
        renewed and go on being renewed."""
        with three_guards(client) as (first, second, third):
            fake_api.then(answered(fake_api, refused(1)))
            clock.advance(10)
            assert second.lost
            assert isinstance(second.lost_reason, volcano.LeaseNotHeldError)
            assert not first.lost
            assert not third.lost
            clock.advance(10)
            (_, batch) = [r for r in fake_api.requests if r.url.path == BATCH]
            assert [entry["key"] for entry in json.loads(batch.content)["leases"]] == ["a", "c"]
        released = sorted(r.url.path for r in fake_api.of("release"))
        assert released == ["/v1/locks/a/release", "/v1/locks/c/release"]

    def test_a_result_that_breaks_the_spec_is_retried_for_its_lease(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A result naming another fencing token: that lease alone is retried shortly (as a
        single renew's unexpected answer is), the others are renewed."""

        def other_token(index: int, result: dict[str, Any]) -> dict[str, Any]:
            if index == 2:
                result["lease"]["fencing_token"] = 99
            return result

        with three_guards(client) as guards:
            fake_api.then(answered(fake_api, other_token))
            clock.advance(10)
            assert not any(guard.lost for guard in guards)
            clock.advance(0.1)
            assert renewal_requests(fake_api) == [BATCH, "/v1/locks/c/renew"]

    def test_a_whole_batch_failing_retries_every_lease(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A 503 for the batch: each lease is retried after its backoff (together again)."""
        with three_guards(client) as guards:
            fake_api.then(error(503, "unavailable"))
            clock.advance(10)
            clock.advance(0.1)
            assert renewal_requests(fake_api) == [BATCH, BATCH]
            assert not any(guard.lost for guard in guards)


class TestOlderServers:
    @pytest.mark.parametrize("status", [404, 405, 413])
    def test_without_batches_each_lease_goes_alone_from_then_on(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock, status: int
    ) -> None:
        """A server that answers the batch 404 (or 405, or 413) gets the same leases at once as
        plain renews, and every renewal after that too; no lease is lost."""
        with three_guards(client) as guards:
            fake_api.then(error(status))
            clock.advance(10)
            clock.advance(10)
            singles = [f"/v1/locks/{key}/renew" for key in "abc"]
            sent = renewal_requests(fake_api)
            assert sent[0] == BATCH
            assert (sorted(sent[1:4]), sorted(sent[4:])) == (singles, singles)
            assert not any(guard.lost for guard in guards)


class Arrival:
    """A responder that notes (on the event loop) that its request arrived, then answers."""

    def __init__(self, respond: Callable[[httpx.Request], httpx.Response]) -> None:
        self.respond = respond
        self.arrived = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived.set()
        return self.respond(request)


@pytest.mark.anyio
class TestAsync:
    async def test_leases_due_together_go_out_in_one_request(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi
    ) -> None:
        """The async engine batches too: three leases due at 110 in one request."""
        async with contextlib.AsyncExitStack() as stack:
            for key in "abc":
                await stack.enter_async_context(aclient.locks.with_lock(key, ttl=30))
            batch = Arrival(fake_api.default)
            fake_api.then(batch)
            await batch.arrived.wait()
            assert renewal_requests(fake_api) == [BATCH]
            assert fake_api.times_of("renew") == [110.0, 110.0, 110.0]

    async def test_a_lease_refused_inside_a_batch_loses_only_its_guard(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi
    ) -> None:
        """One refused result loses its guard only, on the event loop too."""
        async with contextlib.AsyncExitStack() as stack:
            guards = [
                await stack.enter_async_context(aclient.locks.with_lock(key, ttl=30))
                for key in "ab"
            ]
            fake_api.then(answered(fake_api, refused(0)))
            assert await guards[0].wait_lost() is True
            assert isinstance(guards[0].lost_reason, volcano.LeaseNotHeldError)
            assert not guards[1].lost

    async def test_an_older_server_gets_plain_renews(
        self, aclient: volcano.AsyncClient, fake_api: FakeApi
    ) -> None:
        """404 for the batch: the same leases go out at once as plain renews."""
        async with contextlib.AsyncExitStack() as stack:
            guards = [
                await stack.enter_async_context(aclient.locks.with_lock(key, ttl=30))
                for key in "ab"
            ]
            singles = [Arrival(fake_api.default), Arrival(fake_api.default)]
            fake_api.then(error(404), *singles)
            for single in singles:
                await single.arrived.wait()
            assert renewal_requests(fake_api)[0] == BATCH
            assert sorted(renewal_requests(fake_api)[1:]) == [
                "/v1/locks/a/renew",
                "/v1/locks/b/renew",
            ]
            assert not any(guard.lost for guard in guards)
