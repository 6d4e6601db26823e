"""The group operations at the seam: their `Call`s, and reading their answers as SDK values.

Like the lock operations (`_operations`, `_reading`): each request is a frozen `Call` through
the generated `*_detailed` functions (the spec's `groups` tag), and each success body is
checked field by field into the SDK's own values, a body that breaks the spec being an
`UnexpectedResponseError`. Capabilities go out as `{json}` for a JSON value and `{base64}` for
bytes, and come back as what was given.
"""

from __future__ import annotations

import base64
import binascii
import functools
from typing import TYPE_CHECKING, Any

import attrs

from .._exceptions import APIStatusError, UnexpectedResponseError, status_error
from .._group_models import GroupMember, GroupState, MemberRemoval, Membership
from . import _reading
from ._operations import Call, Operation
from ._reading import SpecMismatchError, models

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "GroupPage",
    "MemberPage",
    "RenewedMembership",
    "create_group",
    "delete_group",
    "get_group",
    "get_member",
    "join",
    "leave",
    "list_groups",
    "list_members",
    "membership_renewals",
    "remove_member",
    "renew_membership",
    "update_capabilities",
    "watch_group",
]

CREATE = Operation("create_group", "create_group", 201, "groups")
DELETE = Operation("delete_group", "delete_group", 204, "groups")
GET = Operation("get_group", "get_group", 200, "groups")
WATCH = Operation("watch_group", "get_group", 200, "groups")
LIST = Operation("list_groups", "list_groups", 200, "groups")
MEMBERS = Operation("list_members", "list_members", 200, "groups")
MEMBER = Operation("get_member", "get_member", 200, "groups")
REMOVE = Operation("remove_member", "remove_member", 200, "groups")
JOIN = Operation("join", "join_group", 200, "groups")
RENEW = Operation("renew_membership", "renew_membership", 200, "groups")
RENEW_MANY = Operation("renew_memberships", "renew_memberships", 200, "groups")
UPDATE = Operation("update_capabilities", "update_capabilities", 200, "groups")
LEAVE = Operation("leave", "leave_group", 204, "groups")

RenewedMembership = Membership | APIStatusError
"""One membership's result in a batch renewal: renewed, or the refusal in its place."""


@attrs.frozen
class GroupPage:
    """One page of groups, and the `after` of the next page (or None)."""

    states: tuple[GroupState, ...]
    next_after: str | None


@attrs.frozen
class MemberPage:
    """One page of a group's members, the group's version when read, and the next `after`."""

    version: int
    members: tuple[GroupMember, ...]
    next_after: str | None


# -- requests ----------------------------------------------------------------------------------


def create_group(group: str, *, request_id: str) -> Call[GroupState]:
    """The request that creates `group`."""
    convert = functools.partial(_group, group=group)
    return Call(CREATE, group, request_id, {"group": group}, convert)


def delete_group(group: str, *, request_id: str) -> Call[None]:
    """The request that deletes `group`."""
    return Call(DELETE, group, request_id, {"group": group}, _reading.nothing)


def get_group(group: str, *, request_id: str) -> Call[GroupState]:
    """The request that reads `group`'s state."""
    return Call(GET, group, request_id, {"group": group}, functools.partial(_group, group=group))


def watch_group(
    group: str, *, after_version: int, wait: float, request_id: str
) -> Call[GroupState]:
    """The long poll that reads `group` once its version differs from `after_version`."""
    kwargs = {"group": group, "after_version": after_version, "wait_seconds": wait}
    return Call(WATCH, group, request_id, kwargs, functools.partial(_group, group=group))


def list_groups(*, prefix: str, after: str, limit: int, request_id: str) -> Call[GroupPage]:
    """The request for one page of the project's groups."""
    kwargs: dict[str, Any] = {"limit": limit}
    if prefix:
        kwargs["prefix"] = prefix
    if after:
        kwargs["after"] = after
    convert = functools.partial(_group_page, prefix=prefix, after=after)
    return Call(LIST, prefix or "*", request_id, kwargs, convert)


