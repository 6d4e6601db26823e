"""The group rules as pure decisions over a group's row, one member's row and the storage clock.

Each function takes what a transaction loaded (the group's row, or None for a group never
created; the member's row, or None) and `now` in microseconds of the storage clock, and returns
a `GroupDecision`: what to save and what to answer. `_group_transactions` runs them inside
transactions; the tests run them with plain values.

A member is a lease on its group: it joins with an owner token and a ttl, and gets the group's
next fencing token (tokens of one group never repeat, not across a delete and a new create).
It is live while `now` is before its expiry; renewing moves the expiry; it leaves, is removed,
or expires. A live member's name is its holder's alone: another owner token joining under it
is refused, the same owner token joining again gets the same membership back (a retry).

A group's version counts the changes of its membership (`GroupRow.version`, saved) plus its
stored members that have expired since (`GroupCounts.expired`), so an expiry moves it with no
write: a decision that deletes an expired member's row adds one to the saved version for it,
and one that changes a live member (joins, leaves, is removed, changes its capabilities) one
more. Creating and deleting the group move it by one each.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

import attrs

from ..storage._groups import CapabilityBytes, GroupCounts, GroupRow, Member
from ..wire._errors import ApiError
from ..wire._wire import dumps, rfc3339_us

__all__ = [
    "MAX_CAPABILITY_BYTES",
    "GroupDecision",
    "decide_create",
    "decide_delete",
    "decide_join",
    "decide_leave",
    "decide_remove",
    "decide_renew",
    "decide_update",
    "group_not_found",
    "group_state",
    "member_not_found",
    "member_view",
    "membership_payload",
    "shown_capabilities",
    "stored_capabilities",
]

MAX_CAPABILITY_BYTES = 65_538
"""The most bytes a member's capabilities may hold (JSON written compactly, or raw bytes).

