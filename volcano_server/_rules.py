"""The lock rules as pure decisions over a key's row and the storage clock: no I/O.

Each function takes the key's row as loaded inside a transaction (or None for a key never
acquired) and `now` in microseconds of the storage clock, and returns what to save and what to
answer. `_service` runs them inside transactions; the tests run them with plain values.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Literal

import attrs

from ._errors import ApiError
from ._wire import rfc3339_us
from .storage import LockRow, Waiter

__all__ = [
    "MAX_FENCING_TOKEN",
    "Decision",
    "Handoff",
    "Reach",
    "decide_acquire",
    "decide_force_release",
    "decide_handoff",
    "decide_release",
    "decide_renew",
    "lease_payload",
    "lock_held",
    "lock_state",
    "vacated",
]

MAX_FENCING_TOKEN = 2**53 - 1


@attrs.frozen
class Decision:
    """What an operation does to a key's row, and what it answers (before rendering)."""

    row: LockRow | None  # the row to save, or None to leave storage unchanged
    status: int
    payload: dict[str, Any] | None = None  # the 2xx body
    refusal: ApiError | None = None  # the 409, rendered like every other error

    @property
    def held_by_another(self) -> bool:
        """Whether this is the lock_held refusal: the caller may queue for the key."""
        return self.refusal is not None and self.refusal.code == "lock_held"


def decide_acquire(
    row: LockRow | None, now: int, *, project_id: int, key: str, owner_token: str, ttl: float
) -> Decision:
    """Decide an acquire, once any waiter in line has been handed a free key.

    A free or expired key gets the next fencing token; the live holder's own token gets its
    lease back with a new expiry; anyone else gets 409 lock_held.
    """
    if row is not None and row.live(now):
        if row.owner_token != owner_token:
            return lock_held(row, now, key)
        kept = attrs.evolve(row, expires_at_us=now + _micros(ttl), ttl_seconds=ttl)
        return Decision(kept, 200, payload=lease_payload(kept))
    granted = _grant(row, now, project_id=project_id, key=key, owner_token=owner_token, ttl=ttl)
    return Decision(granted, 200, payload=lease_payload(granted))


def lock_held(row: LockRow, now: int, key: str) -> Decision:
    """409 lock_held, with Retry-After = whole seconds until the live lease ends (at least 1)."""
    assert row.expires_at_us is not None  # noqa: S101 - only live rows are held
    wait = max(1, math.ceil((row.expires_at_us - now) / 1_000_000))
    message = f"{key} is held by another owner for up to {wait} more seconds"
    return Decision(None, 409, refusal=ApiError.lock_held(message, wait))


def decide_renew(
    row: LockRow | None, now: int, *, key: str, owner_token: str, fencing_token: int, ttl: float
) -> Decision:
    """The matching live lease gets a new expiry and keeps its fencing token."""
    refusal = _refusal(row, now, key, owner_token, fencing_token)
    if refusal is not None:
        return refusal
    assert row is not None  # noqa: S101 - _refusal checked it
    renewed = attrs.evolve(row, expires_at_us=now + _micros(ttl), ttl_seconds=ttl)
    return Decision(renewed, 200, payload=lease_payload(renewed))


def decide_release(
    row: LockRow | None, now: int, *, key: str, owner_token: str, fencing_token: int
) -> Decision:
    """The matching live lease ends; the key keeps its last fencing token."""
    refusal = _refusal(row, now, key, owner_token, fencing_token)
    if refusal is not None:
        return refusal
    assert row is not None  # noqa: S101 - _refusal checked it
    return Decision(vacated(row), 204)


def decide_force_release(row: LockRow | None, now: int, *, key: str) -> Decision:
    """The live lease, if any, ends whatever its owner."""
    if row is None or not row.live(now):
        return Decision(None, 200, payload={"key": key, "released": False, "fencing_token": None})
    return Decision(
        vacated(row),
        200,
        payload={"key": key, "released": True, "fencing_token": row.fencing_token},
    )


