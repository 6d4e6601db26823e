"""No secret reaches the `volcano` logger or an error's text during a real workload."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for

from .conftest import credentials

pytestmark = pytest.mark.usefixtures("debug_logs")

WRONG_SERVICE_KEY = "sk-wrong-0123456789abcdef0123456789abcdef"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="volcano")


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def assert_no_secret(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        for spelling in {secret, secret.lower(), secret.upper()}:
            assert spelling not in text, "a secret was logged or shown"


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    records = [r for r in caplog.records if r.name.startswith("volcano")]
    assert records, "nothing was logged: the test would prove nothing"
    return caplog.text + "\n".join(f"{r.getMessage()} {r.args!r}" for r in records)


class TestSyncWorkload:
    def test_no_key_or_owner_token_is_logged(
        self,
        live_server: LiveServer,
        make_recorded: Callable[..., volcano.Client],
        server: Locks,
        key: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Every operation, conflicts, auth and transport errors and guard loss log no secret."""
        project = live_server.project
        tokens = [new_id().upper(), new_id()]
        request_id = new_id().upper()
        shown: list[str] = []
        client = make_recorded()

        lease = client.locks.acquire(key, ttl=30, token=tokens[0], request_id=request_id)
        lease = client.locks.renew(key, lease, ttl=60)
        client.locks.get(key)
        with pytest.raises(volcano.LockHeldError) as held:
            client.locks.acquire(key, ttl=30, token=tokens[1])
        shown += [str(held.value), repr(held.value), repr(lease)]
        client.locks.release(key, lease)
        client.locks.force_release(key)

        with client.locks.with_lock(key, ttl=1.2, token=tokens[1]) as guard:
            first = guard.lease
            wait_for(lambda: guard.lease.expires_at > first.expires_at, what="a renewal")
            server.force_release(key)
            assert guard.wait_lost(timeout=10) is True
        shown += [str(guard.lost_reason), repr(guard), repr(guard.lease)]
        with client.locks.with_lock(key, ttl=30) as guard:
            tokens.append(guard.lease.owner_token)
            server.force_release(key)  # the release on exit is refused and logged
        wrong = make_recorded(service_key=WRONG_SERVICE_KEY)
        with pytest.raises(volcano.AuthenticationError) as denied:
            wrong.locks.get(key)
        unreachable = make_recorded(api_url=closed_url())
        with pytest.raises(volcano.APIConnectionError) as refused:
            unreachable.locks.acquire(key, ttl=30, token=tokens[0])
        shown += [str(denied.value), repr(denied.value), str(refused.value), repr(client)]

        logged = everything_logged(caplog)
        assert request_id in logged  # request ids are logged, as they should be
        assert "releasing the lease" in logged
        secrets = [project.anon_key, project.service_key, WRONG_SERVICE_KEY, *tokens]
        assert_no_secret(logged, secrets)
        assert_no_secret("\n".join(shown), secrets)


class TestAsyncWorkload:
    @pytest.mark.anyio
    async def test_no_key_or_owner_token_is_logged(
        self,
        live_server: LiveServer,
        server: Locks,
        key: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """The async client's operations, errors and guard loss log no secret."""
        project = live_server.project
        token, request_id = new_id().upper(), new_id().upper()
        async with volcano.AsyncClient(**credentials(live_server)) as client:
            lease = await client.locks.acquire(key, ttl=30, token=token, request_id=request_id)
            lease = await client.locks.renew(key, lease)
            await client.locks.get(key)
            with pytest.raises(volcano.LockHeldError):
                await client.locks.acquire(key, ttl=30)
            await client.locks.release(key, lease)
            async with client.locks.with_lock(key, ttl=1.2, token=token) as guard:
                server.force_release(key)
                assert await guard.wait_lost(timeout=10) is True
        args = {**credentials(live_server), "service_key": WRONG_SERVICE_KEY}
        async with volcano.AsyncClient(**args) as wrong:
            with pytest.raises(volcano.AuthenticationError):
                await wrong.locks.get(key)

        logged = everything_logged(caplog)
        assert request_id in logged
        assert "lost the lease" in logged
        assert_no_secret(logged, [project.anon_key, project.service_key, WRONG_SERVICE_KEY, token])
