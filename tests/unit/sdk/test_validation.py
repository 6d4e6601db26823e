"""Arguments are checked before anything is sent, and errors name the bad value."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import EXPIRES, TOKEN, FakeApi

GOOD_KEYS = ["a", "0", "daily-report", "jobs:daily.report_1-a", "A" * 255]
BAD_KEYS = ["", "-lead", ".lead", "has space", "key\n", "é", "a/b", "A" * 256, "k?x=1"]


class TestKeys:
    @pytest.mark.parametrize("key", GOOD_KEYS)
    def test_good_keys_are_sent(self, client: volcano.Client, fake_api: FakeApi, key: str) -> None:
        """Keys of 1 to 255 letters, digits, '.', '_', ':' and '-' are accepted."""
        assert client.locks.get(key).key == key

    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_bad_keys_are_refused(
        self, client: volcano.Client, fake_api: FakeApi, key: str
    ) -> None:
        """A bad key is refused before sending, and the message shows it."""
        with pytest.raises(volcano.InvalidArgumentError, match="key must be") as caught:
            client.locks.get(key)
        assert repr(key[:80]) in str(caught.value)
        assert fake_api.requests == []

    def test_trailing_newline_is_refused_everywhere(self, client: volcano.Client) -> None:
        """The whole key must match (a trailing newline slips past re.match with '$')."""
        lease = volcano.LockLease(
            key="k\n", owner_token=TOKEN, fencing_token=1, expires_at=EXPIRES, ttl_seconds=1
        )
        calls = [
            lambda: client.locks.acquire("k\n", ttl=1),
            lambda: client.locks.renew("k\n", lease),
            lambda: client.locks.release("k\n", lease),
            lambda: client.locks.get("k\n"),
            lambda: client.locks.force_release("k\n"),
            lambda: client.locks.with_lock("k\n", ttl=1),
        ]
        for call in calls:
            with pytest.raises(volcano.InvalidArgumentError):
                call()

    def test_non_string_key(self, client: volcano.Client) -> None:
        """A key must be a str."""
        with pytest.raises(volcano.InvalidArgumentError, match="key must be a str, got int"):
            client.locks.get(5)  # type: ignore[arg-type]


class TestTtl:
    @pytest.mark.parametrize(
        ("ttl", "sent"),
        [(0.1, 0.1), (30, 30), (86400, 86400), (timedelta(seconds=1.5), 1.5), (2.5, 2.5)],
    )
    def test_good_ttls(
        self, client: volcano.Client, fake_api: FakeApi, ttl: object, sent: float
    ) -> None:
        """0.1 to 86400 seconds, as a number or a timedelta, is sent as seconds."""
        client.locks.acquire("k", ttl=ttl)  # type: ignore[arg-type]
        assert fake_api.requests[0].content.endswith(f'"ttl_seconds":{sent}}}'.encode())

    @pytest.mark.parametrize(
        ("ttl", "shown"),
        [
            (0, "0"),
            (0.09, "0.09"),
            (86400.5, "86400.5"),
            (timedelta(days=2), "172800.0"),
            (-1, "-1"),
            (float("nan"), "nan"),
            (float("inf"), "inf"),
        ],
    )
    def test_out_of_range_ttls(
        self, client: volcano.Client, fake_api: FakeApi, ttl: object, shown: str
    ) -> None:
        """A ttl outside 0.1..86400 (or not finite) is refused, and the message shows it."""
        with pytest.raises(volcano.InvalidArgumentError, match="ttl") as caught:
            client.locks.acquire("k", ttl=ttl)  # type: ignore[arg-type]
        assert shown in str(caught.value)
        assert fake_api.requests == []

    @pytest.mark.parametrize("ttl", [True, "30", None, [30]])
    def test_wrong_type_ttls(self, client: volcano.Client, ttl: object) -> None:
        """A ttl must be int, float or timedelta (bool is not a number of seconds)."""
        with pytest.raises(volcano.InvalidArgumentError, match="ttl must be seconds"):
            client.locks.acquire("k", ttl=ttl)  # type: ignore[arg-type]

    def test_renew_checks_its_ttl(self, client: volcano.Client) -> None:
        """renew checks ttl= like acquire."""
        lease = volcano.LockLease(
            key="k", owner_token=TOKEN, fencing_token=1, expires_at=EXPIRES, ttl_seconds=1
        )
        with pytest.raises(volcano.InvalidArgumentError, match="ttl"):
            client.locks.renew("k", lease, ttl=0)


class TestLimit:
    @pytest.mark.parametrize("limit", [1, 2, 1000])
    def test_good_limits(self, client: volcano.Client, fake_api: FakeApi, limit: int) -> None:
        """1 to 1000 are accepted."""
        client.locks.acquire("k", ttl=1, limit=limit)
        assert len(fake_api.requests) == 1

    @pytest.mark.parametrize("limit", [0, -1, 1001, 10**9])
    def test_out_of_range_limits(self, sdk: Sdk, fake_api: FakeApi, limit: int) -> None:
        """Outside 1..1000: InvalidArgumentError naming `limit` and the value, nothing sent."""
        with pytest.raises(volcano.InvalidArgumentError, match=rf"limit must be .*{limit}"):
            sdk.acquire("k", ttl=1, limit=limit)
        with pytest.raises(volcano.InvalidArgumentError, match="limit"):
            sdk.with_lock("k", ttl=1, limit=limit)
        assert fake_api.requests == []

    @pytest.mark.parametrize("limit", [2.0, "2", True, None])
    def test_wrong_type_limits(self, client: volcano.Client, limit: object) -> None:
        """A limit is an int: no float, string, bool or None."""
        with pytest.raises(volcano.InvalidArgumentError, match="limit must be a whole number"):
            client.locks.acquire("k", ttl=1, limit=limit)  # type: ignore[arg-type]


class TestShared:
    def test_shared_is_sent_only_when_true(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """shared=True puts `shared: true` in the body; False sends no such field."""
        client.locks.acquire("k", ttl=1, shared=True)
        client.locks.acquire("k", ttl=1, shared=False)
        bodies = [json.loads(request.content) for request in fake_api.requests]
        assert [body.get("shared") for body in bodies] == [True, None]
        assert "shared" not in bodies[1]

    @pytest.mark.parametrize("limit", [2, 1000])
    def test_shared_with_a_limit_is_refused(self, sdk: Sdk, fake_api: FakeApi, limit: int) -> None:
        """shared=True with a limit above 1: InvalidArgumentError naming both, nothing sent."""
        with pytest.raises(volcano.InvalidArgumentError, match=rf"shared=True and limit={limit}"):
            sdk.acquire("k", ttl=1, shared=True, limit=limit)
        with pytest.raises(volcano.InvalidArgumentError, match="do not mix"):
            sdk.with_lock("k", ttl=1, shared=True, limit=limit)
        assert fake_api.requests == []

    @pytest.mark.parametrize("shared", [1, "true", None])
    def test_wrong_type_shared(self, client: volcano.Client, shared: object) -> None:
        """shared is a bool: no int, string or None."""
        with pytest.raises(volcano.InvalidArgumentError, match="shared must be True or False"):
            client.locks.acquire("k", ttl=1, shared=shared)  # type: ignore[arg-type]


class TestIdentifiers:
    @pytest.mark.parametrize(
        "value",
        [
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            TOKEN,
            "0f8FAD5b-D9cb-469F-a165-70867728950E",
            "00000000-0000-0000-0000-000000000000",
        ],
    )
    def test_any_letter_case_is_kept(
        self, client: volcano.Client, fake_api: FakeApi, value: str
    ) -> None:
        """UUID strings in any case are sent and returned exactly as spelled."""
        lease = client.locks.acquire("k", ttl=1, token=value, request_id=value)
        assert fake_api.requests[0].headers["X-Request-Id"] == value
        assert lease.owner_token == value

    @pytest.mark.parametrize(
        "value",
        [
            "not-a-uuid",
            "0F8FAD5B-D9CB-469F-A165-70867728950",  # short
            "{0F8FAD5B-D9CB-469F-A165-70867728950E}",
            "0F8FAD5BD9CB469FA16570867728950E",
            "0F8FAD5B-D9CB-469F-A165-70867728950E\n",
            "GF8FAD5B-D9CB-469F-A165-70867728950E",
        ],
    )
    def test_malformed_token_is_refused_without_echo(
        self, client: volcano.Client, fake_api: FakeApi, value: str
    ) -> None:
        """A malformed owner token is refused; the message never repeats the secret."""
        with pytest.raises(volcano.InvalidArgumentError, match="token must be a UUID") as caught:
            client.locks.acquire("k", ttl=1, token=value)
        assert value.strip() not in str(caught.value)
        assert fake_api.requests == []

    def test_malformed_request_id_is_refused_and_shown(self, client: volcano.Client) -> None:
        """A malformed request id (not a secret) is refused and shown."""
        with pytest.raises(volcano.InvalidArgumentError, match="request_id") as caught:
            client.locks.get("k", request_id="abc")
        assert "'abc'" in str(caught.value)

    @pytest.mark.parametrize("value", [123, b"0F8FAD5B-D9CB-469F-A165-70867728950E"])
    def test_wrong_type_identifier(self, client: volcano.Client, value: object) -> None:
        """Identifiers are str or uuid.UUID."""
        with pytest.raises(volcano.InvalidArgumentError, match=r"UUID string or uuid\.UUID"):
            client.locks.acquire("k", ttl=1, token=value)  # type: ignore[arg-type]
        with pytest.raises(volcano.InvalidArgumentError, match=r"UUID string or uuid\.UUID"):
            client.locks.force_release("k", request_id=value)  # type: ignore[arg-type]

    def test_with_lock_checks_before_entering(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """with_lock() checks its arguments when called, not when entered."""
        with pytest.raises(volcano.InvalidArgumentError):
            client.locks.with_lock("k", ttl=1, request_id="nope")
        with pytest.raises(volcano.InvalidArgumentError):
            client.locks.with_lock("k", ttl=0)
        assert fake_api.requests == []
