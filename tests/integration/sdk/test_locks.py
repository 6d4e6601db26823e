"""Every method of `Client.locks` and `AsyncClient.locks` against the real server, checked from
the server's side too. Each test runs with both clients (`sdk`), but those marked SYNC_ONLY: they
pin what both share by construction (the same validation, models and request building)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import SYNC_ONLY, Sdk

from .conftest import Wire

TOKEN = "0F8FAD5B-D9CB-469F-A165-70867728950E"
"""An owner token spelled in upper case (tokens may repeat across keys; request ids may not)."""


@pytest.fixture
def request_id() -> str:
    """A fresh request id spelled in upper case (the server keeps request ids for minutes)."""
    return new_id().upper()


def server_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def sent_body(wire: Wire, name: str, index: int = -1) -> dict[str, object]:
    body: dict[str, object] = json.loads(wire.of(name)[index].request.content)
    return body


class TestAcquire:
    def test_fresh_key_gets_fencing_token_one(self, sdk: Sdk, server: Locks, key: str) -> None:
        """A first lease: fencing token 1, a fresh uuid owner token, the server's expiry."""
        lease = sdk.acquire(key, ttl=30)
        assert isinstance(lease, volcano.LockLease)
        assert lease.key == key
        assert lease.fencing_token == 1
        assert type(lease.fencing_token) is int
        assert str(uuid.UUID(lease.owner_token)) == lease.owner_token
        assert lease.ttl_seconds == 30
        assert lease.expires_at.tzinfo is UTC
        state = server.state(key)
        assert state["held"] is True
        assert server_time(state["expires_at"]) == lease.expires_at

    def test_upper_case_token_and_request_id_are_sent_byte_for_byte(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str, request_id: str
    ) -> None:
        """Upper-case token and request id reach the server exactly: its replay proves it."""
        lease = sdk.acquire(key, ttl=30, token=TOKEN, request_id=request_id)
        assert lease.owner_token == TOKEN
        (sent,) = wire.of("acquire")
        assert sent.request.headers["X-Request-Id"] == request_id
        assert sent_body(wire, "acquire")["owner_token"] == TOKEN
        assert sent.headers is not None
        assert sent.headers["X-Request-Id"] == request_id

        replay = server.acquire(key, TOKEN, 30, request_id=request_id)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json()["owner_token"] == TOKEN
        assert replay.content == sent.content
        lower_token = server.acquire(key, TOKEN.lower(), 30, request_id=request_id)
        assert lower_token.json()["error"]["code"] == "request_id_reused"
        lower_id = server.acquire(key, TOKEN, 30, request_id=request_id.lower())
        assert lower_id.status_code == 200
        assert "idempotent-replayed" not in lower_id.headers

    def test_uuid_objects_are_accepted(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """token= and request_id= take uuid.UUID values, sent as their canonical strings."""
        token, request_id = uuid.uuid4(), uuid.uuid4()
        lease = sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        assert lease.owner_token == str(token)
        assert wire.of("acquire")[0].request.headers["X-Request-Id"] == str(request_id)

    def test_second_owner_gets_lock_held(
        self, sdk: Sdk, wire: Wire, key: str, request_id: str
    ) -> None:
        """Another owner's acquire raises LockHeldError (a ConflictError) and is not retried."""
        sdk.acquire(key, ttl=20)
        with pytest.raises(volcano.LockHeldError) as raised:
            sdk.acquire(key, ttl=30, request_id=request_id)
        error = raised.value
        assert isinstance(error, volcano.ConflictError)
        assert (error.status_code, error.code, error.request_id) == (409, "lock_held", request_id)
        assert error.retry_after is not None
        assert 1 <= error.retry_after <= 20
        assert len(wire.of("acquire")) == 2

    def test_same_owner_reacquire_keeps_the_lease(self, sdk: Sdk, key: str) -> None:
        """The holder's own token acquires again: same fencing token, expiry moved out."""
        first = sdk.acquire(key, ttl=10, token=TOKEN)
        again = sdk.acquire(key, ttl=60, token=TOKEN)
        assert again.fencing_token == first.fencing_token
        assert again.owner_token == TOKEN
        assert again.expires_at > first.expires_at
        assert again.ttl_seconds == 60

    @SYNC_ONLY
    def test_own_expired_lease_is_a_new_lease(self, sdk: Sdk, key: str) -> None:
        """Once its lease has expired, the same owner token acquires a new fencing token."""
        first = sdk.acquire(key, ttl=0.2, token=TOKEN)
        wait_for(lambda: not sdk.get(key).held, what="the lease to expire")
        again = sdk.acquire(key, ttl=30, token=TOKEN)
        assert again.fencing_token == first.fencing_token + 1

    @SYNC_ONLY
    def test_ttl_as_timedelta_and_fraction(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """ttl= takes a timedelta or fractional seconds, sent as a JSON number of seconds."""
        lease = sdk.acquire(key, ttl=timedelta(seconds=45))
        assert lease.ttl_seconds == 45
        assert sent_body(wire, "acquire")["ttl_seconds"] == 45
        renewed = sdk.renew(key, lease, ttl=2.5)
        assert renewed.ttl_seconds == 2.5

    @SYNC_ONLY
    def test_lease_is_frozen_and_hides_its_token(self, sdk: Sdk, key: str) -> None:
        """A LockLease cannot be changed, and its repr never shows the owner token."""
        lease = sdk.acquire(key, ttl=30, token=TOKEN)
        with pytest.raises(AttributeError):
            lease.fencing_token = 2  # type: ignore[misc]
        assert TOKEN not in repr(lease)
        assert TOKEN.lower() not in repr(lease)


class TestRenew:
    def test_renew_returns_a_new_lease_and_leaves_the_old(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """renew gives a new lease (same fencing token, later expiry); the old one is unchanged."""
        lease = sdk.acquire(key, ttl=10)
        before = attrs.asdict(lease)
        renewed = sdk.renew(key, lease, ttl=60)
        assert renewed is not lease
        assert attrs.asdict(lease) == before
        assert renewed.fencing_token == lease.fencing_token
        assert renewed.owner_token == lease.owner_token
        assert renewed.expires_at > lease.expires_at
        assert renewed.ttl_seconds == 60
        assert server_time(server.state(key)["expires_at"]) == renewed.expires_at

    @SYNC_ONLY
    def test_renew_defaults_to_the_lease_ttl(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """Without ttl=, renew asks for the lease's own ttl."""
        lease = sdk.acquire(key, ttl=12)
        renewed = sdk.renew(key, lease)
        assert sent_body(wire, "renew")["ttl_seconds"] == 12
        assert renewed.ttl_seconds == 12

    def test_renew_and_release_of_a_force_released_lease(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """Once the lease is force-released, renew and release raise LeaseNotHeldError."""
        lease = sdk.acquire(key, ttl=30)
        assert server.force_release(key).json()["released"] is True
        with pytest.raises(volcano.LeaseNotHeldError) as raised:
            sdk.renew(key, lease)
        assert (raised.value.status_code, raised.value.code) == (409, "lease_not_held")
        assert isinstance(raised.value, volcano.ConflictError)
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.release(key, lease)

    @SYNC_ONLY
    def test_renew_after_takeover_leaves_the_new_holder(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """A lease taken over by another owner cannot be renewed or released by the old one."""
        lease = sdk.acquire(key, ttl=30)
        server.force_release(key)
        other = new_id()
        assert server.acquire(key, other).status_code == 200
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.renew(key, lease)
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.release(key, lease)
        state = server.state(key)
        assert (state["held"], state["fencing_token"]) == (True, 2)
        assert server.release(key, other, 2).status_code == 204

    @SYNC_ONLY
    def test_renew_of_an_expired_lease(self, sdk: Sdk, server: Locks, key: str) -> None:
        """A lease the server let expire raises LeaseNotHeldError on renew."""
        lease = sdk.acquire(key, ttl=0.2)
        wait_for(lambda: not server.state(key)["held"], what="the lease to expire")
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.renew(key, lease)


class TestRelease:
    def test_release_frees_the_key_and_keeps_the_token(self, sdk: Sdk, key: str) -> None:
        """After release, get shows not held, no expiry, and the last fencing token."""
        lease = sdk.acquire(key, ttl=30)
        assert sdk.release(key, lease) is None
        state = sdk.get(key)
        assert (state.held, state.expires_at, state.fencing_token) == (False, None, 1)
        assert sdk.acquire(key, ttl=30).fencing_token == 2

    @SYNC_ONLY
    def test_release_twice(self, sdk: Sdk, key: str) -> None:
        """A second release of the same lease raises LeaseNotHeldError."""
        lease = sdk.acquire(key, ttl=30)
        sdk.release(key, lease)
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.release(key, lease)

    @SYNC_ONLY
    def test_release_by_the_renewed_lease(self, sdk: Sdk, server: Locks, key: str) -> None:
        """Releasing the lease renew returned frees the key."""
        lease = sdk.renew(key, sdk.acquire(key, ttl=30), ttl=60)
        sdk.release(key, lease)
        assert server.state(key)["held"] is False


class TestGet:
    def test_never_used_key(self, sdk: Sdk, key: str) -> None:
        """A key never acquired: not held, expires_at None, fencing_token None."""
        state = sdk.get(key)
        assert isinstance(state, volcano.LockState)
        assert (state.key, state.held, state.expires_at, state.fencing_token) == (
            key,
            False,
            None,
            None,
        )

    def test_held_key(self, sdk: Sdk, key: str) -> None:
        """A held key: held True, the lease's expiry as aware UTC, its fencing token."""
        lease = sdk.acquire(key, ttl=30)
        state = sdk.get(key)
        assert state.held is True
        assert state.expires_at == lease.expires_at
        assert state.expires_at is not None
        assert state.expires_at.tzinfo is UTC
        assert state.fencing_token == lease.fencing_token
        assert type(state.fencing_token) is int
        assert not hasattr(state, "owner_token")

    @SYNC_ONLY
    def test_get_does_not_acquire(self, sdk: Sdk, server: Locks, key: str) -> None:
        """get leaves the key free for anyone."""
        sdk.get(key)
        assert server.acquire(key, new_id()).json()["fencing_token"] == 1

    @SYNC_ONLY
    def test_expired_lease_reads_as_free(self, sdk: Sdk, key: str) -> None:
        """Once the lease expires, get reports it free with its last fencing token."""
        sdk.acquire(key, ttl=0.2)
        wait_for(lambda: not sdk.get(key).held, what="the lease to expire")
        state = sdk.get(key)
        assert (state.expires_at, state.fencing_token) == (None, 1)


class TestForceRelease:
    def test_held_key(self, sdk: Sdk, key: str) -> None:
        """Force release of a held key: released True with the removed lease's fencing token."""
        lease = sdk.acquire(key, ttl=30)
        result = sdk.force_release(key)
        assert isinstance(result, volcano.ForceReleaseResult)
        assert (result.key, result.released, result.fencing_token) == (key, True, 1)
        assert result.fencing_token == lease.fencing_token
        state = sdk.get(key)
        assert (state.held, state.fencing_token) == (False, 1)

    @SYNC_ONLY
    def test_expired_lease_is_not_released(self, sdk: Sdk, key: str) -> None:
        """An expired lease is not live: force release removes nothing and says so."""
        sdk.acquire(key, ttl=0.2)
        wait_for(lambda: not sdk.get(key).held, what="the lease to expire")
        result = sdk.force_release(key)
        assert (result.released, result.fencing_token) == (False, None)

    def test_free_key(self, sdk: Sdk, key: str) -> None:
        """Force release of a free key: released False, fencing_token None, no error."""
        result = sdk.force_release(key)
        assert (result.key, result.released, result.fencing_token) == (key, False, None)
        lease = sdk.acquire(key, ttl=30)
        sdk.release(key, lease)
        again = sdk.force_release(key)
        assert (again.released, again.fencing_token) == (False, None)


class TestRequestIds:
    @SYNC_ONLY
    def test_every_method_sends_the_supplied_request_id(
        self, sdk: Sdk, wire: Wire, key: str
    ) -> None:
        """Each method sends request_id= exactly as spelled, and the server echoes it."""
        ids = [new_id().upper() for _ in range(5)]
        lease = sdk.acquire(key, ttl=30, request_id=ids[0])
        lease = sdk.renew(key, lease, request_id=ids[1])
        sdk.get(key, request_id=ids[2])
        sdk.release(key, lease, request_id=ids[3])
        sdk.force_release(key, request_id=ids[4])
        assert [e.request.headers["X-Request-Id"] for e in wire.exchanges] == ids
        assert [e.headers["X-Request-Id"] for e in wire.exchanges if e.headers] == ids

    @SYNC_ONLY
    def test_fresh_request_id_per_call(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """Without request_id=, every call sends a new uuid4."""
        for _ in range(3):
            sdk.get(key)
        ids = [e.request.headers["X-Request-Id"] for e in wire.exchanges]
        assert len(set(ids)) == 3
        assert all(uuid.UUID(i).version == 4 for i in ids)

    def test_reuse_with_a_different_body(self, sdk: Sdk, key: str) -> None:
        """A request id reused for a different acquire raises RequestIdReusedError."""
        request_id = new_id()
        sdk.acquire(key, ttl=30, token=TOKEN, request_id=request_id)
        with pytest.raises(volcano.RequestIdReusedError) as raised:
            sdk.acquire(key, ttl=60, token=TOKEN, request_id=request_id)
        assert (raised.value.status_code, raised.value.code) == (409, "request_id_reused")
        assert raised.value.request_id == request_id
        assert isinstance(raised.value, volcano.ConflictError)

    @SYNC_ONLY
    def test_reuse_for_another_operation(self, sdk: Sdk, key: str) -> None:
        """The acquisition's request id cannot be reused for the renewal."""
        request_id = new_id()
        lease = sdk.acquire(key, ttl=30, request_id=request_id)
        with pytest.raises(volcano.RequestIdReusedError):
            sdk.renew(key, lease, request_id=request_id)

    @SYNC_ONLY
    def test_repeated_release_is_replayed(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """A release repeated with its request id is replayed by the server, not refused."""
        lease = sdk.acquire(key, ttl=30)
        request_id = new_id()
        sdk.release(key, lease, request_id=request_id)
        sdk.release(key, lease, request_id=request_id)
        replayed = wire.of("release")[-1].headers
        assert replayed is not None
        assert replayed["idempotent-replayed"] == "true"
        assert server.state(key)["held"] is False


class TestAuthentication:
    @staticmethod
    def every_method(sdk: Sdk, key: str) -> list[Callable[[], object]]:
        lease = volcano.LockLease(
            key=key,
            owner_token=TOKEN,
            fencing_token=1,
            expires_at=datetime(2030, 1, 1, tzinfo=UTC),
            ttl_seconds=30,
        )
        return [
            lambda: sdk.acquire(key, ttl=30),
            lambda: sdk.renew(key, lease),
            lambda: sdk.release(key, lease),
            lambda: sdk.get(key),
            lambda: sdk.force_release(key),
        ]

    def test_wrong_service_key(self, make_sdk: Callable[..., Sdk], wire: Wire, key: str) -> None:
        """An unknown service key: AuthenticationError (401) from every method, never retried."""
        sdk = make_sdk(service_key="not-a-real-service-key")
        calls = self.every_method(sdk, key)
        for call in calls:
            with pytest.raises(volcano.AuthenticationError) as raised:
                call()
            assert (raised.value.status_code, raised.value.code) == (401, "unauthorized")
            assert raised.value.request_id == wire.exchanges[-1].request.headers["X-Request-Id"]
        assert wire.count() == len(calls)

    @SYNC_ONLY
    def test_keys_of_two_projects(
        self, make_sdk: Callable[..., Sdk], live_server: LiveServer, key: str
    ) -> None:
        """This project's anon key with another project's service key: AuthenticationError."""
        sdk = make_sdk(service_key=live_server.other.service_key)
        with pytest.raises(volcano.AuthenticationError):
            sdk.acquire(key, ttl=30)

    def test_anon_key_as_service_key(
        self,
        make_sdk: Callable[..., Sdk],
        live_server: LiveServer,
        wire: Wire,
        key: str,
    ) -> None:
        """The anon key used as the service credential: PermissionDeniedError (403)."""
        sdk = make_sdk(service_key=live_server.project.anon_key)
        calls = self.every_method(sdk, key)
        for call in calls:
            with pytest.raises(volcano.PermissionDeniedError) as raised:
                call()
            assert (raised.value.status_code, raised.value.code) == (403, "forbidden")
        assert wire.count() == len(calls)

    @SYNC_ONLY
    def test_projects_are_isolated(self, sdk: Sdk, live_server: LiveServer, key: str) -> None:
        """The same key name in another project is another lock."""
        sdk.acquire(key, ttl=30)
        with volcano.Client(**live_server.other.client_args(live_server.url)) as other_client:
            assert other_client.locks.get(key).fencing_token is None
            assert other_client.locks.acquire(key, ttl=30).fencing_token == 1


BAD_KEYS = ["", "bad key", "-leading-dash", "key\n", "k" * 256, "ключ"]
BAD_TTLS = [0, 0.05, 86400.5, -1, float("nan"), float("inf"), timedelta(0)]


class TestValidation:
    @SYNC_ONLY
    def test_limits_agree_with_the_server(self, sdk: Sdk, key: str) -> None:
        """What the client lets through at the edges, the server accepts: key and ttl limits."""
        longest = (key + "-" + "k" * 255)[:255]
        for name, ttl in [(longest, 0.1), (f"{key}.A_b:c-9", 86400)]:
            lease = sdk.acquire(name, ttl=ttl)
            assert (lease.key, lease.ttl_seconds) == (name, ttl)
            sdk.force_release(name)

    @pytest.mark.parametrize("bad", BAD_KEYS, ids=repr)
    def test_bad_key_is_refused_before_sending(
        self, sdk: Sdk, wire: Wire, bad: str, key: str
    ) -> None:
        """A malformed key fails every method with a message naming it; nothing is sent."""
        lease = sdk.acquire(key, ttl=30)
        sent = wire.count()
        shown = repr(bad[:80])[:-1]
        calls: list[Callable[[], object]] = [
            lambda: sdk.acquire(bad, ttl=30),
            lambda: sdk.renew(bad, lease),
            lambda: sdk.release(bad, lease),
            lambda: sdk.get(bad),
            lambda: sdk.force_release(bad),
            lambda: sdk.with_lock(bad, ttl=30),
        ]
        for call in calls:
            with pytest.raises(volcano.InvalidArgumentError) as raised:
                call()
            assert "key" in str(raised.value)
            assert shown in str(raised.value)
            assert isinstance(raised.value, ValueError)
        assert wire.count() == sent

    @pytest.mark.parametrize("bad", BAD_TTLS, ids=repr)
    def test_bad_ttl_is_refused_before_sending(
        self, sdk: Sdk, wire: Wire, server: Locks, bad: object, key: str
    ) -> None:
        """An out-of-range ttl fails acquire, renew and with_lock naming it; nothing is sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="ttl") as raised:
            sdk.acquire(key, ttl=bad)  # type: ignore[arg-type]
        seconds = bad.total_seconds() if isinstance(bad, timedelta) else bad
        assert repr(seconds) in str(raised.value)
        with pytest.raises(volcano.InvalidArgumentError, match="ttl"):
            sdk.with_lock(key, ttl=bad)  # type: ignore[arg-type]
        assert wire.count() == 0
        assert server.state(key)["fencing_token"] is None
        lease = sdk.acquire(key, ttl=30)
        with pytest.raises(volcano.InvalidArgumentError, match="ttl"):
            sdk.renew(key, lease, ttl=bad)  # type: ignore[arg-type]
        assert wire.count() == 1

    @SYNC_ONLY
    @pytest.mark.parametrize("bad", ["30", True, None, [30]], ids=repr)
    def test_ttl_of_the_wrong_type(self, sdk: Sdk, wire: Wire, bad: object, key: str) -> None:
        """A ttl that is not seconds or a timedelta names the type it got; nothing is sent."""
        with pytest.raises(volcano.InvalidArgumentError, match=type(bad).__name__):
            sdk.acquire(key, ttl=bad)  # type: ignore[arg-type]
        assert wire.count() == 0

    @pytest.mark.parametrize(
        "bad", ["not-a-uuid", TOKEN[:-1], TOKEN + "0", " " + TOKEN, f"{{{TOKEN}}}"], ids=repr
    )
    def test_bad_token_is_refused_without_echoing_it(
        self, sdk: Sdk, wire: Wire, server: Locks, bad: str, key: str
    ) -> None:
        """A malformed owner token is named as 'token' but never shown; nothing is sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="token") as raised:
            sdk.acquire(key, ttl=30, token=bad)
        assert bad not in str(raised.value)
        with pytest.raises(volcano.InvalidArgumentError, match="token"):
            sdk.with_lock(key, ttl=30, token=bad)
        assert wire.count() == 0
        assert server.state(key)["fencing_token"] is None

    @pytest.mark.parametrize("bad", ["nope", TOKEN + "\n", 42], ids=repr)
    def test_bad_request_id_is_refused_before_sending(
        self, sdk: Sdk, wire: Wire, bad: object, key: str
    ) -> None:
        """A malformed request id fails every method naming it; nothing is sent."""
        shown = str(bad).strip() if isinstance(bad, str) else type(bad).__name__
        calls: list[Callable[[], object]] = [
            lambda: sdk.acquire(key, ttl=30, request_id=bad),  # type: ignore[arg-type]
            lambda: sdk.get(key, request_id=bad),  # type: ignore[arg-type]
            lambda: sdk.force_release(key, request_id=bad),  # type: ignore[arg-type]
            lambda: sdk.with_lock(key, ttl=30, request_id=bad),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(volcano.InvalidArgumentError, match="request_id") as raised:
                call()
            assert shown in str(raised.value)
        assert wire.count() == 0

    def test_lease_for_another_key(self, sdk: Sdk, wire: Wire, server: Locks, key: str) -> None:
        """renew and release refuse a lease of another key, naming both; nothing is sent."""
        lease = sdk.acquire(key, ttl=30)
        other = key + "-other"
        for call in (sdk.renew, sdk.release):
            with pytest.raises(volcano.InvalidArgumentError) as raised:
                call(other, lease)
            assert key in str(raised.value)
            assert other in str(raised.value)
        with pytest.raises(volcano.InvalidArgumentError, match="LockLease"):
            sdk.release(key, "not a lease")  # type: ignore[arg-type]
        assert wire.count() == 1
        assert server.state(key)["held"] is True


class TestRecovery:
    """The seed's "Recover an uncertain acquisition": identifiers made and kept before acquiring."""

    def test_same_pair_recovers_exactly_that_lease(self, sdk: Sdk, wire: Wire, key: str) -> None:
        """Acquiring again with the same token and request id returns the stored lease."""
        token, request_id = new_id().upper(), new_id().upper()
        lease = sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        again = sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        assert again == lease
        headers = wire.of("acquire")[-1].headers
        assert headers is not None
        assert headers["idempotent-replayed"] == "true"

    def test_same_token_new_request_id_reacquires(self, sdk: Sdk, server: Locks, key: str) -> None:
        """The same token with a new request id re-acquires: same fencing token, later expiry."""
        token = new_id().upper()
        lease = sdk.acquire(key, ttl=30, token=token, request_id=new_id())
        again = sdk.acquire(key, ttl=30, token=token, request_id=new_id())
        assert again.fencing_token == lease.fencing_token
        assert again.owner_token == token
        assert again.expires_at > lease.expires_at
        assert server_time(server.state(key)["expires_at"]) == again.expires_at

    def test_lost_first_answer_is_recovered_by_the_retry(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """One lost answer: the single retry repeats the request and gets the replayed lease."""
        wire.lose = ["acquire"]
        lease = sdk.acquire(key, ttl=30)
        first, retry = wire.of("acquire")
        assert retry.request.headers["X-Request-Id"] == first.request.headers["X-Request-Id"]
        assert retry.request.content == first.request.content
        assert retry.request.headers["Authorization"] == first.request.headers["Authorization"]
        assert retry.headers is not None
        assert retry.headers["idempotent-replayed"] == "true"
        assert lease.fencing_token == 1
        assert server.state(key)["fencing_token"] == 1

    def test_both_answers_lost_then_recovered_with_the_kept_identifiers(
        self, sdk: Sdk, wire: Wire, server: Locks, key: str
    ) -> None:
        """Acquire fails twice though the server granted it; the kept pair recovers the lease."""
        token, request_id = new_id(), new_id()
        wire.lose = ["acquire", "acquire"]
        with pytest.raises(volcano.APIConnectionError) as raised:
            sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        assert raised.value.request_id == request_id
        assert len(wire.of("acquire")) == 2
        assert server.state(key)["held"] is True  # the failure did not prove anything

        lease = sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        assert (lease.owner_token, lease.fencing_token) == (token, 1)
        sdk.release(key, lease)
        assert server.state(key)["held"] is False

    @SYNC_ONLY
    def test_replay_after_release_does_not_retake(self, sdk: Sdk, server: Locks, key: str) -> None:
        """The same pair after release is told the lease ended (never given the old lease as if
        held) and leaves the key free."""
        token, request_id = new_id(), new_id()
        lease = sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        sdk.release(key, lease)
        with pytest.raises(volcano.LeaseNotHeldError, match="no longer live"):
            sdk.acquire(key, ttl=30, token=token, request_id=request_id)
        assert server.state(key)["held"] is False