class Reach(enum.Enum):
    """How the server deciding a hand-off can reach a waiter's request."""

    HERE = "here"  # held open by this server, which has just claimed it for the grant
    THERE = "there"  # held open by another live server, which must take the lock itself
    GONE = "gone"  # its request has left, or its server stopped beating


@attrs.frozen
class Handoff:
    """What a free key does for the first waiter in line."""

    row: LockRow | None  # the key's row after it (None: unchanged)
    waiter_state: Literal["granted", "reserved", "away"]  # granted: its row is deleted
    until_us: int | None  # when a reservation lapses or an away waiter's place is given up


def decide_handoff(
    row: LockRow | None,
    now: int,
    waiter: Waiter,
    reach: Reach,
    *,
    reserve_us: int,
    rejoin_us: int,
) -> Handoff:
    """Hand a free key to `waiter`, first in line, as far as its `reach` allows.

    HERE: it gets the lease at once, its ttl counted from now. THERE: the key is reserved for it
    (a lease in its name that lapses after `reserve_us`) until its own server turns that into
    the full lease, so a server that died holding waiters blocks the key only briefly. GONE: it
    steps out of line, keeping its place for `rejoin_us` should it come back with its token.
    """
    if reach is Reach.GONE:
        return Handoff(None, "away", now + rejoin_us)
    granted = _grant(
        row,
        now,
        project_id=waiter.project_id,
        key=waiter.key,
        owner_token=waiter.owner_token,
        ttl=waiter.ttl_seconds,
    )
    if reach is Reach.HERE:
        return Handoff(granted, "granted", None)
    until = now + min(reserve_us, _micros(waiter.ttl_seconds))
    return Handoff(attrs.evolve(granted, expires_at_us=until), "reserved", until)


def lock_state(row: LockRow | None, now: int, key: str) -> dict[str, Any]:
    """The public view of a key: never the owner token."""
    if row is not None and row.live(now):
        assert row.expires_at_us is not None  # noqa: S101 - live() checked it
        return {
            "key": key,
            "held": True,
            "expires_at": rfc3339_us(row.expires_at_us),
            "fencing_token": row.fencing_token,
        }
    return {
        "key": key,
        "held": False,
        "expires_at": None,
        "fencing_token": row.fencing_token if row else None,
    }


def vacated(row: LockRow) -> LockRow:
    """The row with its lease ended; the fencing token stays as the key's last one issued."""
    return attrs.evolve(row, owner_token=None, expires_at_us=None, ttl_seconds=None)


def lease_payload(row: LockRow) -> dict[str, Any]:
    """The LockLease body for a live row."""
    assert row.expires_at_us is not None  # noqa: S101 - only live rows become leases
    return {
        "key": row.key,
        "owner_token": row.owner_token,
        "fencing_token": row.fencing_token,
        "expires_at": rfc3339_us(row.expires_at_us),
        "ttl_seconds": row.ttl_seconds,
    }


def _grant(
    row: LockRow | None, now: int, *, project_id: int, key: str, owner_token: str, ttl: float
) -> LockRow:
    """A new lease for `owner_token` with the key's next fencing token."""
    last = row.fencing_token if row is not None else 0
    if last >= MAX_FENCING_TOKEN:  # 2^53 acquisitions of one key: unreachable in practice
        raise RuntimeError(f"fencing tokens of {key!r} in project {project_id} are exhausted")
    return LockRow(project_id, key, last + 1, owner_token, now + _micros(ttl), ttl)


def _refusal(
    row: LockRow | None, now: int, key: str, owner_token: str, fencing_token: int
) -> Decision | None:
    if (
        row is not None
        and row.live(now)
        and row.owner_token == owner_token
        and row.fencing_token == fencing_token
    ):
        return None
    if row is None:
        why = "it has never been acquired"
    elif row.live(now) and row.fencing_token != fencing_token:
        why = f"it is held under fencing token {row.fencing_token}"
    elif row.live(now):
        why = "the owner token does not match the live lease"
    else:
        why = "no lease is live (it expired or was released)"
    message = (
        f"no live lease on {key} matches this owner token and fencing token {fencing_token}: {why}"
    )
    return Decision(None, 409, refusal=ApiError.lease_not_held(message))


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)
