"""The lock rules as pure decisions over a key's row and the storage clock: no I/O.

Each function takes the key's row as loaded inside a transaction (or None for a key never
acquired) and `now` in microseconds of the storage clock, and returns what to save and what to
tell: done, or refused and why (`Decision`, `Refusal`: no status, no body; rendered by
`wire`). `_transactions` runs them inside transactions; the tests run them with plain values.

A key has a limit (1: a lock; N: a semaphore of N slots) and up to that many live leases, each
with its own owner token and its own fencing token: every grant takes the key's next token. The
limit belongs to the key while it has a live lease (or a waiter, whose join the same rule
refuses); once the key is free, the next acquire sets it. A row the rules return holds only
live leases: expired ones are dropped whenever the row is saved.

A lock (limit 1) may also be held shared: any number of shared leases (up to
`MAX_SHARED_HOLDERS`) or exactly one exclusive one. A lease keeps its mode for life; a semaphore
(limit above 1) has exclusive leases only, so `limit` and `shared` never mix (`shared_with_limit`).
A shared acquire is granted at once only while nobody waits in line, so a waiting exclusive
request is never passed by later shared ones; at a hand-off the head of the line is served: an
exclusive waiter alone, or the run of shared waiters at the head together.

Each lease carries a public label (None: none): an acquire sets it, a renew keeps it or sets a
new one, a waiter's goes with the lease it is granted. A key's version counts the changes of
its holders (`versioned`: grants, ends, label changes), and the stored leases that have expired
since (`LockRow.version_at`), so it moves on an expiry that nobody has written yet.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any, Literal

import attrs

from ..storage import Lease, LockRow, LockSummary, Waiter
from ..wire._wire import rfc3339_us

__all__ = [
    "HOLDERS_INLINE",
    "MAX_FENCING_TOKEN",
    "MAX_SHARED_HOLDERS",
    "Decision",
    "Handoff",
    "Reach",
    "Reason",
    "Refusal",
    "decide_acquire",
    "decide_force_release",
    "decide_handoff",
    "decide_release",
    "decide_renew",
    "decide_renewals",
    "has_room",
    "holder_payload",
    "lease_check",
    "lease_payload",
    "lock_held",
    "lock_state",
    "replaced",
    "versioned",
    "without",
]

MAX_FENCING_TOKEN = 2**53 - 1
HOLDERS_INLINE = 20
"""The most live leases a key's state shows (openapi.yaml); the rest are paged through."""
# The most shared holders a key has at once: a semaphore's greatest limit, so that a key's
# leases (read by every transaction on it) stay as bounded as a semaphore's.
MAX_SHARED_HOLDERS = 1000


Reason = Literal[
    "lock_held", "lease_not_held", "limit_mismatch", "shared_with_limit", "mode_mismatch"
]


@attrs.frozen
class Refusal:
    """Why the rules refuse an operation, named as the contract names it; no status, no body."""

    reason: Reason | Literal["quota_exceeded"]
    message: str
    retry_after: int | None = None  # lock_held: whole seconds until the soonest lease ends
    limit: int | None = None  # limit_mismatch: the key's limit


@attrs.frozen
class Decision:
    """What an operation does to a key's row, and what it tells: done, or refused and why.

    Done, it tells `payload` (the key's state or lease as the contract shapes it; None when
    there is nothing to tell) and `lease`, the lease that payload is; refused, its `refusal`.
    """

    row: LockRow | None  # the row to save, or None to leave storage unchanged
    payload: dict[str, Any] | None = None
    refusal: Refusal | None = None
    lease: Lease | None = None

    @property
    def done(self) -> bool:
        """Whether the operation was done (else refused)."""
        return self.refusal is None

    @property
    def held_by_another(self) -> bool:
        """Whether this is the lock_held refusal: the caller may queue for the key."""
        return self.refusal is not None and self.refusal.reason == "lock_held"


