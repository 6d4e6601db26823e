"""The group rules as pure decisions (volcano_server.groups._rules): plain values, no storage."""

from __future__ import annotations

import base64
from typing import Any

import attrs
import pytest

from volcano_server.groups._rules import (
    MAX_CAPABILITY_BYTES,
    GroupDecision,
    decide_create,
    decide_delete,
    decide_join,
    decide_leave,
    decide_remove,
    decide_renew,
    decide_update,
    group_state,
    member_view,
    shown_capabilities,
    stored_capabilities,
)
from volcano_server.storage._groups import CapabilityBytes, GroupCounts, GroupRow, Member
from volcano_server.wire._errors import ApiError

NOW = 1_000_000_000_000
OWNER = "0F8FAD5B-D9CB-469F-A165-70867728950E"
OTHER = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
LIVE = GroupRow(1, "workers", fencing_token=4, version=9, live=True)


def member(
    *,
    owner: str = OWNER,
    token: int = 4,
    left_us: int = 5_000_000,
    caps: dict[str, Any] | None = None,
) -> Member:
    return Member("w1", owner, token, NOW + left_us, 10.0, stored_capabilities(caps), NOW - 1)


def join(
    row: GroupRow | None,
    existing: Member | None,
    *,
    owner: str = OWNER,
    caps: dict[str, Any] | None = None,
) -> GroupDecision:
    return decide_join(
        row,
        existing,
        NOW,
        group="workers",
        member="w1",
        owner_token=owner,
        ttl=10.0,
        capabilities=stored_capabilities(caps),
    )


class TestCreate:
    def test_a_new_group_is_version_one(self) -> None:
        """A group never created is created empty, at version 1, with no fencing token yet."""
        decision = decide_create(None, project_id=1, group="workers")
        assert decision.status == 201
        assert decision.group == GroupRow(1, "workers", 0, 1, True)
        assert decision.payload == {
            "group": "workers",
            "version": 1,
            "fencing_token": None,
            "members": 0,
        }

    def test_an_existing_group_is_refused(self) -> None:
        """Creating a group that exists is 409 group_exists and changes nothing."""
        decision = decide_create(LIVE, project_id=1, group="workers")
        assert decision.refusal is not None
        assert (decision.status, decision.refusal.code) == (409, "group_exists")
        assert decision.group is None

    def test_a_deleted_group_goes_on_where_it_was(self) -> None:
        """A group created again keeps its version and its fencing tokens going up."""
        deleted = attrs.evolve(LIVE, live=False)
        decision = decide_create(deleted, project_id=1, group="workers")
        assert decision.group == GroupRow(1, "workers", 4, 10, True)


class TestDelete:
    def test_a_live_member_refuses_it(self) -> None:
        """A group with a live member is 409 group_not_empty, naming how many."""
        decision = decide_delete(LIVE, GroupCounts(live=2), group="workers")
        assert decision.refusal is not None
        assert decision.refusal.code == "group_not_empty"
        assert "2 live members" in decision.refusal.message

    def test_expired_members_go_with_it(self) -> None:
        """Only expired members: deleted, the version moved past their expiries and the delete."""
        decision = decide_delete(LIVE, GroupCounts(expired=3), group="workers")
        assert decision.status == 204
        assert decision.group == attrs.evolve(LIVE, version=9 + 3 + 1, live=False)

    @pytest.mark.parametrize("row", [None, attrs.evolve(LIVE, live=False)])
    def test_a_missing_group_is_not_found(self, row: GroupRow | None) -> None:
        """A group never created, or deleted, is 404 group_not_found."""
        decision = decide_delete(row, GroupCounts(), group="workers")
        assert decision.refusal is not None
        assert (decision.status, decision.refusal.code) == (404, "group_not_found")


