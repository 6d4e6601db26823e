"""`client.groups` against the real server, both clients (one test body each), both backends.

The clients send through the test `wire` (every exchange recorded; answers lost or
connections refused on demand) and every answer is checked against openapi.yaml. A second
party speaks raw HTTP with the same keys to act behind the SDK's back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import volcano
from tests.conftest import LiveServer
from tests.integration.sdk.conftest import Wire
from tests.support.raw import wait_for
from tests.support.sdk import PATIENCE, Sdk


@pytest.fixture
def group(sdk: Sdk) -> str:
    """A group no other test uses, created."""
    name = f"g-{uuid.uuid4().hex[:12]}"
    sdk.groups("create", name)
    return name


def remove(live_server: LiveServer, group: str, member: str) -> None:
    """Remove a member behind the SDK's back."""
    with live_server.http(live_server.project) as http:
        assert http.delete(f"/v1/groups/{group}/members/{member}").json()["removed"]


class TestGroups:
    def test_a_groups_life(self, sdk: Sdk) -> None:
        """Create, read, list and delete: a deleted group is GroupNotFoundError."""
        name = f"g-{uuid.uuid4().hex[:12]}"
        created = sdk.groups("create", name)
        assert (created.group, created.version, created.members) == (name, 1, 0)
        assert sdk.groups("get", name) == created
        assert [state.group for state in sdk.listed_groups(name)] == [name]
        sdk.groups("delete", name)
        with pytest.raises(volcano.GroupNotFoundError):
            sdk.groups("get", name)

    def test_refusals_are_their_errors(self, sdk: Sdk, group: str) -> None:
        """An existing group, a group with a member, a member name held by another."""
        with pytest.raises(volcano.GroupExistsError):
            sdk.groups("create", group)
        sdk.groups("join", group, "m", ttl=30)
        with pytest.raises(volcano.GroupNotEmptyError):
            sdk.groups("delete", group)
        with pytest.raises(volcano.MemberExistsError) as raised:
            sdk.groups("join", group, "m", ttl=30)
        assert raised.value.retry_after is not None
        with pytest.raises(volcano.GroupNotFoundError):
            sdk.groups("join", "never-made", "m", ttl=30)


class TestMembers:
    @pytest.mark.parametrize(
        "capabilities", [b"\x00\x01\xff", {"host": "10.0.0.7", "ports": [80]}, "text", None]
    )
    def test_capabilities_come_back_as_given(self, sdk: Sdk, group: str, capabilities: Any) -> None:
        """Bytes and JSON values are read back as they were announced (None: none)."""
        sdk.groups("join", group, "m", ttl=30, capabilities=capabilities)
        assert sdk.groups("member", group, "m").capabilities == capabilities
        (listed,) = sdk.members(group)
        assert listed.capabilities == capabilities

    def test_renew_update_and_leave(self, sdk: Sdk, group: str) -> None:
        """A membership is renewed (same token, later expiry), updated, then leaves; after
        that it is LeaseNotHeldError and the member MemberNotFoundError."""
        joined = sdk.groups("join", group, "m", ttl=5)
        renewed = sdk.groups("renew", joined, ttl=60)
        assert (renewed.fencing_token, renewed.expires_at > joined.expires_at) == (
            joined.fencing_token,
            True,
        )
        sdk.groups("update", renewed, {"load": 1})
        assert sdk.groups("member", group, "m").capabilities == {"load": 1}
        sdk.groups("leave", renewed)
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.groups("renew", renewed)
        with pytest.raises(volcano.MemberNotFoundError):
            sdk.groups("member", group, "m")

    def test_a_lost_answer_to_a_join_is_recovered(self, sdk: Sdk, wire: Wire, group: str) -> None:
        """The join's answer is lost: the one retry (same request id) gets the membership
        the server made, not a MemberExistsError."""
        wire.lose = ["join"]
        membership = sdk.groups("join", group, "m", ttl=30)
        first, second = wire.of("join")
        assert first.request.headers["X-Request-Id"] == second.request.headers["X-Request-Id"]
        assert second.headers is not None
        assert second.headers["Idempotent-Replayed"] == "true"
        assert sdk.groups("member", group, "m").fencing_token == membership.fencing_token

    def test_removal_needs_no_owner_token(self, sdk: Sdk, group: str) -> None:
        """remove ends a member whoever holds it; removing nothing is not an error."""
        joined = sdk.groups("join", group, "m", ttl=30)
        removal = sdk.groups("remove", group, "m")
        assert (removal.removed, removal.fencing_token) == (True, joined.fencing_token)
        assert sdk.groups("remove", group, "m").removed is False