64 KiB, rounded up to what the spec's 87,384 characters of base64 hold (21,846 groups of three
bytes): every base64 string the schema takes is then a size taken here.
"""
_MAX_FENCING_TOKEN = 2**53 - 1


@attrs.frozen
class GroupDecision:
    """What an operation does to a group and one of its members, and what it answers."""

    status: int
    payload: dict[str, Any] | None = None  # the 2xx body
    refusal: ApiError | None = None  # the 4xx, rendered like every other error
    group: GroupRow | None = None  # the group's row to save (None: unchanged)
    member: Member | None = None  # the member's row to write (None: unchanged)
    renewal: bool = False  # `member` only has a new expiry: write just that
    gone: str | None = None  # the member whose row to delete
    lease: Member | None = None  # the membership a 200 tells of

    @property
    def refused(self) -> bool:
        """Whether the operation was refused (it changes nothing then)."""
        return self.refusal is not None


def _refuse(error: ApiError) -> GroupDecision:
    return GroupDecision(error.status, refusal=error)


# -- errors ------------------------------------------------------------------------------------


def group_not_found(group: str) -> ApiError:
    """404 group_not_found: the group was never created, or was deleted."""
    return ApiError(
        404, "group_not_found", f"there is no group {group} in this project (create it first)"
    )


def member_not_found(group: str, member: str) -> ApiError:
    """404 member_not_found: the member has not joined, or left, was removed or expired."""
    return ApiError(404, "member_not_found", f"{member} is not a member of {group}")


def _group_exists(group: str) -> ApiError:
    return ApiError(409, "group_exists", f"the group {group} exists already")


def _group_not_empty(group: str, live: int) -> ApiError:
    members = "1 live member" if live == 1 else f"{live} live members"
    return ApiError(
        409,
        "group_not_empty",
        f"the group {group} has {members}; they leave (or are removed, or expire) before it"
        " can be deleted",
    )


def _member_exists(group: str, member: Member, now: int) -> ApiError:
    wait = max(1, math.ceil((member.expires_at_us - now) / 1_000_000))
    return ApiError(
        409,
        "member_exists",
        f"{member.name} is a member of {group} under another owner token for up to {wait} more"
        " seconds",
        retry_after=wait,
    )


def _not_held(
    group: str, name: str, member: Member | None, now: int, fencing_token: int
) -> ApiError:
    if member is None:
        why = "it has not joined"
    elif not member.live(now):
        why = "its membership expired"
    elif member.fencing_token != fencing_token:
        why = f"it is a member under fencing token {member.fencing_token}"
    else:
        why = "the owner token does not match"
    return ApiError.lease_not_held(
        f"no live membership of {name} in {group} matches this owner token and fencing token"
        f" {fencing_token}: {why}"
    )


# -- capabilities ------------------------------------------------------------------------------


def stored_capabilities(given: dict[str, Any] | None) -> CapabilityBytes | None:
    """Capabilities as a request gave them (`{json}`, `{base64}` or None), as stored.

    Raises:
        ApiError: 422 when they hold more than `MAX_CAPABILITY_BYTES`.
    """
    if given is None:
        return None
    if "base64" in given:
        try:
            data = base64.b64decode(given["base64"], validate=True)
        except (binascii.Error, ValueError):  # the schema's pattern lets only base64 through
            raise ApiError.validation("capabilities.base64: is not standard base64") from None
        stored = CapabilityBytes("bytes", data)
    else:
        stored = CapabilityBytes("json", dumps(given["json"]))
    if len(stored.data) > MAX_CAPABILITY_BYTES:
        field = "base64" if stored.kind == "bytes" else "json"
        raise ApiError.validation(
            f"capabilities.{field}: holds {len(stored.data)} bytes; capabilities hold at most"
            f" {MAX_CAPABILITY_BYTES}"
        )
    return stored


def shown_capabilities(stored: CapabilityBytes | None) -> dict[str, Any] | None:
    """Capabilities as an answer shows them: as they were given."""
    if stored is None:
        return None
    if stored.kind == "bytes":
        return {"base64": base64.b64encode(stored.data).decode("ascii")}
    return {"json": json.loads(stored.data)}


# -- what answers show -------------------------------------------------------------------------


def group_state(row: GroupRow, counts: GroupCounts) -> dict[str, Any]:
    """The public view of an existing group."""
    return {
        "group": row.name,
        "version": row.version + counts.expired,
        "fencing_token": row.fencing_token or None,
        "members": counts.live,
    }


def membership_payload(group: str, member: Member) -> dict[str, Any]:
    """The Membership body of a live member: its holder's lease."""
    return {
        "group": group,
        "member": member.name,
        "owner_token": member.owner_token,
        "fencing_token": member.fencing_token,
        "expires_at": rfc3339_us(member.expires_at_us),
        "ttl_seconds": member.ttl_seconds,
    }


def member_view(member: Member) -> dict[str, Any]:
    """The GroupMember body: a member as anyone may see it, never its owner token."""
    return {
        "member": member.name,
        "fencing_token": member.fencing_token,
        "expires_at": rfc3339_us(member.expires_at_us),
        "capabilities": shown_capabilities(member.capabilities),
    }


# -- decisions ---------------------------------------------------------------------------------


def decide_create(row: GroupRow | None, *, project_id: int, group: str) -> GroupDecision:
    """Create the group: 409 group_exists while it exists; else it exists from now on.

    A group deleted before goes on with its version and its fencing tokens.
    """
    if row is not None and row.live:
        return _refuse(_group_exists(group))
    before = row if row is not None else GroupRow(project_id, group)
    created = attrs.evolve(before, version=before.version + 1, live=True)
    return GroupDecision(201, payload=group_state(created, GroupCounts()), group=created)


def decide_delete(row: GroupRow | None, counts: GroupCounts, *, group: str) -> GroupDecision:
    """Delete the group, with its expired members: 409 group_not_empty while one is live."""
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    if counts.live:
        return _refuse(_group_not_empty(group, counts.live))
    deleted = attrs.evolve(row, version=row.version + counts.expired + 1, live=False)
    return GroupDecision(204, group=deleted)


