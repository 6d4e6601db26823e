"""Groups in the SDK against a scripted API on a fake clock: requests as the spec says, answers
read into SDK values, memberships renewed by the engine in batches of their own kind, and every
argument checked before anything is sent.

Memberships are joined at t=100 (the FakeClock stands still while they enter) with ttl=30: their
renewals are due at 110, together.
"""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import EXPIRES, FakeApi, FakeClock, echo, error

if TYPE_CHECKING:
    from collections.abc import Iterator

MEMBERS_BATCH = "/v1/members/renew"


class GroupsApi(FakeApi):
    """The FakeApi, answering the group operations too, as a correct server would."""

    def default(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == MEMBERS_BATCH:
            entries = json.loads(request.content)["memberships"]
            results = [
                {
                    "group": entry["group"],
                    "member": entry["member"],
                    "membership": self.membership(
                        entry["group"], entry["member"], entry["owner_token"], entry["ttl_seconds"]
                    ),
                }
                for entry in entries
            ]
            return httpx.Response(200, json={"results": results}, headers=echo(request))
        if not path.startswith("/v1/groups"):
            return super().default(request)
        parts = path.split("/")  # ['', 'v1', 'groups', group, 'members', member, operation]
        body = json.loads(request.content) if request.content else {}
        if len(parts) == 7 and parts[6] in ("join", "renew", "capabilities"):
            ttl = body.get("ttl_seconds", 30)
            made = self.membership(parts[3], parts[5], body["owner_token"], ttl)
            return httpx.Response(200, json=made, headers=echo(request))
        if len(parts) == 7 and parts[6] == "leave":
            return httpx.Response(204, headers=echo(request))
        if len(parts) == 4 and request.method == "PUT":
            state = {"group": parts[3], "version": 1, "fencing_token": None, "members": 0}
            return httpx.Response(201, json=state, headers=echo(request))
        raise AssertionError(f"no scripted answer for {request.method} {path}")

    def membership(self, group: str, member: str, owner: str, ttl: float) -> dict[str, Any]:
        return {
            "group": group,
            "member": member,
            "owner_token": owner,
            "fencing_token": self.fencing_token,
            "expires_at": EXPIRES.isoformat().replace("+00:00", "Z"),
            "ttl_seconds": ttl,
        }


@pytest.fixture
def fake_api() -> FakeApi:
    return GroupsApi()


def renewals(fake_api: FakeApi) -> list[str]:
    """Each renewal request's path: a batch of memberships', a single one's, a lock's."""
    return [r.url.path for r in fake_api.requests if r.url.path.endswith("/renew")]


@contextlib.contextmanager
def memberships(client: volcano.Client, *names: str) -> Iterator[list[volcano.MembershipGuard]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(client.groups.membership("g", n, ttl=30)) for n in names]


class TestBatches:
    def test_memberships_due_together_go_out_in_one_request(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Two memberships due at 110: one POST /v1/members/renew carries both, each with its
        own tokens, and each guard takes its own renewed membership."""
        with memberships(client, "a", "b") as held:
            joined = [guard.membership for guard in held]
            clock.advance(10)
            assert renewals(fake_api) == [MEMBERS_BATCH]
            (batch,) = [r for r in fake_api.requests if r.url.path == MEMBERS_BATCH]
            assert json.loads(batch.content) == {
                "memberships": [
                    {
                        "group": "g",
                        "member": m.member,
                        "owner_token": m.owner_token,
                        "fencing_token": m.fencing_token,
                        "ttl_seconds": 30.0,
                    }
                    for m in joined
                ]
            }
            assert all(guard.state is volcano.GuardState.HELD for guard in held)

    def test_leases_and_memberships_go_in_requests_of_their_own(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A lock guard and two memberships due at once: a batch of memberships, and the
        lock's own renewal; never one request mixing them."""
        with client.locks.with_lock("k", ttl=30), memberships(client, "a", "b"):
            clock.advance(10)
            assert sorted(renewals(fake_api)) == sorted([MEMBERS_BATCH, "/v1/locks/k/renew"])

    def test_a_lone_membership_is_a_plain_renewal(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """One membership due on its own goes out on its own renew path."""
        with memberships(client, "a"):
            clock.advance(10)
        assert renewals(fake_api) == ["/v1/groups/g/members/a/renew"]

    def test_a_transient_failure_is_retried_and_the_memberships_stay_held(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """A 503 for the batch: the memberships are retried after their backoff, together
        again, and renewed; neither guard was lost."""
        with memberships(client, "a", "b") as held:
            fake_api.then(error(503, "unavailable"))
            clock.advance(10)
            assert renewals(fake_api) == [MEMBERS_BATCH]
            clock.advance(1)
            assert renewals(fake_api) == [MEMBERS_BATCH, MEMBERS_BATCH]
            assert [guard.state for guard in held] == [volcano.GuardState.HELD] * 2

    def test_a_membership_refused_in_a_batch_loses_only_its_guard(
        self, client: volcano.Client, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """The first result is 409 lease_not_held: that guard is lost, the other renewed."""

        def first_refused(request: httpx.Request) -> httpx.Response:
            results = json.loads(fake_api.default(request).content)["results"]
            detail = {"code": "lease_not_held", "message": "removed", "request_id": "r"}
            results[0] = {"group": "g", "member": "a", "status": 409, "error": detail}
            return httpx.Response(200, json={"results": results}, headers=echo(request))

        with memberships(client, "a", "b") as (first, second):
            fake_api.then(first_refused)
            clock.advance(10)
            assert first.lost
            assert isinstance(first.lost_reason, volcano.LeaseNotHeldError)
            assert not second.lost
        leaves = [r.url.path for r in fake_api.requests if r.url.path.endswith("/leave")]
        assert leaves == ["/v1/groups/g/members/b/leave"]


class TestJoin:
    def test_a_join_is_retried_once_with_the_same_request(
        self, client: volcano.Client, fake_api: FakeApi
    ) -> None:
        """A 503 is retried once: same request id, same owner token, same body."""
        fake_api.then(error(503, "unavailable"))
        membership = client.groups.join("g", "m", ttl=30, capabilities={"port": 80})
        first, second = [r for r in fake_api.requests if r.url.path.endswith("/join")]
        assert first.headers["X-Request-Id"] == second.headers["X-Request-Id"]
        assert first.content == second.content
        assert json.loads(first.content)["capabilities"] == {"json": {"port": 80}}
        assert membership.owner_token == json.loads(first.content)["owner_token"]

    def test_bytes_go_as_base64(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """Bytes capabilities are sent as `{base64}`, any bytes-like object as bytes."""
        client.groups.join("g", "m", ttl=timedelta(seconds=5), capabilities=bytearray(b"\x00\xff"))
        (join,) = [r for r in fake_api.requests if r.url.path.endswith("/join")]
        sent = json.loads(join.content)
        assert sent["capabilities"] == {"base64": base64.b64encode(b"\x00\xff").decode()}
        assert sent["ttl_seconds"] == 5

    def test_a_membership_repr_hides_its_owner_token(self, client: volcano.Client) -> None:
        """A membership's repr never shows the owner token that proves it."""
        membership = client.groups.join("g", "m", ttl=30)
        assert membership.owner_token not in repr(membership)


class TestArguments:
    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda c: c.groups.create("a/b"), "group must be 1 to 240"),
            (lambda c: c.groups.create("g" * 241), "group must be 1 to 240"),
            (lambda c: c.groups.join("g", "m" * 201, ttl=1), "member must be 1 to 200"),
            (lambda c: c.groups.join("g", "m", ttl=0), "ttl must be"),
            (lambda c: c.groups.join("g", "m", ttl=1, capabilities=object()), "bytes or a JSON"),
            (lambda c: c.groups.join("g", "m", ttl=1, capabilities=float("nan")), "JSON value"),
            (
                lambda c: c.groups.join("g", "m", ttl=1, capabilities=b"x" * 65_539),
                "at most 65538 bytes; these are 65539 bytes of bytes",
            ),
            (
                lambda c: c.groups.join("g", "m", ttl=1, capabilities="é" * 32_769),
                "these are 65540 bytes of JSON",  # 2 bytes each, and two quotes
            ),
            (lambda c: c.groups.renew("not a membership"), "must be a volcano.Membership"),
            (lambda c: c.groups.members("g", page_size=501), "page_size"),
        ],
    )
    def test_refused_before_sending(
        self, client: volcano.Client, fake_api: FakeApi, call: Any, message: str
    ) -> None:
        """A bad argument is an InvalidArgumentError naming it, and nothing is sent."""
        with pytest.raises(volcano.InvalidArgumentError, match=message):
            call(client)  # an iterator (members) checks its arguments when made
        assert fake_api.requests == []

    def test_the_bound_is_exact(self, client: volcano.Client, fake_api: FakeApi) -> None:
        """65,538 bytes of capabilities are sent, in either form."""
        client.groups.join("g", "b", ttl=1, capabilities=b"x" * 65_538)
        client.groups.join("g", "j", ttl=1, capabilities="x" * 65_536)
        assert len(fake_api.requests) == 2


class TestErrors:
    @pytest.mark.parametrize(
        ("status", "code", "error_class"),
        [
            (404, "group_not_found", volcano.GroupNotFoundError),
            (404, "member_not_found", volcano.MemberNotFoundError),
            (404, "not_found", volcano.NotFoundError),
            (409, "group_exists", volcano.GroupExistsError),
            (409, "group_not_empty", volcano.GroupNotEmptyError),
            (409, "member_exists", volcano.MemberExistsError),
        ],
    )
    def test_each_code_has_its_error(
        self, sdk: Sdk, fake_api: FakeApi, status: int, code: str, error_class: type[Exception]
    ) -> None:
        """The group errors are chosen by status and code, and keep their parents' classes."""
        fake_api.then(error(status, code))
        with pytest.raises(error_class) as raised:
            sdk.groups("create", "g")
        assert isinstance(raised.value, volcano.NotFoundError | volcano.ConflictError)
        assert raised.value.code == code