def decide_acquire(
    row: LockRow | None,
    now: int,
    *,
    project_id: int,
    key: str,
    owner_token: str,
    ttl: float,
    limit: int = 1,
    label: str | None = None,
    shared: bool = False,
    line_waits: bool = False,
) -> Decision:
    """Decide an acquire, once any waiter in line has been handed a free slot.

    An acquire asking for both `shared` and a limit above 1 is refused shared_with_limit,
    whatever the key. The owner's own live lease is given back with a new expiry and `label`
    (in another mode than `shared` asks: refused mode_mismatch); a key in use as a semaphore by
    a shared acquire, or held shared by one with a limit, is refused shared_with_limit; a key in
    use with another limit, limit_mismatch; a new lease that fits beside the live ones
    (`has_room`) while nobody waits in line (`line_waits`: someone still waits after the
    hand-off) gets the key's next fencing token; else the acquire is refused lock_held.
    """
    if shared and limit != 1:
        return shared_with_limit(f"this acquire asks for a shared lease and a limit of {limit}")
    live = row.live_leases(now) if row is not None else ()
    mine = row.lease_of(owner_token, now) if row is not None else None
    if row is not None and mine is not None:
        if mine.shared != shared:
            return mode_mismatch(key, mine)
        kept = _told_again(
            mine,
            attrs.evolve(
                mine, expires_at_us=now + _micros(ttl), ttl_seconds=ttl, label=_label(label)
            ),
        )
        return Decision(
            replaced(row, now, mine, kept), payload=lease_payload(key, kept), lease=kept
        )
    mismatch = _in_use_otherwise(row, live, key, limit=limit, shared=shared)
    if mismatch is not None:
        return mismatch
    if line_waits or not has_room(row, now, shared=shared, limit=limit):
        assert row is not None  # noqa: S101 - live leases and waiters come from a row
        return lock_held(row, now, key, shared=shared)
    granted, lease = _grant(
        row,
        now,
        project_id=project_id,
        key=key,
        owner=owner_token,
        ttl=ttl,
        label=label,
        shared=shared,
    )
    return Decision(
        attrs.evolve(granted, limit=limit), payload=lease_payload(key, lease), lease=lease
    )


def _in_use_otherwise(
    row: LockRow | None, live: tuple[Lease, ...], key: str, *, limit: int, shared: bool
) -> Decision | None:
    """The refusal of an acquire for a key in use in a way it cannot join, else None."""
    if not live or row is None:
        return None
    if shared and row.limit != 1:
        return shared_with_limit(f"{key} is in use as a semaphore of limit {row.limit}")
    if limit != 1 and any(lease.shared for lease in live):
        return shared_with_limit(f"{key} is held shared; this acquire asks for limit {limit}")
    if row.limit != limit:
        return limit_mismatch(row, key, limit)
    return None


def has_room(row: LockRow | None, now: int, *, shared: bool, limit: int | None = None) -> bool:
    """Whether a new lease in this mode fits beside the key's live leases (its line aside).

    Exclusive: fewer live leases than the limit, none of them shared (limit 1: none at all).
    Shared: only shared ones live, fewer than `MAX_SHARED_HOLDERS`, on a lock (limit 1). The
    limit is the key's own while it has a live lease; a free key takes `limit` (a hand-off,
    None: the key's own for an exclusive lease, 1 for a shared one).
    """
    live = row.live_leases(now) if row is not None else ()
    if live and row is not None:
        limit = row.limit
    elif limit is None:
        limit = 1 if shared or row is None else row.limit
    if shared:
        return limit == 1 and len(live) < MAX_SHARED_HOLDERS and all(x.shared for x in live)
    return len(live) < limit and not any(x.shared for x in live)


def limit_mismatch(row: LockRow, key: str, limit: int) -> Decision:
    """Refused limit_mismatch: the key is in use with another limit."""
    message = (
        f"{key} is in use with limit {row.limit}; this acquire asks for limit {limit}"
        f" (a key's limit can change only once it has no live lease and no waiter)"
    )
    return Decision(None, refusal=Refusal("limit_mismatch", message, limit=row.limit))


