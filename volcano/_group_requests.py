"""Validated requests for every group operation, shared by Client and AsyncClient.

Arguments are checked here, before anything is sent (as `_requests` does for locks): names,
capabilities (bytes, or a JSON value; at most 65,538 bytes either way), ttls, tokens and request
ids. An owner token or request id left out becomes a fresh UUID; one supplied is kept exactly as
spelled.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from . import _seam, _validate
from ._exceptions import InvalidArgumentError
from ._group_models import Membership
from ._requests import FOREVER, GuardPlan, with_lock

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from ._exceptions import Error
    from ._group_models import GroupMember, GroupState, MemberRemoval
    from ._seam import Call
    from ._seam._groups import GroupPage, MemberPage

__all__ = [
    "CAPABILITIES_MAX_BYTES",
    "ELECTION_PREFIX",
    "Joining",
    "MembershipPlan",
    "campaign_plan",
    "checked_capabilities",
    "create",
    "delete",
    "election_key",
    "get",
    "group_name",
    "groups_page",
    "join",
    "leave",
    "member",
    "member_name",
    "members_page",
    "membership",
    "membership_plan",
    "remove",
    "renew",
    "update",
    "watch",
]

GROUP_MAX_LENGTH = 240
MEMBER_MAX_LENGTH = 200
CAPABILITIES_MAX_BYTES = 65_538
ELECTION_PREFIX = "groups:"
"""A group's leader is elected on the key `groups:` + the group's name."""


def group_name(value: object) -> str:
    """Return a valid group name: 1 to 240 characters, made as a key is."""
    return _name("group", value, GROUP_MAX_LENGTH)


def member_name(value: object) -> str:
    """Return a valid member name: 1 to 200 characters, made as a key is."""
    return _name("member", value, MEMBER_MAX_LENGTH)


def election_key(group: object) -> str:
    """The key on which `group`'s leader is elected."""
    return ELECTION_PREFIX + group_name(group)


def checked_capabilities(value: object) -> Any:
    """Return capabilities as they will be sent: None, bytes, or a JSON value.

    bytes, bytearray and memoryview are bytes; anything else must be a JSON value (dicts with
    str keys, lists, tuples, str, int, float, bool, None inside). Either way at most 65,538
    bytes (JSON written compactly in UTF-8).
    """
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        _bounded(len(data), "bytes")
        return data
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"capabilities must be bytes or a JSON value (dict, list, str, int, float, bool,"
            f" None), got {type(value).__name__}: {exc}"
        ) from None
    _bounded(len(text.encode()), "JSON")
    return json.loads(text)  # as the server will keep it: tuples become lists


def membership(value: object) -> Membership:
    """Return `value` when it is a Membership; renew, update and leave act on no other."""
    if not isinstance(value, Membership):
        raise InvalidArgumentError(
            f"membership must be a volcano.Membership, got {type(value).__name__}"
        )
    return value


@attrs.frozen
class Joining:
    """A join, checked: the group, the member, the owner token, the ttl and the capabilities."""

    group: str
    member: str
    owner_token: str = attrs.field(repr=False)
    ttl: float
    capabilities: Any = attrs.field(repr=False)
    request_id: str

    def call(self, *, request_id: str | None = None) -> Call[Membership]:
        """The join request (with another request id, for a later attempt)."""
        return _seam.groups.join(
            self.group,
            self.member,
            owner_token=self.owner_token,
            ttl=self.ttl,
            capabilities=self.capabilities,
            request_id=request_id or self.request_id,
        )


@attrs.frozen
class MembershipPlan:
    """What a membership guard is made of: its join and how it reports on the membership."""

    joining: Joining
    at_risk_margin: float | None
    on_lost: Callable[[Error], object] | None
    on_at_risk: Callable[[Error], object] | None


def join(
    group: object,
    member: object,
    *,
    ttl: object,
    capabilities: object = None,
    token: str | uuid.UUID | None = None,
    request_id: str | uuid.UUID | None = None,
) -> Joining:
    """The join for these arguments."""
    return Joining(
        group=group_name(group),
        member=member_name(member),
        owner_token=_validate.new_uuid() if token is None else _validate.owner_token(token),
        ttl=_validate.ttl(ttl),
        capabilities=checked_capabilities(capabilities),
        request_id=_request_id(request_id),
    )