def list_members(group: str, *, after: str, limit: int, request_id: str) -> Call[MemberPage]:
    """The request for one page of `group`'s members."""
    kwargs: dict[str, Any] = {"group": group, "limit": limit}
    if after:
        kwargs["after"] = after
    convert = functools.partial(_member_page, group=group, after=after)
    return Call(MEMBERS, group, request_id, kwargs, convert)


def get_member(group: str, member: str, *, request_id: str) -> Call[GroupMember]:
    """The request that reads one member of `group`."""
    convert = functools.partial(_member_named, member=member)
    kwargs = {"group": group, "member": member}
    return Call(MEMBER, f"{member}@{group}", request_id, kwargs, convert)


def remove_member(group: str, member: str, *, request_id: str) -> Call[MemberRemoval]:
    """The request that removes a member, whoever holds it."""
    convert = functools.partial(_removal, group=group, member=member)
    kwargs = {"group": group, "member": member}
    return Call(REMOVE, f"{member}@{group}", request_id, kwargs, convert)


def join(
    group: str,
    member: str,
    *,
    owner_token: str,
    ttl: float,
    capabilities: Any,
    request_id: str,
) -> Call[Membership]:
    """The request that joins `group` as `member` (`capabilities`: bytes, JSON, or None)."""
    body = models().JoinRequest(owner_token=owner_token, ttl_seconds=ttl)
    if capabilities is not None:
        body.capabilities = _capabilities(capabilities)
    convert = functools.partial(_membership, group=group, member=member, owner_token=owner_token)
    kwargs = {"group": group, "member": member, "body": body}
    return Call(JOIN, f"{member}@{group}", request_id, kwargs, convert)


def renew_membership(membership: Membership, *, ttl: float, request_id: str) -> Call[Membership]:
    """The request that extends `membership` to `ttl` seconds from now."""
    body = models().RenewMembershipRequest(
        owner_token=membership.owner_token,
        fencing_token=membership.fencing_token,
        ttl_seconds=ttl,
    )
    return _about(RENEW, membership, body, request_id)


def update_capabilities(
    membership: Membership, capabilities: Any, *, request_id: str
) -> Call[Membership]:
    """The request that gives `membership` these capabilities (None: none)."""
    body = models().CapabilitiesRequest(
        owner_token=membership.owner_token,
        fencing_token=membership.fencing_token,
        capabilities=None if capabilities is None else _capabilities(capabilities),
    )
    return _about(UPDATE, membership, body, request_id)


def leave(membership: Membership, *, request_id: str) -> Call[None]:
    """The request that ends `membership`."""
    body = models().LeaveRequest(
        owner_token=membership.owner_token, fencing_token=membership.fencing_token
    )
    kwargs = {"group": membership.group, "member": membership.member, "body": body}
    subject = f"{membership.member}@{membership.group}"
    return Call(LEAVE, subject, request_id, kwargs, _reading.nothing)


def membership_renewals(
    memberships: Sequence[Membership], *, request_id: str
) -> Call[list[RenewedMembership]]:
    """The request that renews `memberships`, each for its own ttl, one result each.

    A plain renewal for one, a batch (`POST /v1/members/renew`) for more.
    """
    if len(memberships) == 1:
        (membership,) = memberships
        one = renew_membership(membership, ttl=membership.ttl_seconds, request_id=request_id)

        def convert(parsed: object) -> list[RenewedMembership]:
            return [one.convert(parsed)]

        return Call(one.operation, one.subject, one.request_id, one.kwargs, convert)
    made = models()
    body = made.RenewMembershipsRequest(
        memberships=[
            made.MembershipRenewal(
                group=m.group,
                member=m.member,
                owner_token=m.owner_token,
                fencing_token=m.fencing_token,
                ttl_seconds=m.ttl_seconds,
            )
            for m in memberships
        ]
    )
    convert_many = functools.partial(_renewals, sent=tuple(memberships), request_id=request_id)
    subject = f"{len(memberships)} memberships"
    return Call(RENEW_MANY, subject, request_id, {"body": body}, convert_many)