def shared_with_limit(why: str) -> Decision:
    """Refused shared_with_limit: asked for both, or the key is in use the other way (`why`).

    A refusal even for a request that asks for both (not an invalid request): every acquire the
    schema allows is done or refused, as clients and contract checkers expect of valid ones.
    """
    message = (
        f"{why}: shared leases and a limit do not mix (a shared lock has shared holders or one"
        " exclusive holder, a semaphore N exclusive ones; a key's use can change only once it"
        " has no live lease and no waiter)"
    )
    return Decision(None, refusal=Refusal("shared_with_limit", message))


def mode_mismatch(key: str, mine: Lease) -> Decision:
    """Refused mode_mismatch: the owner holds the key in the other mode than it asks for now."""
    held, asked = ("shared", "exclusive") if mine.shared else ("exclusive", "shared")
    message = (
        f"this owner token holds {key} {held} (fencing token {mine.fencing_token}); it cannot"
        f" take it {asked} as well: release that lease, then acquire {asked}"
    )
    return Decision(None, refusal=Refusal("mode_mismatch", message))


def lock_held(row: LockRow, now: int, key: str, *, shared: bool = False) -> Decision:
    """Refused lock_held; retry after the whole seconds until the soonest live lease ends (>= 1).

    `shared`: the acquire refused asked for a shared lease (the message says why it waits).
    """
    soonest = row.soonest_expiry(now)
    wait = 1 if soonest is None else max(1, math.ceil((soonest - now) / 1_000_000))
    live = row.live_leases(now)
    if row.limit != 1:
        message = (
            f"all {row.limit} slots of {key} are held by other owners; the first frees in up"
            f" to {wait} more seconds"
        )
    elif live and all(lease.shared for lease in live):
        if not shared:
            why = "an exclusive lease waits for every one of them"
        elif len(live) >= MAX_SHARED_HOLDERS:
            why = f"that is the most a key has at once ({MAX_SHARED_HOLDERS})"
        else:
            why = "others wait in line first (a shared acquire never passes a waiting one)"
        message = (
            f"{key} is held shared by {_owners(len(live))}; {why}; the first ends in up to"
            f" {wait} more seconds"
        )
    elif live:
        message = f"{key} is held by another owner for up to {wait} more seconds"
    else:
        message = f"others wait in line for {key} first"
    return Decision(None, refusal=Refusal("lock_held", message, retry_after=wait))


def decide_renew(
    row: LockRow | None,
    now: int,
    *,
    key: str,
    owner_token: str,
    fencing_token: int,
    ttl: float,
    label: str | None = None,
) -> Decision:
    """The matching live lease gets a new expiry and keeps its fencing token.

    With `label` (not None) the lease's label becomes it (an empty one: none); else it stays.
    """
    lease = _matching(row, now, owner_token, fencing_token)
    if lease is None:
        return _not_held(row, now, key, owner_token, fencing_token)
    assert row is not None  # noqa: S101 - a lease comes from a row
    renewed = _told_again(
        lease,
        attrs.evolve(
            lease,
            expires_at_us=now + _micros(ttl),
            ttl_seconds=ttl,
            label=lease.label if label is None else _label(label),
        ),
    )
    return Decision(
        replaced(row, now, lease, renewed), payload=lease_payload(key, renewed), lease=renewed
    )


