"""Keys and owner tokens never appear in a repr, a str, an error or a log line."""

from __future__ import annotations

import logging

import httpx
import pytest

import volcano
from tests.unit.sdk.support import (
    ANON_KEY,
    SERVICE_KEY,
    TOKEN,
    FakeApi,
    FakeClock,
    error,
    fail,
    raw,
)

SECRETS = (ANON_KEY, SERVICE_KEY, TOKEN, TOKEN.lower())


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


class TestNoSecrets:
    def test_everything_a_session_shows_or_logs(
        self,
        client: volcano.Client,
        fake_api: FakeApi,
        clock: FakeClock,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """A session touching every method, failure and guard path leaks no secret."""
        caplog.set_level(logging.DEBUG)
        shown: list[object] = [client, client.locks]
        fake_api.then(fail(httpx.ConnectError(f"refused {SERVICE_KEY}")))
        lease = client.locks.acquire("daily-report", ttl=30, token=TOKEN)
        shown += [lease, client.locks.renew("daily-report", lease)]
        shown += [client.locks.get("daily-report"), client.locks.force_release("daily-report")]
        client.locks.release("daily-report", lease)
        failures = [  # each answer, and how many attempts acquire makes on it
            (error(409, "lock_held", retry_after="3"), 1),
            (raw(503, b"<html>down</html>"), 2),
            (raw(200, b'{"owner_token": "%s"}' % TOKEN.encode()), 1),
            (fail(httpx.ReadTimeout("slow")), 2),
        ]
        for failure, attempts in failures:
            fake_api.then(*[failure] * attempts)
            with pytest.raises(volcano.Error) as caught:
                client.locks.acquire("daily-report", ttl=30, token=TOKEN)
            shown.append(caught.value)
        with pytest.raises(volcano.InvalidArgumentError) as bad_token:
            client.locks.acquire("daily-report", ttl=30, token=TOKEN + "0")
        shown.append(bad_token.value)
        with client.locks.with_lock("daily-report", ttl=30, token=TOKEN) as guard:
            shown.append(guard)
            clock.advance(10)
            fake_api.then(error(409, "lease_not_held"))
            clock.advance(10)
            assert guard.lost
            shown.append(guard.lost_reason)
        with client.locks.with_lock("other", ttl=30, token=TOKEN):
            fake_api.then(error(500, "internal"))  # the release fails and is logged
        for item in shown:
            assert_no_secret(repr(item))
            assert_no_secret(str(item))
            if isinstance(item, BaseException):
                assert_no_secret(" ".join(getattr(item, "__notes__", [])))
        assert_no_secret(caplog.text)
        assert any(r.levelno == logging.DEBUG and r.name == "volcano" for r in caplog.records)
        assert any(r.levelno == logging.WARNING and r.name == "volcano" for r in caplog.records)

    @pytest.mark.anyio
    async def test_async_client_repr(self, aclient: volcano.AsyncClient) -> None:
        """repr of the async client and its namespace shows no key."""
        assert_no_secret(repr(aclient))
        assert_no_secret(repr(aclient.locks))

    def test_debug_lines_name_operation_key_status_and_request_id(
        self, client: volcano.Client, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Each request logs one DEBUG line: operation, key, status, duration, request id."""
        caplog.set_level(logging.DEBUG, logger="volcano")
        request_id = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
        client.locks.get("daily-report", request_id=request_id)
        (line,) = [r.getMessage() for r in caplog.records if r.name == "volcano"]
        assert line.startswith("get daily-report -> 200 in ")
        assert line.endswith(f"(request_id={request_id})")
