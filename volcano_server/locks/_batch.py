"""Renewing many leases in one request: its entries, its results, and keeping each result true.

A batch is judged entry by entry exactly as single renews are (`_rules.decide_renew`), in one
transaction (`Transactions.renew_many`). Its answer is 200 with one result per entry, in order:
`{key, lease}` or `{key, status, error}`, the error rendered as every other (`ApiError`). Like
every answer that tells of a lease, each result must be true when heard: a lease that ended
before the answer went out (a server that stalled past the ttl, or a replay of an outcome whose
lease has ended since) is told as `409 lease_not_held` in its place, the other results kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..wire._errors import ApiError
from ..wire._wire import Answer, dumps

__all__ = ["LeaseRenewal", "Result", "answer", "refused", "renewed", "replayed", "still_true"]

Result = tuple[dict[str, Any], int | None]
"""One entry's result, and the expiry of the lease it tells of (None: a refusal)."""


@attrs.frozen
class LeaseRenewal:
    """One entry of a batch: which lease to renew, for how long, and with which label.

    `label` None keeps the lease's label, as a single renew without one does.
    """

    key: str
    owner_token: str = attrs.field(repr=False)
    fencing_token: int
    ttl_seconds: float
    label: str | None = None


def renewed(key: str, lease: dict[str, Any], until_us: int) -> Result:
    """The result of an entry whose lease was renewed: its LockLease body, and its expiry."""
    return {"key": key, "lease": lease}, until_us


def refused(key: str, error: ApiError, request_id: str) -> Result:
    """The result of an entry refused with `error`, as a single renew would have answered it."""
    return {"key": key, "status": error.status, "error": error.detail(request_id)}, None


def answer(results: Sequence[Result], *, replay: bool = False) -> Answer:
    """The 200 that tells the results, timed by the soonest lease among them."""
    soonest = min((until for _, until in results if until is not None), default=None)
    body = dumps({"results": [result for result, _ in results]})
    return Answer(200, body, replayed=replay, lease_until_us=soonest, results=tuple(results))


def replayed(
    body: bytes,
    as_now: Callable[[dict[str, Any]], tuple[dict[str, Any], int] | None],
    request_id: str,
) -> Answer:
    """The stored answer `body` replayed, each lease told as it is now.

    `as_now` gives a stored lease's body as the lease is now and its expiry, or None if it has
    ended: then it is refused. Never the stored expiry: a later request of the owner may have
    shortened the lease.
    """
    results: list[Result] = []
    for result in json.loads(body)["results"]:
        lease = result.get("lease")
        current = None if lease is None else as_now(lease)
        if lease is None:
            results.append((result, None))
        elif current is not None:
            told = result if current[0] == lease else {**result, "lease": current[0]}
            results.append((told, current[1]))
        else:
            message = (
                f"the lease this request renewed (fencing token {lease['fencing_token']} on"
                f" {lease['key']}) is no longer live: it was released, expired or"
                " force-released since"
            )
            results.append(refused(result["key"], ApiError.lease_not_held(message), request_id))
    return answer(results, replay=True)


def still_true(told: Answer, now_us: int, request_id: str) -> Answer:
    """`told` with each lease that has expired by `now_us` refused in its place."""
    results: list[Result] = []
    for result, until in told.results:
        if until is None or now_us < until:
            results.append((result, until))
            continue
        # What names the entry (a key; or a group and a member) stays; its lease goes.
        named = {name: value for name, value in result.items() if name not in _GRANTED}
        subject = " in ".join(str(value) for value in reversed(named.values()))
        message = (
            f"the lease on {subject} expired before the answer could be sent (the server"
            " or its database stalled for longer than the ttl); acquire again"
        )
        error = ApiError.lease_not_held(message)
        results.append(({**named, "status": error.status, "error": error.detail(request_id)}, None))
    return attrs.evolve(
        answer(results, replay=told.replayed), clock_us=told.clock_us, clock_at=told.clock_at
    )


# The field of a result that tells of what was renewed: a key's lease, a group's membership.
_GRANTED = frozenset({"lease", "membership"})