def decide_renewals(
    row: LockRow | None,
    now: int,
    *,
    key: str,
    renewals: Sequence[tuple[str, int, float, str | None]],
    crowd: tuple[int, int | None] | None = None,
) -> tuple[LockRow | None, list[Decision]]:
    """`decide_renew` for each (owner token, fencing token, ttl, label), each on the row before.

    Entries are judged in order, each on the row the one before it left; returned: the row to
    save (None when nothing changed) and each entry's decision.
    One pass over the key's leases for the whole batch: m entries on a key of n holders cost
    n + m, not n x m. `row` may be partial, holding only the leases of the entries' owner
    tokens (so that a batch costs what it names, however crowded the key): then `crowd` is the
    whole key's (live leases, highest live token), which a refusal's reason needs.
    """
    if row is None:
        return None, [
            _refused(key, renewal[1], "it has never been acquired") for renewal in renewals
        ]
    live = list(row.live_leases(now))
    at = {(lease.owner_token, lease.fencing_token): i for i, lease in enumerate(live)}
    first_of: dict[str, int] = {}
    for index, lease in enumerate(live):
        first_of.setdefault(lease.owner_token, index)
    decisions: list[Decision] = []
    changed = False
    crowd = _crowd(live) if crowd is None else crowd  # renewals change neither
    for owner_token, fencing_token, ttl, label in renewals:
        found = at.get((owner_token, fencing_token))
        if found is None:  # renewals change no lease's owner or liveness: `crowd` still holds
            mine = first_of.get(owner_token)
            why = _why_not_held(
                crowd, row.limit, None if mine is None else live[mine], fencing_token
            )
            decisions.append(_refused(key, fencing_token, why))
            continue
        lease = live[found]
        live[found] = renewed = _told_again(
            lease,
            attrs.evolve(
                lease,
                expires_at_us=now + _micros(ttl),
                ttl_seconds=ttl,
                label=lease.label if label is None else _label(label),
            ),
        )
        changed = True
        decisions.append(Decision(None, payload=lease_payload(key, renewed), lease=renewed))
    return (attrs.evolve(row, leases=tuple(live)) if changed else None), decisions


def decide_release(
    row: LockRow | None, now: int, *, key: str, owner_token: str, fencing_token: int
) -> Decision:
    """The matching live lease ends; the key keeps its last fencing token."""
    lease = _matching(row, now, owner_token, fencing_token)
    if lease is None:
        return _not_held(row, now, key, owner_token, fencing_token)
    assert row is not None  # noqa: S101 - a lease comes from a row
    return Decision(without(row, now, lease))


def decide_force_release(row: LockRow | None, now: int, *, key: str) -> Decision:
    """Every live lease ends, whatever its owner: how many, and the highest token removed."""
    live = row.live_leases(now) if row is not None else ()
    if row is None or not live:
        payload = {"key": key, "released": False, "fencing_token": None, "released_count": 0}
        return Decision(None, payload=payload)
    payload = {
        "key": key,
        "released": True,
        "fencing_token": max(lease.fencing_token for lease in live),
        "released_count": len(live),
    }
    return Decision(attrs.evolve(row, leases=()), payload=payload)


class Reach(enum.Enum):
    """How the server deciding a hand-off can reach a waiter's request."""

    HERE = "here"  # held open by this server, which has just claimed it for the grant
    THERE = "there"  # held open by another live server, which must take the lock itself
    GONE = "gone"  # its request has left, or its server stopped beating


@attrs.frozen
class Handoff:
    """What a free slot does for the first waiter in line."""

    row: LockRow | None  # the key's row after it (None: unchanged)
    waiter_state: Literal["granted", "reserved", "away"]  # granted: its row is deleted
    until_us: int | None  # when a reservation lapses or an away waiter's place is given up
    lease: Lease | None = None  # the lease granted or reserved


def decide_handoff(
    row: LockRow,
    now: int,
    waiter: Waiter,
    reach: Reach,
    *,
    reserve_us: int,
    rejoin_us: int,
) -> Handoff:
    """Hand a free slot of `row` to `waiter`, first in line, as far as its `reach` allows.

    The slot is one that fits a lease of the waiter's mode (`has_room`: the caller judged it).

    HERE: it gets the lease at once, its ttl counted from now. THERE: the slot is reserved for
    it (a lease in its name that lapses after `reserve_us`) until its own server turns that into
    the full lease, so a server that died holding waiters blocks the slot only briefly. GONE: it
    steps out of line, keeping its place for `rejoin_us` should it come back with its token.
    """
    if reach is Reach.GONE:
        return Handoff(None, "away", now + rejoin_us)
    until = None
    if reach is Reach.THERE:
        until = now + min(reserve_us, _micros(waiter.ttl_seconds))
    granted, lease = _grant(
        row,
        now,
        project_id=waiter.project_id,
        key=waiter.key,
        owner=waiter.owner_token,
        ttl=waiter.ttl_seconds,
        until=until,
        label=waiter.label,
        shared=waiter.shared,
    )
    if reach is Reach.HERE:
        return Handoff(granted, "granted", None, lease)
    return Handoff(granted, "reserved", until, lease)


