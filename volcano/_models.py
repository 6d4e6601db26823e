"""The immutable values the lock methods return.

They are frozen attrs classes: assigning to a field raises `attrs.exceptions.FrozenInstanceError`
(an `AttributeError`). `expires_at` is always a timezone-aware UTC `datetime`. A lease's owner
token is its proof of ownership, so `repr()` shows `owner_token=<redacted>`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

import attrs

from ._exceptions import InvalidArgumentError


def _redacted(_: object) -> str:
    return "<redacted>"


def _utc(value: datetime) -> datetime:
    if value.utcoffset() is None:
        raise InvalidArgumentError(f"expires_at must be timezone-aware, got {value!r}")
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


@attrs.frozen
class LockLease:
    """A lease as granted by acquire or renew. Keep it to renew or release the lease.

    Attributes:
        key: The lock's name.
        owner_token: The UUID string that proves ownership, spelled exactly as sent. Keep it
            private; it is redacted from `repr()`.
        fencing_token: The lease's fencing token. Give it to the protected resource, which
            should reject writes carrying a lower token than the highest it has seen.
        expires_at: When the lease ends by the server's clock (timezone-aware, UTC).
        ttl_seconds: The time to live the lease was granted, in seconds.
    """

    key: str
    owner_token: str = attrs.field(repr=_redacted)
    fencing_token: int
    expires_at: datetime = attrs.field(converter=_utc)
    ttl_seconds: float


class LockMode(enum.Enum):
    """How a lease holds its key (`LockHolder.mode`).

    Attributes:
        EXCLUSIVE: Alone on the key (or one slot of a semaphore): `acquire` without `shared`.
        SHARED: Beside other shared holders, never beside an exclusive one: `acquire(...,
            shared=True)`.
    """

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


@attrs.frozen
class LockHolder:
    """One live lease of a key, as anyone may see it: never its owner token.

    Attributes:
        fencing_token: The lease's fencing token.
        expires_at: When it ends by the server's clock (timezone-aware, UTC).
        label: The holder's public label, or None.
        mode: Whether it holds the key shared or exclusive (`LockMode`).
    """

    fencing_token: int
    expires_at: datetime = attrs.field(converter=_utc)
    label: str | None = None
    mode: LockMode = LockMode.EXCLUSIVE


@attrs.frozen
class LockState:
    """A key's availability, as reported by get. It never contains an owner token.

    Attributes:
        key: The lock's name.
        held: Whether a live lease exists.
        expires_at: When the live lease ends (the soonest, with several; timezone-aware,
            UTC); None when not held.
        fencing_token: The live lease's fencing token when held (the highest, with several),
            else the last one issued for the key, else None.
        limit: The key's limit (1 for a lock, N for a semaphore) while it is in use; 1 when
            it is free.
        holders: The live leases, soonest expiry first: one exclusive, any number shared, or
            (a semaphore) up to `limit` exclusive ones; the 20 that end soonest when there are
            more (`client.locks.holders(key)` lists them all).
        waiters: How many callers wait in the key's line.
        version: The key's version: 0 for a key never acquired, then greater after each
            change of its holders (a grant, a release, an expiry, a force release, a label
            changed by a renewal). It never goes back; a renewal that keeps the label leaves
            it as it is.
        holder_count: How many live leases the key has, shown in `holders` or not.
    """

    key: str
    held: bool
    expires_at: datetime | None = attrs.field(converter=_utc_or_none)
    fencing_token: int | None
    limit: int = 1
    holders: tuple[LockHolder, ...] = ()
    waiters: int = 0
    version: int = 0
    holder_count: int = attrs.field(
        default=attrs.Factory(lambda self: len(self.holders), takes_self=True)
    )


@attrs.frozen
class ForceReleaseResult:
    """What force_release removed.

    Attributes:
        key: The lock's name.
        released: Whether a live lease was removed.
        fencing_token: The removed lease's fencing token (the highest, with several); None
            when nothing was released.
        released_count: How many live leases were removed.
    """

    key: str
    released: bool
    fencing_token: int | None
    released_count: int = 0
