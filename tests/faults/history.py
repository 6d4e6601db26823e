"""What the contenders saw, and the safety properties their history must have.

Clocks. Monotonic times (`sent`, `answered`, `release_sent`) come from several processes on one
Linux machine, where `time.monotonic()` is CLOCK_MONOTONIC, one clock for every process, so they
compare across contenders. `granted_at_us` and `expires_at_us` are the lock server's clock (its
database's, for PostgreSQL), and the fencing store's `at_us` is the wall clock of the same
machine, so those compare too. Nothing is given a margin.

The properties (`check`):

- **Fencing tokens are unique and increase in real time.** No token is granted twice; a grant
  answered before another was requested has the lower token; with `gapless`, every token from
  the first to the last was granted to someone (nothing was issued unseen).
- **No two live leases overlap**, judged by the server's clock: lease Y (a higher token) starts
  (`granted_at`, its acquisition's expiry minus its ttl) no earlier than lease X's last
  acknowledged expiry, unless X's holder had asked to release it before Y's grant was answered.
- **No live holder is refused, and no stale write gets in.** The store accepted tokens in
  non-decreasing order; every write it judged while the writer's lease was live (before that
  lease's last acknowledged expiry) was accepted, since a higher token written then would mean
  two live leases; every late write (after a simulated pause past the ttl and past another
  holder's write) was refused; and every write names a token granted to its writer.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .fencing import Write


@attrs.frozen
class Grant:
    """One lease a contender was granted, and what became of it."""

    worker: str
    token: int
    owner: str
    sent: float
    """Monotonic: just before the acquisition was requested."""
    answered: float
    """Monotonic: just after the lease arrived."""
    granted_at_us: int
    """Server clock: the acquisition's expires_at minus its ttl."""
    expires_at_us: int
    """Server clock: the last expiry the holder heard of (acquisition or renewal)."""
    release_sent: float | None
    """Monotonic: just before a release that may have ended the lease (None: no such release)."""
    paused: bool

    @classmethod
    def from_json(cls, worker: str, data: dict[str, Any]) -> Grant:
        return cls(
            worker=worker,
            token=data["token"],
            owner=data["owner"],
            sent=data["sent"],
            answered=data["answered"],
            granted_at_us=data["acquired_expires_at_us"] - round(data["ttl"] * 1_000_000),
            expires_at_us=data["expires_at_us"],
            release_sent=data["release_sent"],
            paused=data["paused"],
        )


def check(grants: Sequence[Grant], writes: Sequence[Write], *, gapless: bool) -> list[str]:
    """Every violation of the properties above, as readable lines; empty when there is none."""
    return [
        *_unique_tokens(grants),
        *(_no_gaps(grants) if gapless else []),
        *_real_time_order(grants),
        *_no_overlap(grants),
        *_fencing(grants, writes),
    ]


def _unique_tokens(grants: Sequence[Grant]) -> list[str]:
    counts = Counter(g.token for g in grants)
    return [f"fencing token {t} was granted {n} times" for t, n in sorted(counts.items()) if n > 1]


def _no_gaps(grants: Sequence[Grant]) -> list[str]:
    tokens = {g.token for g in grants}
    if not tokens:
        return []
    missing = sorted(set(range(min(tokens), max(tokens) + 1)) - tokens)
    return [f"fencing tokens {missing} were issued to nobody who heard of them"] if missing else []


def _real_time_order(grants: Sequence[Grant]) -> list[str]:
    return [
        f"token {x.token} ({x.worker}) was granted before token {y.token} ({y.worker}) was "
        f"even requested, yet is not lower"
        for x in grants
        for y in grants
        if x is not y and x.answered < y.sent and x.token >= y.token
    ]


def _no_overlap(grants: Sequence[Grant]) -> list[str]:
    problems = []
    for x in grants:
        for y in grants:
            if x.token >= y.token:
                continue
            expired_first = y.granted_at_us >= x.expires_at_us
            released_first = x.release_sent is not None and y.answered > x.release_sent
            if not (expired_first or released_first):
                overlap = (x.expires_at_us - y.granted_at_us) / 1000
                problems.append(
                    f"lease {y.token} ({y.worker}) began {overlap:.3f} ms before lease "
                    f"{x.token} ({x.worker}) expired, and {x.worker} had not released it"
                )
    return problems


def _fencing(grants: Sequence[Grant], writes: Sequence[Write]) -> list[str]:
    problems = []
    by_token = {g.token: g for g in grants}
    highest = 0
    for w in sorted(writes, key=lambda w: w.seq):
        if w.accepted:
            if w.token < highest:
                problems.append(f"write #{w.seq} with token {w.token} got in after {highest}")
            highest = max(highest, w.token)
        grant = by_token.get(w.token)
        if grant is None or grant.worker != w.writer:
            problems.append(f"write #{w.seq} by {w.writer} names token {w.token}, not its own")
            continue
        if w.at_us < grant.expires_at_us and not w.accepted:
            problems.append(
                f"write #{w.seq} ({w.phase}) by {w.writer} was refused while its lease "
                f"{w.token} was live: a higher token had been written during that lease"
            )
        if w.phase == "late" and w.accepted:
            problems.append(f"late write #{w.seq} by {w.writer} (token {w.token}) was accepted")
    return problems
