"""Every method of `AsyncClient.locks` against the real server: the twins of test_locks.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import attrs
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id

from .conftest import Wire

pytestmark = pytest.mark.anyio

TOKEN = "0F8FAD5B-D9CB-469F-A165-70867728950E"
"""An owner token spelled in upper case (tokens may repeat across keys; request ids may not)."""


def server_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


class TestAcquire:
    async def test_fresh_key_gets_fencing_token_one(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """A first lease: fencing token 1, a fresh uuid owner token, the server's expiry."""
        lease = await aclient.locks.acquire(key, ttl=30)
        assert isinstance(lease, volcano.LockLease)
        assert (lease.key, lease.fencing_token, lease.ttl_seconds) == (key, 1, 30)
        assert str(uuid.UUID(lease.owner_token)) == lease.owner_token
        assert lease.expires_at.tzinfo is UTC
        assert server_time(server.state(key)["expires_at"]) == lease.expires_at

    async def test_upper_case_token_and_request_id_are_sent_byte_for_byte(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """Upper-case token and request id reach the server exactly: its replay proves it."""
        request_id = new_id().upper()
        lease = await arecorded.locks.acquire(key, ttl=30, token=TOKEN, request_id=request_id)
        assert lease.owner_token == TOKEN
        (sent,) = wire.of("acquire")
        assert sent.request.headers["X-Request-Id"] == request_id
        assert json.loads(sent.request.content)["owner_token"] == TOKEN
        replay = server.acquire(key, TOKEN, 30, request_id=request_id)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.content == sent.content
        lower = server.acquire(key, TOKEN.lower(), 30, request_id=request_id)
        assert lower.json()["error"]["code"] == "request_id_reused"

    async def test_uuid_objects_are_accepted(
        self, arecorded: volcano.AsyncClient, wire: Wire, key: str
    ) -> None:
        """token= and request_id= take uuid.UUID values, sent as their canonical strings."""
        token, request_id = uuid.uuid4(), uuid.uuid4()
        lease = await arecorded.locks.acquire(key, ttl=30, token=token, request_id=request_id)
        assert lease.owner_token == str(token)
        assert wire.of("acquire")[0].request.headers["X-Request-Id"] == str(request_id)

    async def test_second_owner_gets_lock_held(
        self, arecorded: volcano.AsyncClient, wire: Wire, key: str
    ) -> None:
        """Another owner's acquire raises LockHeldError (a ConflictError) and is not retried."""
        await arecorded.locks.acquire(key, ttl=20)
        with pytest.raises(volcano.LockHeldError) as raised:
            await arecorded.locks.acquire(key, ttl=30)
        error = raised.value
        assert isinstance(error, volcano.ConflictError)
        assert (error.status_code, error.code) == (409, "lock_held")
        assert error.retry_after is not None
        assert 1 <= error.retry_after <= 20
        assert len(wire.of("acquire")) == 2

    async def test_same_owner_reacquire_keeps_the_lease(
        self, aclient: volcano.AsyncClient, key: str
    ) -> None:
        """The holder's own token acquires again: same fencing token, expiry moved out."""
        first = await aclient.locks.acquire(key, ttl=10, token=TOKEN)
        again = await aclient.locks.acquire(key, ttl=60, token=TOKEN)
        assert again.fencing_token == first.fencing_token
        assert again.expires_at > first.expires_at


class TestRenewAndRelease:
    async def test_renew_returns_a_new_lease_and_leaves_the_old(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """renew gives a new lease (same fencing token, later expiry); the old one is unchanged."""
        lease = await aclient.locks.acquire(key, ttl=10)
        before = attrs.asdict(lease)
        renewed = await aclient.locks.renew(key, lease, ttl=60)
        assert attrs.asdict(lease) == before
        assert renewed.fencing_token == lease.fencing_token
        assert renewed.expires_at > lease.expires_at
        assert renewed.ttl_seconds == 60
        assert server_time(server.state(key)["expires_at"]) == renewed.expires_at

    async def test_renew_and_release_of_a_lost_lease(
        self, aclient: volcano.AsyncClient, server: Locks, key: str
    ) -> None:
        """Once the lease is force-released, renew and release raise LeaseNotHeldError."""
        lease = await aclient.locks.acquire(key, ttl=30)
        server.force_release(key)
        with pytest.raises(volcano.LeaseNotHeldError) as raised:
            await aclient.locks.renew(key, lease)
        assert (raised.value.status_code, raised.value.code) == (409, "lease_not_held")
        with pytest.raises(volcano.LeaseNotHeldError):
            await aclient.locks.release(key, lease)

    async def test_release_then_get(self, aclient: volcano.AsyncClient, key: str) -> None:
        """After release, get shows not held, no expiry, and the last fencing token."""
        lease = await aclient.locks.acquire(key, ttl=30)
        assert await aclient.locks.release(key, lease) is None
        state = await aclient.locks.get(key)
        assert (state.held, state.expires_at, state.fencing_token) == (False, None, 1)


class TestGetAndForceRelease:
    async def test_get_never_used_and_held(self, aclient: volcano.AsyncClient, key: str) -> None:
        """get: all None for a fresh key; for a held one, the lease's aware UTC expiry and token."""
        fresh = await aclient.locks.get(key)
        assert (fresh.key, fresh.held, fresh.expires_at, fresh.fencing_token) == (
            key,
            False,
            None,
            None,
        )
        lease = await aclient.locks.acquire(key, ttl=30)
        state = await aclient.locks.get(key)
        assert state.held is True
        assert state.expires_at == lease.expires_at
        assert state.expires_at is not None
        assert state.expires_at.tzinfo is UTC
        assert state.fencing_token == lease.fencing_token

    async def test_force_release_both_cases(self, aclient: volcano.AsyncClient, key: str) -> None:
        """Force release reports what it removed, and nothing (released False) the second time."""
        await aclient.locks.acquire(key, ttl=30)
        result = await aclient.locks.force_release(key)
        assert (result.key, result.released, result.fencing_token) == (key, True, 1)
        again = await aclient.locks.force_release(key)
        assert (again.released, again.fencing_token) == (False, None)
        assert (await aclient.locks.get(key)).fencing_token == 1


class TestErrors:
    async def test_request_id_reused_with_a_different_body(
        self, aclient: volcano.AsyncClient, key: str
    ) -> None:
        """A request id reused for a different acquire raises RequestIdReusedError."""
        request_id = new_id()
        await aclient.locks.acquire(key, ttl=30, token=TOKEN, request_id=request_id)
        with pytest.raises(volcano.RequestIdReusedError) as raised:
            await aclient.locks.acquire(key, ttl=60, token=TOKEN, request_id=request_id)
        assert (raised.value.code, raised.value.request_id) == ("request_id_reused", request_id)

    async def test_wrong_service_key(
        self, make_arecorded: Callable[..., volcano.AsyncClient], wire: Wire, key: str
    ) -> None:
        """An unknown service key: AuthenticationError (401), not retried."""
        client = make_arecorded(service_key="not-a-real-service-key")
        with pytest.raises(volcano.AuthenticationError) as raised:
            await client.locks.acquire(key, ttl=30)
        assert (raised.value.status_code, raised.value.code) == (401, "unauthorized")
        with pytest.raises(volcano.AuthenticationError):
            await client.locks.get(key)
        assert wire.count() == 2

    async def test_anon_key_as_service_key(
        self,
        make_arecorded: Callable[..., volcano.AsyncClient],
        live_server: LiveServer,
        wire: Wire,
        key: str,
    ) -> None:
        """The anon key used as the service credential: PermissionDeniedError (403)."""
        client = make_arecorded(service_key=live_server.project.anon_key)
        with pytest.raises(volcano.PermissionDeniedError) as raised:
            await client.locks.acquire(key, ttl=30)
        assert (raised.value.status_code, raised.value.code) == (403, "forbidden")
        assert wire.count() == 1


class TestValidation:
    async def test_bad_arguments_are_refused_before_sending(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """Bad key, ttl, token or request id fail naming the argument; nothing is sent."""
        lease = volcano.LockLease(
            key=key,
            owner_token=TOKEN,
            fencing_token=1,
            expires_at=datetime(2030, 1, 1, tzinfo=UTC),
            ttl_seconds=30,
        )
        cases: list[tuple[Callable[[], Awaitable[object]], str]] = [
            (lambda: arecorded.locks.acquire("bad key", ttl=30), "'bad key'"),
            (lambda: arecorded.locks.get("-x"), "'-x'"),
            (lambda: arecorded.locks.force_release("x\n"), "'x\\n'"),
            (lambda: arecorded.locks.acquire(key, ttl=0), "ttl"),
            (lambda: arecorded.locks.acquire(key, ttl=86401), "86401"),
            (lambda: arecorded.locks.renew(key, lease, ttl=-1), "-1"),
            (lambda: arecorded.locks.acquire(key, ttl=30, token="nope"), "token"),
            (lambda: arecorded.locks.acquire(key, ttl=30, request_id="nope"), "'nope'"),
            (lambda: arecorded.locks.release(key + "-other", lease), "-other"),
        ]
        for call, named in cases:
            with pytest.raises(volcano.InvalidArgumentError) as raised:
                await call()
            assert named in str(raised.value)
        with pytest.raises(volcano.InvalidArgumentError, match="ttl"):
            arecorded.locks.with_lock(key, ttl=0)
        assert wire.count() == 0
        assert server.state(key)["fencing_token"] is None


class TestRecovery:
    async def test_same_pair_recovers_and_same_token_reacquires(
        self, arecorded: volcano.AsyncClient, wire: Wire, key: str
    ) -> None:
        """Same token and request id: the stored lease; same token, new id: a later expiry."""
        token, request_id = new_id().upper(), new_id().upper()
        lease = await arecorded.locks.acquire(key, ttl=30, token=token, request_id=request_id)
        again = await arecorded.locks.acquire(key, ttl=30, token=token, request_id=request_id)
        assert again == lease
        replayed = wire.of("acquire")[-1].headers
        assert replayed is not None
        assert replayed["idempotent-replayed"] == "true"
        later = await arecorded.locks.acquire(key, ttl=30, token=token, request_id=new_id())
        assert later.fencing_token == lease.fencing_token
        assert later.expires_at > lease.expires_at

    async def test_lost_first_answer_is_recovered_by_the_retry(
        self, arecorded: volcano.AsyncClient, wire: Wire, key: str
    ) -> None:
        """One lost answer: the single retry repeats the request and gets the replayed lease."""
        wire.lose = ["acquire"]
        lease = await arecorded.locks.acquire(key, ttl=30)
        first, retry = wire.of("acquire")
        assert retry.request.headers["X-Request-Id"] == first.request.headers["X-Request-Id"]
        assert retry.request.content == first.request.content
        assert retry.headers is not None
        assert retry.headers["idempotent-replayed"] == "true"
        assert lease.fencing_token == 1

    async def test_both_answers_lost_then_recovered_with_the_kept_identifiers(
        self, arecorded: volcano.AsyncClient, wire: Wire, server: Locks, key: str
    ) -> None:
        """Acquire fails twice though the server granted it; the kept pair recovers the lease."""
        token, request_id = new_id(), new_id()
        wire.lose = ["acquire", "acquire"]
        with pytest.raises(volcano.APIConnectionError):
            await arecorded.locks.acquire(key, ttl=30, token=token, request_id=request_id)
        assert server.state(key)["held"] is True
        lease = await arecorded.locks.acquire(key, ttl=30, token=token, request_id=request_id)
        assert (lease.owner_token, lease.fencing_token) == (token, 1)
        await arecorded.locks.release(key, lease)
        assert server.state(key)["held"] is False
