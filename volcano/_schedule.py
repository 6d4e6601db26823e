"""The renewal loop's decisions, shared by the thread of `Client` and the task of `AsyncClient`.

One loop per client serves every guard. A `Schedule` knows when each guard needs the loop next
(a renewal due, the at-risk point, the deadline), which renewals are under way, and what came
back; it does no I/O and takes `now` as an argument. The loop (`_renewer.py`, `_async_renewer.py`)
only waits, starts the attempts a `Schedule` hands it, reports their outcomes, and calls the
user's callbacks outside its lock.

Renewals do not wait on each other: up to `MAX_IN_FLIGHT` run at once, so one slow answer
holds up only its own guard. Beyond that, due guards queue in the order they fell due. A guard
whose renewal is under way is still woken for its at-risk point and deadline, so those moves
(and their callbacks) happen on time however long the answer takes.

The loop's owner holds a lock around every call (the asyncio loop runs them on one thread).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import TYPE_CHECKING

import attrs

from ._exceptions import Error, LockLostError

if TYPE_CHECKING:
    from ._models import LockLease
    from ._ownership import Attempt, Notice, Ownership
    from ._transport import Answer

logger = logging.getLogger("volcano")

MAX_IN_FLIGHT = 8
"""How many renewals of one client may be under way at once."""


@attrs.frozen
class Outcome:
    """How a renewal attempt ended: an answer, an error, or neither (it was cancelled)."""

    answer: Answer[LockLease] | None = None
    error: Error | None = None


@attrs.define
class Work:
    """What the loop must do after a step: start these attempts, call these callbacks."""

    starts: list[tuple[Ownership, Attempt]] = attrs.Factory(list)
    notices: list[Notice] = attrs.Factory(list)


class Schedule:
    """Every guard one client renews, when each needs the loop, and the renewals under way."""

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self._limit = limit
        self._heap: list[tuple[float, int, Ownership]] = []
        self._entry: dict[Ownership, int] = {}  # served guard -> its live heap entry
        self._ready: dict[Ownership, None] = {}  # due for a renewal, waiting for a slot
        self._in_flight: set[Ownership] = set()
        self._finished: list[tuple[Ownership, Outcome]] = []
        self._sequence = itertools.count()
        self.stopped: Error | None = None

    def __len__(self) -> int:
        return len(self._entry)

    def add(self, guard: Ownership) -> None:
        """Serve `guard` from now on."""
        self._push(guard)

    def remove(self, guard: Ownership) -> bool:
        """Stop serving `guard`; return whether a renewal of it is still under way."""
        self._entry.pop(guard, None)
        self._ready.pop(guard, None)
        return guard in self._in_flight

    def busy(self, guard: Ownership) -> bool:
        """Whether a renewal of `guard` is under way (its outcome not yet taken in)."""
        return guard in self._in_flight

    def finish(self, guard: Ownership, outcome: Outcome) -> None:
        """Note how a renewal ended; the next `step` takes it in."""
        self._finished.append((guard, outcome))

    def step(self, now: float) -> Work:
        """Take in finished renewals, make the moves due at `now`, and start what may start."""
        work = Work()
        finished, self._finished = self._finished, []
        for guard, outcome in finished:
            self._in_flight.discard(guard)
            work.notices += _take_in(guard, outcome, now)
            if guard in self._entry:
                self._push(guard)
        while self._heap and self._heap[0][0] <= now:
            _, sequence, guard = heapq.heappop(self._heap)
            if self._entry.get(guard) != sequence:
                continue  # superseded, or the guard left
            notices, renew = guard.due(now)
            work.notices += notices
            if renew:
                self._ready[guard] = None
            self._push(guard, renewal=not renew)
        while self._ready and len(self._in_flight) < self._limit:
            guard = next(iter(self._ready))
            del self._ready[guard]
            attempt = guard.begin_renewal(now)
            if attempt is not None:
                self._in_flight.add(guard)
                work.starts.append((guard, attempt))
                self._push(guard)  # still woken for its at-risk point and deadline
        return work

    def next_wake(self, now: float) -> float | None:
        """Seconds until the loop must step again (0: at once), or None: only when told."""
        if self._finished or (self._ready and len(self._in_flight) < self._limit):
            return 0.0
        while self._heap and self._entry.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return max(0.0, self._heap[0][0] - now) if self._heap else None

    def idle(self) -> bool:
        """Whether no renewal is under way or waiting to be taken in."""
        return not self._in_flight and not self._finished

    def stop(self, reason: Error) -> list[Notice]:
        """Stop for good: every guard still served, and any added later, is lost for `reason`."""
        if self.stopped is None:
            self.stopped = reason
        return self.abandon(reason)

    def abandon(self, reason: Error) -> list[Notice]:
        """Lose every guard still served because of `reason`, and forget them."""
        guards = list(self._entry)
        self._entry.clear()
        self._ready.clear()
        self._heap.clear()
        self._finished.clear()
        self._in_flight.clear()
        notices: list[Notice] = []
        for guard in guards:
            notices += guard.stop(reason)
        return notices

    def _push(self, guard: Ownership, *, renewal: bool = True) -> None:
        wake = guard.next_wake(renewal=renewal)
        if wake is None:
            self._entry.pop(guard, None)
            self._ready.pop(guard, None)
            return
        sequence = next(self._sequence)
        self._entry[guard] = sequence
        heapq.heappush(self._heap, (wake, sequence, guard))


def _take_in(guard: Ownership, outcome: Outcome, now: float) -> list[Notice]:
    if outcome.answer is not None:
        return guard.renewed(outcome.answer, now)
    if outcome.error is not None:
        return guard.renewal_failed(outcome.error, now)
    guard.renewal_ended()
    return []


def failed(guard: Ownership, exc: Exception) -> Outcome:
    """The outcome of a renewal attempt that raised `exc`.

    A volcano error is judged by the guard's rules; anything else is a bug, logged, and loses
    that guard (only that one) with a `LockLostError` caused by it.
    """
    if isinstance(exc, Error):
        return Outcome(error=exc)
    logger.error("renewing the lease on %s failed unexpectedly", guard.key, exc_info=exc)
    reason = LockLostError(f"renewing the lease on {guard.key!r} failed unexpectedly")
    reason.__cause__ = exc
    return Outcome(error=reason)
