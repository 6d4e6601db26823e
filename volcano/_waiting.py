"""Waiting for a lock: how a long wait is cut into requests. Decisions only, no I/O.

One request may wait at most `WAIT_PER_REQUEST` seconds (the server allows 60; staying below
the idle timeout of common proxies and load balancers, 60 s, keeps a quiet connection from being
cut). A longer wait is a chain of requests with the same owner token, each sent as soon as the
previous one ran out, so the server keeps the caller's place in line between them. The first
request carries the caller's request id; each later one a fresh id (its body differs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._validate import new_uuid

if TYPE_CHECKING:
    from ._models import LockLease
    from ._requests import Acquisition
    from ._seam import Call

__all__ = ["WAIT_PER_REQUEST", "WaitChain"]

WAIT_PER_REQUEST = 50.0
"""The longest one request waits; longer waits are chained."""


class WaitChain:
    """The requests of one acquisition, by the client's monotonic clock.

    Args:
        acquisition: What to acquire, and how long to wait in all.
        now: When the acquisition starts (monotonic seconds).
    """

    def __init__(self, acquisition: Acquisition, now: float) -> None:
        self._acquisition = acquisition
        self._deadline = now + acquisition.wait
        self._request_id = acquisition.request_id

    def next_call(self, now: float) -> tuple[Call[LockLease], float]:
        """The next request and how long it waits (0: it asks once and answers at once)."""
        wait = max(0.0, min(self._deadline - now, WAIT_PER_REQUEST))
        return self._acquisition.call(wait=wait, request_id=self._request_id), wait

    def goes_on(self, now: float) -> bool:
        """After a request's wait ran out (409 lock_held): whether another request follows."""
        if self._acquisition.wait <= 0 or self._deadline - now <= 0:
            return False
        self._request_id = new_uuid()
        return True