def _about(
    operation: Operation, membership: Membership, body: object, request_id: str
) -> Call[Membership]:
    convert = functools.partial(
        _membership,
        group=membership.group,
        member=membership.member,
        owner_token=membership.owner_token,
        fencing_token=membership.fencing_token,
    )
    kwargs = {"group": membership.group, "member": membership.member, "body": body}
    subject = f"{membership.member}@{membership.group}"
    return Call(operation, subject, request_id, kwargs, convert)


def _capabilities(value: Any) -> object:
    """Capabilities as the request body carries them: bytes as base64, anything else as JSON."""
    made = models().CapabilitiesType0()
    if isinstance(value, bytes):
        made.base64 = base64.b64encode(value).decode("ascii")
    else:
        made.json = value
    return made


# -- answers -----------------------------------------------------------------------------------


def _group(parsed: object, *, group: str) -> GroupState:
    """A GroupState body, which must be the state of `group`."""
    body = _reading._body(parsed, models().GroupState, "GroupState")
    made = GroupState(
        group=_reading._string(body.group, "group"),
        version=_reading._count(body.version, "version"),
        fencing_token=(
            None if body.fencing_token is None else _reading._fencing_token(body.fencing_token)
        ),
        members=_reading._count(body.members, "members"),
    )
    if made.group != group:
        raise SpecMismatchError(f"group {made.group!r} is not the group {group!r} asked for")
    return made


def _group_page(parsed: object, *, prefix: str, after: str) -> GroupPage:
    body = _reading._body(parsed, models().GroupList, "GroupList")
    states: list[GroupState] = []
    for item in body.groups:
        made = _group(item, group=_reading._string(getattr(item, "group", None), "group"))
        if not made.group.startswith(prefix) or made.group <= after:
            raise SpecMismatchError(f"group {made.group!r} is outside the page asked for")
        if states and made.group <= states[-1].group:
            raise SpecMismatchError("the groups are not in order")
        states.append(made)
    following = None if body.next_ is None else _reading._string(body.next_, "next")
    if following is not None and following <= after:
        raise SpecMismatchError(f"next {following!r} does not move past the page")
    return GroupPage(tuple(states), following)


def _member(parsed: object) -> GroupMember:
    body = _reading._body(parsed, models().GroupMember, "GroupMember")
    return GroupMember(
        member=_reading._string(body.member, "member"),
        fencing_token=_reading._fencing_token(body.fencing_token),
        expires_at=_reading._timestamp(body.expires_at),
        capabilities=_shown(body.capabilities),
    )


def _member_named(parsed: object, *, member: str) -> GroupMember:
    made = _member(parsed)
    if made.member != member:
        raise SpecMismatchError(f"member {made.member!r} is not the member {member!r} asked for")
    return made


def _member_page(parsed: object, *, group: str, after: str) -> MemberPage:
    body = _reading._body(parsed, models().MemberList, "MemberList")
    if _reading._string(body.group, "group") != group:
        raise SpecMismatchError(f"group {body.group!r} is not the group {group!r} asked for")
    members: list[GroupMember] = []
    for item in body.members:
        made = _member(item)
        if made.member <= after or (members and made.member <= members[-1].member):
            raise SpecMismatchError("the members are not in order after the one asked for")
        members.append(made)
    following = None if body.next_ is None else _reading._string(body.next_, "next")
    if following is not None and following <= after:
        raise SpecMismatchError(f"next {following!r} does not move past the page")
    return MemberPage(_reading._count(body.version, "version"), tuple(members), following)