class TestJoin:
    def test_a_new_member_takes_the_next_token(self) -> None:
        """A new member gets the group's next fencing token; the version moves by one."""
        decision = join(LIVE, None, caps={"json": {"port": 80}})
        assert decision.status == 200
        assert decision.member is not None
        assert decision.member.fencing_token == 5
        assert decision.member.expires_at_us == NOW + 10_000_000
        assert decision.group == attrs.evolve(LIVE, fencing_token=5, version=10)
        assert decision.payload is not None
        assert decision.payload["owner_token"] == OWNER

    def test_another_owner_of_a_live_member_is_refused(self) -> None:
        """A live member's name is its holder's: 409 member_exists with Retry-After."""
        decision = join(LIVE, member(left_us=2_500_000), owner=OTHER)
        assert decision.refusal is not None
        assert decision.refusal.code == "member_exists"
        assert decision.refusal.retry_after == 3
        assert decision.group is None
        assert decision.member is None

    def test_the_holder_gets_its_membership_back(self) -> None:
        """The same owner token joining again keeps its token, with a new expiry."""
        decision = join(LIVE, member())
        assert decision.member is not None
        assert decision.member.fencing_token == 4
        assert decision.member.expires_at_us == NOW + 10_000_000
        assert decision.group is None  # nothing the watchers see changed

    def test_the_holder_joining_with_new_capabilities_moves_the_version(self) -> None:
        """Capabilities replaced by a repeated join are a change of the group."""
        decision = join(LIVE, member(caps={"json": 1}), caps={"json": 2})
        assert decision.group == attrs.evolve(LIVE, version=10)

    def test_an_expired_member_is_replaced(self) -> None:
        """An expired member's name is free: a new token, its expiry saved too (two moves)."""
        decision = join(LIVE, member(owner=OTHER, left_us=-1))
        assert decision.member is not None
        assert decision.member.fencing_token == 5
        assert decision.group == attrs.evolve(LIVE, fencing_token=5, version=11)

    def test_a_missing_group_is_not_found(self) -> None:
        """Joining a group that does not exist is 404 group_not_found."""
        decision = join(None, None)
        assert decision.refusal is not None
        assert decision.refusal.code == "group_not_found"


class TestRenewUpdateLeave:
    @pytest.mark.parametrize(
        ("existing", "why"),
        [
            (None, "it has not joined"),
            (member(left_us=0), "expired"),
            (member(token=3), "fencing token 3"),
            (member(owner=OTHER), "owner token does not match"),
        ],
    )
    def test_only_the_matching_live_member(self, existing: Member | None, why: str) -> None:
        """Renew, update and leave act on the live member with both tokens: else 409."""
        for decision in (
            decide_renew(
                LIVE,
                existing,
                NOW,
                group="workers",
                member="w1",
                owner_token=OWNER,
                fencing_token=4,
                ttl=5.0,
            ),
            decide_update(
                LIVE,
                existing,
                NOW,
                group="workers",
                member="w1",
                owner_token=OWNER,
                fencing_token=4,
                capabilities=None,
            ),
            decide_leave(
                LIVE,
                existing,
                NOW,
                group="workers",
                member="w1",
                owner_token=OWNER,
                fencing_token=4,
            ),
        ):
            assert decision.refusal is not None
            assert decision.refusal.code == "lease_not_held"
            assert why in decision.refusal.message

    def test_a_renewal_moves_only_the_expiry(self) -> None:
        """A renewal keeps the token and capabilities; the group's version stays."""
        decision = decide_renew(
            LIVE,
            member(caps={"json": "x"}),
            NOW,
            group="workers",
            member="w1",
            owner_token=OWNER,
            fencing_token=4,
            ttl=30.0,
        )
        assert decision.renewal
        assert decision.member is not None
        assert decision.member.expires_at_us == NOW + 30_000_000
        assert decision.member.capabilities == CapabilityBytes("json", b'"x"')
        assert decision.group is None

    def test_new_capabilities_move_the_version_same_ones_do_not(self) -> None:
        """Changing capabilities is a change of the group; sending the same is none."""
        existing = member(caps={"json": [1]})

        def update(caps: dict[str, Any] | None) -> GroupDecision:
            return decide_update(
                LIVE,
                existing,
                NOW,
                group="workers",
                member="w1",
                owner_token=OWNER,
                fencing_token=4,
                capabilities=stored_capabilities(caps),
            )

        same, other = update({"json": [1]}), update(None)
        assert same.group is None
        assert same.member is None
        assert other.group == attrs.evolve(LIVE, version=10)

    def test_leaving_removes_the_member(self) -> None:
        """A leave deletes the member's row and moves the version."""
        decision = decide_leave(
            LIVE, member(), NOW, group="workers", member="w1", owner_token=OWNER, fencing_token=4
        )
        assert (decision.status, decision.gone) == (204, "w1")
        assert decision.group == attrs.evolve(LIVE, version=10)


