"""The immutable values the group methods return.

Frozen attrs classes, like the lock values (`_models`): `expires_at` is a timezone-aware UTC
`datetime`, and a membership's owner token is redacted from `repr()`. Capabilities are what the
member gave: `bytes`, or a JSON value (a dict, a list, a str, a number, a bool), or None for
none.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from ._models import _redacted, _utc

__all__ = ["GroupMember", "GroupState", "MemberRemoval", "Membership"]


@attrs.frozen
class Membership:
    """A member's lease on its group, as granted by join or renew. Keep it to renew or leave.

    Attributes:
        group: The group's name.
        member: The member's name.
        owner_token: The UUID string that proves the membership, spelled exactly as sent. Keep
            it private; it is redacted from `repr()`.
        fencing_token: The membership's fencing token, from the group's own counter: a later
            member's is always greater.
        expires_at: When the membership ends by the server's clock unless renewed
            (timezone-aware, UTC).
        ttl_seconds: The time to live it was granted, in seconds.
    """

    group: str
    member: str
    owner_token: str = attrs.field(repr=_redacted)
    fencing_token: int
    expires_at: datetime = attrs.field(converter=_utc)
    ttl_seconds: float


@attrs.frozen
class GroupState:
    """A group as anyone may see it.

    Attributes:
        group: The group's name.
        version: The group's version: 1 once created, then greater after each change of its
            membership (a join, a leave, a removal, an expiry, new capabilities) and its
            deletion. It never goes back, not across a deletion and a new creation either.
        fencing_token: The last fencing token issued to a member, or None if none ever joined.
        members: How many live members it has.
    """

    group: str
    version: int
    fencing_token: int | None
    members: int


@attrs.frozen
class GroupMember:
    """A live member of a group as anyone may see it: never its owner token.

    Attributes:
        member: The member's name.
        fencing_token: Its membership's fencing token.
        expires_at: When its membership ends unless renewed (timezone-aware, UTC).
        capabilities: What it announced: `bytes`, a JSON value, or None.
    """

    member: str
    fencing_token: int
    expires_at: datetime = attrs.field(converter=_utc)
    capabilities: Any = None


@attrs.frozen
class MemberRemoval:
    """What `remove` did.

    Attributes:
        group: The group's name.
        member: The member's name.
        removed: Whether a live member was removed.
        fencing_token: The removed membership's fencing token, or None when nothing was removed.
    """

    group: str
    member: str
    removed: bool
    fencing_token: int | None