def lock_state(summary: LockSummary | None, key: str) -> dict[str, Any]:
    """The public view of a key: never an owner token; at most HOLDERS_INLINE holders."""
    if summary is None:
        return {
            "key": key,
            "held": False,
            "expires_at": None,
            "fencing_token": None,
            "limit": 1,
            "holders": [],
            "holder_count": 0,
            "waiters": 0,
            "version": 0,
        }
    soonest = summary.holders
    return {
        "key": key,
        "held": bool(summary.holder_count),
        "expires_at": rfc3339_us(soonest[0].expires_at_us) if soonest else None,
        "fencing_token": summary.highest_live or summary.fencing_token,
        "limit": summary.limit if summary.holder_count or summary.waiting else 1,
        "holders": [holder_payload(lease) for lease in soonest[:HOLDERS_INLINE]],
        "holder_count": summary.holder_count,
        "waiters": summary.waiting,
        "version": summary.version,
    }


def holder_payload(lease: Lease) -> dict[str, Any]:
    """One live lease as anyone may see it (a LockHolder): never its owner token."""
    return {
        "fencing_token": lease.fencing_token,
        "expires_at": rfc3339_us(lease.expires_at_us),
        "label": lease.label,
        "mode": "shared" if lease.shared else "exclusive",
    }


def versioned(loaded: LockRow | None, row: LockRow) -> LockRow:
    """`row` with its version moved past every change of the holders since `loaded`.

    One for each lease granted, each lease ended (released, force-released, or expired and
    dropped), and each label changed; at least one when the key's last fencing token moved.
    A stored lease that expired and is still kept counts in `version_at` instead, so a key's
    version at any moment is the same before and after a save that only drops it.
    """
    before = {lease.fencing_token: lease for lease in (loaded.leases if loaded else ())}
    after = {lease.fencing_token: lease for lease in row.leases}
    changes = sum(token not in after for token in before)
    changes += sum(
        token not in before or before[token].label != lease.label for token, lease in after.items()
    )
    if loaded is None or loaded.fencing_token != row.fencing_token:
        changes = max(changes, 1)
    return attrs.evolve(row, version=(loaded.version if loaded else 0) + changes)


def lease_check(row: LockRow | None, now: int, key: str, fencing_token: int) -> dict[str, Any]:
    """Whether `fencing_token` names a live lease of the key (the fence check)."""
    lease = (
        next((x for x in row.live_leases(now) if x.fencing_token == fencing_token), None)
        if row is not None
        else None
    )
    return {
        "key": key,
        "fencing_token": fencing_token,
        "live": lease is not None,
        "expires_at": rfc3339_us(lease.expires_at_us) if lease is not None else None,
    }


def without(row: LockRow, now: int, ended: Lease) -> LockRow:
    """The row with `ended` gone (and expired leases dropped); the key keeps its last token."""
    return attrs.evolve(
        row, leases=tuple(x for x in row.live_leases(now) if x.fencing_token != ended.fencing_token)
    )


def lease_payload(key: str, lease: Lease) -> dict[str, Any]:
    """The LockLease body for a live lease."""
    return {
        "key": key,
        "owner_token": lease.owner_token,
        "fencing_token": lease.fencing_token,
        "expires_at": rfc3339_us(lease.expires_at_us),
        "ttl_seconds": lease.ttl_seconds,
    }