class TestRemove:
    def test_a_live_member_is_removed_whoever_holds_it(self) -> None:
        """Removal needs no owner token, and says which fencing token it ended."""
        decision = decide_remove(LIVE, member(owner=OTHER), NOW, group="workers", member="w1")
        assert decision.payload == {
            "group": "workers",
            "member": "w1",
            "removed": True,
            "fencing_token": 4,
        }
        assert decision.gone == "w1"

    def test_an_expired_row_goes_without_being_called_removed(self) -> None:
        """An expired member's row is deleted (its expiry saved), and `removed` is false."""
        decision = decide_remove(LIVE, member(left_us=-5), NOW, group="workers", member="w1")
        assert decision.payload is not None
        assert decision.payload["removed"] is False
        assert decision.gone == "w1"
        assert decision.group == attrs.evolve(LIVE, version=10)

    def test_nothing_to_remove_changes_nothing(self) -> None:
        """No such member: 200, removed false, nothing written."""
        decision = decide_remove(LIVE, None, NOW, group="workers", member="w1")
        assert decision.status == 200
        assert decision.group is None
        assert decision.gone is None


class TestCapabilities:
    def test_json_is_stored_compactly_and_shown_as_given(self) -> None:
        """JSON capabilities are stored as compact UTF-8 and shown back as the same value."""
        stored = stored_capabilities({"json": {"host": "é", "ports": [1, 2]}})
        assert stored == CapabilityBytes("json", '{"host":"é","ports":[1,2]}'.encode())
        assert shown_capabilities(stored) == {"json": {"host": "é", "ports": [1, 2]}}

    def test_bytes_are_stored_as_bytes_and_shown_in_base64(self) -> None:
        """Bytes are decoded from base64 when stored and encoded again when shown."""
        stored = stored_capabilities({"base64": base64.b64encode(b"\x00\xff").decode()})
        assert stored == CapabilityBytes("bytes", b"\x00\xff")
        assert shown_capabilities(stored) == {"base64": "AP8="}

    def test_the_bound_is_exact(self) -> None:
        """65,538 bytes are taken, in either form; one more is 422 naming the field."""
        most = b"x" * MAX_CAPABILITY_BYTES
        assert stored_capabilities({"base64": base64.b64encode(most).decode()}) is not None
        assert stored_capabilities({"json": "x" * (MAX_CAPABILITY_BYTES - 2)}) is not None
        for too_many, field in (
            ({"base64": base64.b64encode(most + b"x").decode()}, "base64"),
            ({"json": "x" * (MAX_CAPABILITY_BYTES - 1)}, "json"),
        ):
            with pytest.raises(ApiError, match=f"capabilities.{field}: holds 65539 bytes"):
                stored_capabilities(too_many)

    def test_none_is_none(self) -> None:
        """No capabilities are stored and shown as none."""
        assert stored_capabilities(None) is None
        assert shown_capabilities(None) is None


class TestViews:
    def test_a_group_counts_its_expired_members_in_its_version(self) -> None:
        """A group's version is its saved changes plus the members expired since."""
        state = group_state(LIVE, GroupCounts(live=2, expired=3))
        assert state == {"group": "workers", "version": 12, "fencing_token": 4, "members": 2}

    def test_a_member_is_shown_without_its_owner_token(self) -> None:
        """Anyone may see a member: never its owner token."""
        view = member_view(member(caps={"json": True}))
        assert OWNER not in str(view)
        assert view["capabilities"] == {"json": True}
