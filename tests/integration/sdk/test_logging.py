"""No secret reaches the `volcano` logger or an error's text during a real workload."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import Sdk
from tests.support.sockets import closed_url

pytestmark = pytest.mark.usefixtures("debug_logs")

WRONG_SERVICE_KEY = "sk-wrong-0123456789abcdef0123456789abcdef"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="volcano")


def assert_no_secret(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        for spelling in {secret, secret.lower(), secret.upper()}:
            assert spelling not in text, "a secret was logged or shown"


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    records = [r for r in caplog.records if r.name.startswith("volcano")]
    assert records, "nothing was logged: the test would prove nothing"
    return caplog.text + "\n".join(f"{r.getMessage()} {r.args!r}" for r in records)


class TestWorkload:
    def test_no_key_or_owner_token_is_logged(
        self,
        live_server: LiveServer,
        make_sdk: Callable[..., Sdk],
        server: Locks,
        key: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Every operation, conflicts, auth and transport errors and guard loss log no secret,
        with either client."""
        project = live_server.project
        tokens = [new_id().upper(), new_id()]
        request_id = new_id().upper()
        shown: list[str] = []
        sdk = make_sdk()

        lease = sdk.acquire(key, ttl=30, token=tokens[0], request_id=request_id)
        lease = sdk.renew(key, lease, ttl=60)
        sdk.get(key)
        with pytest.raises(volcano.LockHeldError) as held:
            sdk.acquire(key, ttl=30, token=tokens[1])
        shown += [str(held.value), repr(held.value), repr(lease)]
        sdk.release(key, lease)
        sdk.force_release(key)

        with sdk.lock(key, ttl=1.2, token=tokens[1]) as guard:
            first = guard.lease
            wait_for(lambda: guard.lease.expires_at > first.expires_at, what="a renewal")
            server.force_release(key)
            assert sdk.wait_lost(guard, 10) is True
        shown += [str(guard.lost_reason), repr(guard), repr(guard.lease)]
        with sdk.lock(key, ttl=30) as guard:
            tokens.append(guard.lease.owner_token)
            server.force_release(key)  # the release on exit is refused and logged
        wrong = make_sdk(service_key=WRONG_SERVICE_KEY)
        with pytest.raises(volcano.AuthenticationError) as denied:
            wrong.get(key)
        unreachable = make_sdk(api_url=closed_url())
        with pytest.raises(volcano.APIConnectionError) as refused:
            unreachable.acquire(key, ttl=30, token=tokens[0])
        shown += [str(denied.value), repr(denied.value), str(refused.value), repr(sdk.client)]

        logged = everything_logged(caplog)
        assert request_id in logged  # request ids are logged, as they should be
        assert "releasing the lease" in logged
        assert "lost the lease" in logged
        secrets = [project.anon_key, project.service_key, WRONG_SERVICE_KEY, *tokens]
        assert_no_secret(logged, secrets)
        assert_no_secret("\n".join(shown), secrets)
