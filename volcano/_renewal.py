"""When a with_lock guard renews, and when it has lost its lease: pure decisions, no I/O.

Time is the client's monotonic clock, counted from when the request that produced the current
lease was *sent*: the server's expiry is at least that late, so `deadline = sent_at + ttl` is
never after the real one. The first renewal is tried once a third of the ttl has passed,
leaving two thirds to retry transient failures (transport errors, timeouts, 5xx, 429) with a
short backoff, each attempt bounded by the time left. A 409 or another refusal (401, 403, 422,
...) ends ownership at once; reaching the deadline without a successful renewal ends it too.

A `Timeline` is shared between a guard's renewer and the threads reading `guard.lease` and
`guard.lost`, so it keeps its state behind a lock.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ._exceptions import APIConnectionError, APIStatusError, Error, LockLostError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._models import LockLease

logger = logging.getLogger("volcano")

RENEW_AFTER_FRACTION = 1 / 3
"""The share of the ttl that passes before the first renewal attempt."""
BACKOFF_FIRST = 0.1
"""Seconds before the first retry of a failed renewal (doubling after each failure)."""
BACKOFF_CAP = 2.0
"""The longest wait between renewal attempts."""
BACKOFF_TTL_FRACTION = 0.1
"""No wait between attempts is longer than this share of the ttl."""


def is_transient(error: BaseException) -> bool:
    """Whether a renewal that failed with `error` may succeed if tried again."""
    if isinstance(error, APIConnectionError):
        return True
    if isinstance(error, APIStatusError):
        status = error.status_code
        return status >= 500 or status in (408, 429) or status < 400
    return False


def backoff(failures: int, ttl: float) -> float:
    """Seconds to wait after the `failures`-th failed attempt in a row."""
    return min(BACKOFF_FIRST * 2.0 ** (failures - 1), BACKOFF_CAP, ttl * BACKOFF_TTL_FRACTION)


class Timeline:
    """One guard's lease by the client's clock: when to renew next, and whether it is lost.

    Args:
        lease: The lease just acquired.
        sent_at: When the request that produced it was sent (monotonic seconds).
        timeout: The client's request timeout; no attempt waits longer.
        on_lost: Called once, outside the lock, when the lease becomes lost.
    """

    def __init__(
        self, lease: LockLease, sent_at: float, *, timeout: float, on_lost: Callable[[], None]
    ) -> None:
        self._lock = threading.Lock()
        self._timeout = timeout
        self._on_lost = on_lost
        self._lease = lease
        self._deadline = sent_at + lease.ttl_seconds
        self._next_attempt_at = sent_at + lease.ttl_seconds * RENEW_AFTER_FRACTION
        self._failures = 0
        self._last_error: Error | None = None
        self._lost_reason: Error | None = None

    @property
    def lease(self) -> LockLease:
        """The latest lease."""
        with self._lock:
            return self._lease

    @property
    def deadline(self) -> float:
        """When the latest lease may have expired, by the monotonic clock."""
        with self._lock:
            return self._deadline

    @property
    def next_attempt_at(self) -> float:
        """When the next renewal attempt is due, by the monotonic clock."""
        with self._lock:
            return self._next_attempt_at

    @property
    def lost_reason(self) -> Error | None:
        """The error that ended ownership, or None while the lease is held."""
        with self._lock:
            return self._lost_reason

    def lost(self, now: float) -> bool:
        """Whether ownership is lost at `now`; reaching the deadline marks it lost."""
        with self._lock:
            if self._lost_reason is None and now < self._deadline:
                return False
        return self._expire_if_due(now)

    def begin_attempt(self, now: float) -> float | None:
        """The timeout for a renewal attempt starting at `now`, or None when it is too late."""
        if self.lost(now):
            return None
        with self._lock:
            return min(self._timeout, self._deadline - now)

    def succeeded(self, lease: LockLease, sent_at: float) -> float | None:
        """Record a renewal sent at `sent_at`; return when the next attempt is due."""
        with self._lock:
            if self._lost_reason is not None:
                return None  # too late: the deadline passed while the answer was on its way
            self._lease = lease
            self._deadline = sent_at + lease.ttl_seconds
            self._next_attempt_at = sent_at + lease.ttl_seconds * RENEW_AFTER_FRACTION
            self._failures = 0
            self._last_error = None
            return self._next_attempt_at

    def failed(self, error: Error, now: float) -> float | None:
        """Record a failed attempt; return when to try again, or None when ownership is lost."""
        if not is_transient(error):
            self.lose(error)
            return None
        with self._lock:
            if self._lost_reason is not None:
                return None
            self._failures += 1
            self._last_error = error
            pause = backoff(self._failures, self._lease.ttl_seconds)
            self._next_attempt_at = min(now + pause, self._deadline)
            next_attempt_at = self._next_attempt_at
        logger.info(
            "renewal of %s failed (%s), retrying in %.2fs (request_id=%s)",
            self._lease.key,
            type(error).__name__,
            next_attempt_at - now,
            getattr(error, "request_id", None),
        )
        return next_attempt_at

    def lose(self, reason: Error, *, log: bool = True) -> None:
        """Mark ownership lost because of `reason`, unless it already is.

        `log=False` is for a caller that has already logged the reason.
        """
        with self._lock:
            if self._lost_reason is not None:
                return
            self._lost_reason = reason
            key = self._lease.key
        if log:
            # The reason's text carries the request id of the answer that ended ownership.
            logger.warning("lost the lease on %s: %s", key, reason)
        self._on_lost()

    def _expire_if_due(self, now: float) -> bool:
        """Mark ownership lost if the deadline has passed; return whether it is lost.

        A renewal may have landed since the caller looked, moving the deadline: then it is not
        lost, and saying so keeps `lost` from reading True once and False the next time.
        """
        with self._lock:
            if self._lost_reason is not None:
                return True
            if now < self._deadline:
                return False
            last = (
                "" if self._last_error is None else f"; the last attempt got {self._last_error!r}"
            )
            reason = LockLostError(
                f"no renewal of {self._lease.key!r} succeeded before its ttl of "
                f"{self._lease.ttl_seconds:g}s ran out{last}"
            )
            reason.__cause__ = self._last_error
        self.lose(reason)
        return True