def _shown(value: object) -> Any:
    """Capabilities as an answer shows them: bytes, a JSON value, or None."""
    if value is None:
        return None
    body = _reading._body(value, models().ShownCapabilities, "capabilities object")
    if isinstance(body.base64, str):
        try:
            return base64.b64decode(body.base64, validate=True)
        except (binascii.Error, ValueError):
            raise SpecMismatchError("capabilities.base64 is not base64") from None
    if not _is_unset(body.json):
        return body.json
    raise SpecMismatchError("capabilities hold neither json nor base64")


def _is_unset(value: object) -> bool:
    from _volcano_api.types import Unset  # loaded with the models already

    return isinstance(value, Unset)


def _membership(
    parsed: object,
    *,
    group: str,
    member: str,
    owner_token: str,
    fencing_token: int | None = None,
) -> Membership:
    """A Membership body, which must be the membership asked for."""
    body = _reading._body(parsed, models().Membership, "Membership")
    made = _reading._value(
        Membership,
        group=_reading._string(body.group, "group"),
        member=_reading._string(body.member, "member"),
        owner_token=_reading._string(body.owner_token, "owner_token"),
        fencing_token=_reading._fencing_token(body.fencing_token),
        expires_at=_reading._timestamp(body.expires_at),
        ttl_seconds=_reading._ttl_seconds(body.ttl_seconds),
    )
    if (made.group, made.member) != (group, member):
        raise SpecMismatchError(f"it is the membership of {made.member}@{made.group}")
    if made.owner_token != owner_token:
        raise SpecMismatchError("owner_token differs from the one sent")
    if fencing_token is not None and made.fencing_token != fencing_token:
        raise SpecMismatchError(f"fencing_token {fencing_token} became {made.fencing_token}")
    return made


def _removal(parsed: object, *, group: str, member: str) -> MemberRemoval:
    body = _reading._body(parsed, models().MemberRemoval, "MemberRemoval")
    made = MemberRemoval(
        group=_reading._string(body.group, "group"),
        member=_reading._string(body.member, "member"),
        removed=_reading._boolean(body.removed, "removed"),
        fencing_token=(
            None if body.fencing_token is None else _reading._fencing_token(body.fencing_token)
        ),
    )
    if (made.group, made.member) != (group, member):
        raise SpecMismatchError(f"it is about {made.member}@{made.group}")
    return made


def _renewals(
    parsed: object, *, sent: Sequence[Membership], request_id: str
) -> list[RenewedMembership]:
    """A batch's results, one per membership sent, in order (as `_reading.renewals`)."""
    body = _reading._body(parsed, models().RenewMembershipsResult, "RenewMembershipsResult")
    if not isinstance(body.results, list) or len(body.results) != len(sent):
        raise SpecMismatchError(f"it does not hold one result for each of {len(sent)} memberships")
    return [_renewed(result, m, request_id) for result, m in zip(body.results, sent, strict=True)]


def _renewed(result: object, sent: Membership, request_id: str) -> RenewedMembership:
    try:
        return _judged(result, sent)
    except SpecMismatchError as exc:
        return UnexpectedResponseError(
            f"renew_memberships: the result for {sent.member}@{sent.group} breaks the spec: {exc}",
            status_code=200,
            request_id=request_id,
        )


def _judged(result: object, sent: Membership) -> RenewedMembership:
    made = models()
    if (getattr(result, "group", None), getattr(result, "member", None)) != (
        sent.group,
        sent.member,
    ):
        raise SpecMismatchError("a result for another membership in its place")
    if isinstance(result, made.MembershipRenewed):
        return _membership(
            result.membership,
            group=sent.group,
            member=sent.member,
            owner_token=sent.owner_token,
            fencing_token=sent.fencing_token,
        )
    if not isinstance(result, made.MembershipRefused) or not isinstance(result.status, int):
        raise SpecMismatchError("it is neither a renewed membership nor a refusal")
    detail = _reading.error_detail(result.error)
    if detail is None:
        raise SpecMismatchError("its error is not a Volcano error object")
    code, message, refused_id, limit = detail
    return status_error(
        result.status, code=code, message=message, request_id=refused_id, limit=limit
    )