def _grant(
    row: LockRow | None,
    now: int,
    *,
    project_id: int,
    key: str,
    owner: str,
    ttl: float,
    until: int | None = None,
    label: str | None = None,
    shared: bool = False,
) -> tuple[LockRow, Lease]:
    """A new lease for `owner` with the key's next fencing token, in its mode.

    With `until`, a reservation for a waiter on another server: it ends then, and is dated
    (`granted_at_us`) only once that server takes it. A shared lease makes the key a lock
    (limit 1), if it was not one.
    """
    last = row.fencing_token if row is not None else 0
    if last >= MAX_FENCING_TOKEN:  # 2^53 acquisitions of one key: unreachable in practice
        raise RuntimeError(f"fencing tokens of {key!r} in project {project_id} are exhausted")
    token, name = last + 1, _label(label)
    if until is None:
        lease = Lease(token, owner, now + _micros(ttl), ttl, name, granted_at_us=now, shared=shared)
    else:
        lease = Lease(token, owner, until, ttl, name, shared=shared)
    if row is None:
        return LockRow(project_id, key, last + 1, 1, (lease,)), lease
    limit = 1 if shared else row.limit
    leases = (*row.live_leases(now), lease)
    return attrs.evolve(row, fencing_token=last + 1, limit=limit, leases=leases), lease


def replaced(row: LockRow, now: int, old: Lease, new: Lease) -> LockRow:
    """The row with `old` replaced by `new` (and expired leases dropped)."""
    return attrs.evolve(
        row,
        leases=tuple(
            new if x.fencing_token == old.fencing_token else x for x in row.live_leases(now)
        ),
    )


def _told_again(before: Lease, after: Lease) -> Lease:
    """`after`, a lease told to its owner again, never equal to `before`, the one told before.

    A lease handed to a waiter whose client left is ended only if it is still that very lease
    (`Transactions.undeliver`): told again to its owner since (an acquire or renewal in the
    same microsecond with the same ttl), it must differ, so its expiry moves 1 µs further.
    """
    return attrs.evolve(after, expires_at_us=after.expires_at_us + 1) if after == before else after


def _matching(row: LockRow | None, now: int, owner_token: str, fencing_token: int) -> Lease | None:
    if row is None:
        return None
    return next(
        (
            x
            for x in row.live_leases(now)
            if x.owner_token == owner_token and x.fencing_token == fencing_token
        ),
        None,
    )


def _not_held(
    row: LockRow | None, now: int, key: str, owner_token: str, fencing_token: int
) -> Decision:
    if row is None:
        return _refused(key, fencing_token, "it has never been acquired")
    live = row.live_leases(now)
    mine = next((x for x in live if x.owner_token == owner_token), None)
    why = _why_not_held(_crowd(live), row.limit, mine, fencing_token)
    return _refused(key, fencing_token, why)


def _crowd(live: Sequence[Lease]) -> tuple[int, int | None]:
    """How many leases are live, and the highest fencing token among them."""
    return len(live), max((lease.fencing_token for lease in live), default=None)


def _why_not_held(
    crowd: tuple[int, int | None], limit: int, mine: Lease | None, fencing_token: int
) -> str:
    """Why no live lease matched: `crowd` the key's live leases (`_crowd`), `mine` the caller's."""
    if mine is not None:
        return f"this owner token holds fencing token {mine.fencing_token}"
    live, highest = crowd
    if limit == 1 and live == 1:
        if highest != fencing_token:
            return f"it is held under fencing token {highest}"
        return "the owner token does not match the live lease"
    if live:
        return "no live lease of this key has this owner token and fencing token"
    return "no lease is live (it expired or was released)"


def _refused(key: str, fencing_token: int, why: str) -> Decision:
    message = (
        f"no live lease on {key} matches this owner token and fencing token {fencing_token}: {why}"
    )
    return Decision(None, refusal=Refusal("lease_not_held", message))


def _owners(count: int) -> str:
    return "another owner" if count == 1 else f"{count} owners"


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _label(text: str | None) -> str | None:
    """A lease's label as stored: an empty one is none."""
    return text or None
