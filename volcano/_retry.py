"""Retry-once for acquisition: the decision, and thin sync and async shells around it.

An acquisition is retried exactly once, after a transport failure (timeout included) or a 503,
by repeating the very same request: same owner token, request id, key, ttl and credentials, so
that the server recovers the lease if the first attempt took effect. Nothing else is retried.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, TypeVar

from ._exceptions import APIConnectionError, Error, ServiceUnavailableError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

logger = logging.getLogger("volcano")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Attempt(Protocol[T_co]):
    """One attempt at a request: `resend` says it repeats the first, with its request id."""

    def __call__(self, *, resend: bool) -> T_co: ...


AFTER_TRANSPORT_FAILURE = 0.05
"""Seconds to wait before retrying after a transport failure."""
AFTER_UNAVAILABLE = 0.1
"""Seconds to wait before retrying after a 503 without Retry-After."""
RETRY_AFTER_CAP = 2.0
"""The longest a 503's Retry-After makes the retry wait."""


def retry_delay(error: Error) -> float | None:
    """Seconds to wait before the one retry after `error`, or None when it is not retried."""
    if isinstance(error, APIConnectionError):
        return AFTER_TRANSPORT_FAILURE
    if isinstance(error, ServiceUnavailableError):
        if error.retry_after is None:
            return AFTER_UNAVAILABLE
        return min(error.retry_after, RETRY_AFTER_CAP)
    return None


def retry_once(attempt: Attempt[T], sleep: Callable[[float], None], what: str) -> T:
    """Run `attempt(resend=False)`; after a retryable failure wait, then `attempt(resend=True)`.

    The retry's failure propagates; the first failure is in its `__context__` chain and named
    in a note.
    """
    try:
        return attempt(resend=False)
    except Error as first:
        delay = retry_delay(first)
        if delay is None:
            raise
        _log_retry(what, first, delay)
        sleep(delay)
        try:
            return attempt(resend=True)
        except Error as second:
            _note_first(second, first)
            raise


async def retry_once_async(
    attempt: Attempt[Awaitable[T]], sleep: Callable[[float], Awaitable[None]], what: str
) -> T:
    """The async twin of `retry_once`."""
    try:
        return await attempt(resend=False)
    except Error as first:
        delay = retry_delay(first)
        if delay is None:
            raise
        _log_retry(what, first, delay)
        await sleep(delay)
        try:
            return await attempt(resend=True)
        except Error as second:
            _note_first(second, first)
            raise


def _log_retry(what: str, error: Error, delay: float) -> None:
    logger.info(
        "%s failed (%s), retrying once in %.2fs (request_id=%s)",
        what,
        type(error).__name__,
        delay,
        getattr(error, "request_id", None),
    )


def _note_first(second: Error, first: Error) -> None:
    second.add_note(f"this was the one retry; the first attempt failed with {first!r}")