def decide_join(
    row: GroupRow | None,
    existing: Member | None,
    now: int,
    *,
    group: str,
    member: str,
    owner_token: str,
    ttl: float,
    capabilities: CapabilityBytes | None,
) -> GroupDecision:
    """Join the group as `member`, or join again as its live holder (a retry).

    The holder's own live membership comes back with a new expiry and these capabilities;
    another owner's is 409 member_exists; otherwise the group's next fencing token.
    """
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    until = now + _micros(ttl)
    if existing is not None and existing.live(now):
        if existing.owner_token != owner_token:
            return _refuse(_member_exists(group, existing, now))
        kept = attrs.evolve(
            existing, expires_at_us=until, ttl_seconds=ttl, capabilities=capabilities
        )
        moved = kept.capabilities != existing.capabilities
        changed = attrs.evolve(row, version=row.version + 1) if moved else None
        return GroupDecision(
            200, payload=membership_payload(group, kept), group=changed, member=kept, lease=kept
        )
    if row.fencing_token >= _MAX_FENCING_TOKEN:  # 2^53 joins of one group: unreachable
        raise RuntimeError(f"fencing tokens of group {group!r} are exhausted")
    token = row.fencing_token + 1
    joined = Member(member, owner_token, token, until, ttl, capabilities, granted_at_us=now)
    moves = 2 if existing is not None else 1  # an expired row replaced: its expiry is saved
    grown = attrs.evolve(row, fencing_token=token, version=row.version + moves)
    return GroupDecision(
        200, payload=membership_payload(group, joined), group=grown, member=joined, lease=joined
    )


def _matching(
    existing: Member | None, now: int, owner_token: str, fencing_token: int
) -> Member | None:
    if (
        existing is not None
        and existing.live(now)
        and existing.owner_token == owner_token
        and existing.fencing_token == fencing_token
    ):
        return existing
    return None


def decide_renew(
    row: GroupRow | None,
    existing: Member | None,
    now: int,
    *,
    group: str,
    member: str,
    owner_token: str,
    fencing_token: int,
    ttl: float,
) -> GroupDecision:
    """The matching live membership gets a new expiry; the group's version stays."""
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    held = _matching(existing, now, owner_token, fencing_token)
    if held is None:
        return _refuse(_not_held(group, member, existing, now, fencing_token))
    renewed = attrs.evolve(held, expires_at_us=now + _micros(ttl), ttl_seconds=ttl)
    return GroupDecision(
        200,
        payload=membership_payload(group, renewed),
        member=renewed,
        renewal=True,
        lease=renewed,
    )


def decide_update(
    row: GroupRow | None,
    existing: Member | None,
    now: int,
    *,
    group: str,
    member: str,
    owner_token: str,
    fencing_token: int,
    capabilities: CapabilityBytes | None,
) -> GroupDecision:
    """The matching live membership gets these capabilities; a change moves the version."""
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    held = _matching(existing, now, owner_token, fencing_token)
    if held is None:
        return _refuse(_not_held(group, member, existing, now, fencing_token))
    updated = attrs.evolve(held, capabilities=capabilities)
    if updated == held:
        return GroupDecision(200, payload=membership_payload(group, held), lease=held)
    return GroupDecision(
        200,
        payload=membership_payload(group, updated),
        group=attrs.evolve(row, version=row.version + 1),
        member=updated,
        lease=updated,
    )


def decide_leave(
    row: GroupRow | None,
    existing: Member | None,
    now: int,
    *,
    group: str,
    member: str,
    owner_token: str,
    fencing_token: int,
) -> GroupDecision:
    """The matching live membership ends: the member leaves the group."""
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    held = _matching(existing, now, owner_token, fencing_token)
    if held is None:
        return _refuse(_not_held(group, member, existing, now, fencing_token))
    return GroupDecision(204, group=attrs.evolve(row, version=row.version + 1), gone=member)


def decide_remove(
    row: GroupRow | None, existing: Member | None, now: int, *, group: str, member: str
) -> GroupDecision:
    """The member's live membership ends, whoever holds it; an expired row goes too."""
    if row is None or not row.live:
        return _refuse(group_not_found(group))
    payload: dict[str, Any] = {
        "group": group,
        "member": member,
        "removed": False,
        "fencing_token": None,
    }
    if existing is None:
        return GroupDecision(200, payload=payload)
    if existing.live(now):
        payload.update(removed=True, fencing_token=existing.fencing_token)
    # Live: one change; expired: its expiry, counted until now, is saved as one.
    return GroupDecision(
        200, payload=payload, group=attrs.evolve(row, version=row.version + 1), gone=member
    )


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)