def membership_plan(
    group: object,
    member: object,
    *,
    ttl: object,
    capabilities: object,
    at_risk_margin: object,
    on_lost: object,
    on_at_risk: object,
) -> MembershipPlan:
    """The plan of a membership guard for these arguments.

    Its owner token and request id are fresh: an answer to its join is dated from the join's
    own first send (a replay can only be of its own retry).
    """
    joining = join(group, member, ttl=ttl, capabilities=capabilities)
    return MembershipPlan(
        joining,
        at_risk_margin=_validate.at_risk_margin(at_risk_margin, joining.ttl),
        on_lost=_validate.callback("on_lost", on_lost),
        on_at_risk=_validate.callback("on_at_risk", on_at_risk),
    )


def create(group: object, *, request_id: str | uuid.UUID | None) -> Call[GroupState]:
    """The request that creates a group."""
    return _seam.groups.create_group(group_name(group), request_id=_request_id(request_id))


def delete(group: object, *, request_id: str | uuid.UUID | None) -> Call[None]:
    """The request that deletes a group."""
    return _seam.groups.delete_group(group_name(group), request_id=_request_id(request_id))


def get(group: object) -> Call[GroupState]:
    """The request that reads a group."""
    return _seam.groups.get_group(group_name(group), request_id=_validate.new_uuid())


def watch(group: str, *, after_version: int, wait: float) -> Call[GroupState]:
    """One long poll of a group's watch (a fresh request id each: it changes nothing)."""
    return _seam.groups.watch_group(
        group, after_version=after_version, wait=wait, request_id=_validate.new_uuid()
    )


def renew(
    value: object, *, ttl: object = None, request_id: str | uuid.UUID | None = None
) -> Call[Membership]:
    """The request that renews a membership (`ttl` None: its own)."""
    checked = membership(value)
    seconds = _validate.ttl(checked.ttl_seconds if ttl is None else ttl)
    return _seam.groups.renew_membership(checked, ttl=seconds, request_id=_request_id(request_id))


def update(value: object, new: object, *, request_id: str | uuid.UUID | None) -> Call[Membership]:
    """The request that gives a membership new capabilities."""
    return _seam.groups.update_capabilities(
        membership(value), checked_capabilities(new), request_id=_request_id(request_id)
    )


def leave(value: object, *, request_id: str | uuid.UUID | None = None) -> Call[None]:
    """The request that ends a membership."""
    return _seam.groups.leave(membership(value), request_id=_request_id(request_id))


def remove(
    group: object, member: object, *, request_id: str | uuid.UUID | None
) -> Call[MemberRemoval]:
    """The request that removes a member, whoever holds it."""
    return _seam.groups.remove_member(
        group_name(group), member_name(member), request_id=_request_id(request_id)
    )


def member(group: object, name: object) -> Call[GroupMember]:
    """The request that reads one member."""
    return _seam.groups.get_member(
        group_name(group), member_name(name), request_id=_validate.new_uuid()
    )


def groups_page(prefix: str, *, after: str, page_size: int) -> Call[GroupPage]:
    """One page of groups (arguments checked by the caller)."""
    return _seam.groups.list_groups(
        prefix=prefix, after=after, limit=page_size, request_id=_validate.new_uuid()
    )


def members_page(group: str, *, after: str, page_size: int) -> Call[MemberPage]:
    """One page of a group's members (arguments checked by the caller)."""
    return _seam.groups.list_members(
        group, after=after, limit=page_size, request_id=_validate.new_uuid()
    )


def campaign_plan(
    group: object,
    member: object,
    *,
    ttl: object,
    wait: object,
    on_lost: object,
    on_at_risk: object,
    at_risk_margin: object,
) -> GuardPlan:
    """The plan of a campaign for `group`'s leadership, as `member`."""
    return with_lock(
        election_key(group),
        ttl=ttl,
        wait=FOREVER if wait is None else wait,
        label=member_name(member),
        token=None,
        request_id=None,
        on_lost=on_lost,
        on_at_risk=on_at_risk,
        at_risk_margin=at_risk_margin,
    )


def _bounded(size: int, form: str) -> None:
    if size > CAPABILITIES_MAX_BYTES:
        raise InvalidArgumentError(
            f"capabilities hold at most {CAPABILITIES_MAX_BYTES} bytes; these are {size} bytes"
            f" of {form}"
        )


def _name(what: str, value: object, most: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= most or not _validate.KEY_PATTERN.fullmatch(value):
        shown = repr(value) if len(value) <= 80 else f"{value[:80]!r}... ({len(value)} characters)"
        raise InvalidArgumentError(
            f"{what} must be 1 to {most} characters: a letter or digit, then letters, digits,"
            f" '.', '_', ':' or '-'; got {shown}"
        )
    return value


def _request_id(value: str | uuid.UUID | None) -> str:
    return _validate.new_uuid() if value is None else _validate.request_id(value)