class TestMembershipGuard:
    def test_renewed_past_its_ttl(self, sdk: Sdk, wire: Wire, group: str) -> None:
        """Held with ttl=1: the renewal loop renews it (more than one ttl passes), and exit
        leaves the group."""
        with sdk.membership(group, "m", ttl=1) as held:
            wait_for(lambda: len(wire.of("renew")) >= 3, "three renewals")
            assert sdk.read(lambda: held.state) is volcano.GuardState.HELD
            assert sdk.groups("get", group).members == 1
        assert sdk.read(lambda: held.state) is volcano.GuardState.RELEASED
        assert sdk.groups("get", group).members == 0

    def test_removed_it_is_lost(self, sdk: Sdk, live_server: LiveServer, group: str) -> None:
        """Removed behind its back, the next renewal is refused: the guard is LOST, told to
        on_lost, and leaving sends nothing."""
        lost: list[volcano.Error] = []
        with sdk.membership(group, "m", ttl=1, on_lost=lost.append) as held:
            remove(live_server, group, "m")
            assert sdk.wait_lost(held, PATIENCE)
            with pytest.raises(volcano.LockLostError):
                sdk.read(held.check)
        assert isinstance(lost[0], volcano.LeaseNotHeldError)

    def test_renewals_cut_off_end_it_at_its_deadline(
        self, sdk: Sdk, wire: Wire, group: str
    ) -> None:
        """Renewals that never reach the server (refused connections): the membership goes at
        risk, then is lost at its deadline by the client's own clock, told to on_at_risk and
        on_lost; the server lets the member expire, and exit sends no leave."""
        told: list[volcano.Error] = []
        with sdk.membership(group, "m", ttl=1, on_at_risk=told.append, on_lost=told.append) as held:
            wire.refuse = {"renew"}
            assert sdk.wait_lost(held, PATIENCE)
        assert [type(error) for error in told] == [
            volcano.APIConnectionError,
            volcano.LockLostError,
        ]
        assert wire.of("leave") == []
        wait_for(lambda: sdk.groups("get", group).members == 0, "the member expired")

    def test_update_announces_new_capabilities(self, sdk: Sdk, group: str) -> None:
        """A held membership announces new capabilities; its expiry stays its own."""
        with sdk.membership(group, "m", ttl=30, capabilities={"v": 1}) as held:
            sdk.update(held, {"v": 2})
            assert sdk.groups("member", group, "m").capabilities == {"v": 2}

    def test_a_batch_renews_memberships_together(
        self, make_sdk: Callable[..., Sdk], wire: Wire, group: str
    ) -> None:
        """Two memberships of one client, renewed side by side, end up in one POST
        /v1/members/renew: the batch carries both."""
        sdk = make_sdk()
        with sdk.membership(group, "a", ttl=3), sdk.membership(group, "b", ttl=3):

            def batched() -> bool:
                return any(
                    e.request.url.path == "/v1/members/renew"
                    and len(json.loads(e.request.content)["memberships"]) == 2
                    for e in wire.exchanges
                )

            wait_for(batched, "a batch of two memberships", timeout=20)


class TestWatchAndLeaders:
    def test_a_watch_hears_a_join_and_ends_at_the_delete(self, sdk: Sdk, group: str) -> None:
        """The watch's first state is now; a join is the next; a delete ends it with
        GroupNotFoundError."""
        states = sdk.watch_group(group)
        first = states.next()
        joined = sdk.groups("join", group, "m", ttl=30)
        after = states.next()
        assert (after.members, after.version > first.version) == (1, True)
        sdk.groups("leave", joined)
        assert states.next().members == 0
        sdk.groups("delete", group)
        with pytest.raises(volcano.GroupNotFoundError):
            states.next()
        states.close()

    def test_a_member_leads_and_others_see_it(self, sdk: Sdk, group: str) -> None:
        """A campaign as a member: leader() names it by its member name and term; another
        campaign that does not wait is LockHeldError."""
        assert sdk.groups("leader", group) is None
        with sdk.entered(sdk.client.groups.campaign(group, "m1", ttl=10)) as leadership:
            assert sdk.groups("leader", group) == (leadership.label, leadership.term)
            assert leadership.label == "m1"
            with pytest.raises(volcano.LockHeldError):
                sdk.enter(sdk.client.groups.campaign(group, "m2", ttl=10, wait=0))
        assert sdk.groups("leader", group) is None
        assert volcano.Groups.election_key(group) == f"groups:{group}"
