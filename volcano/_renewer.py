"""The one background thread of a `Client` that renews every active guard's lease.

A thousand guards are one thread: guards wait in a heap ordered by when their next renewal is
due, and the thread sleeps until the earliest (or until a guard is added or the client closes).
Renewals run one at a time, each bounded by the time its lease has left.

The thread owns its stop flag and shared state behind one `threading.Condition`; its `finally`
leaves every guard it still serves lost, so a guard is never left looking held by a renewer
that is gone.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from typing import TYPE_CHECKING, Protocol

from ._exceptions import Error, LockLostError

if TYPE_CHECKING:
    from ._clock import Clock

logger = logging.getLogger("volcano")


class Renewable(Protocol):
    """What the renewer needs of a guard."""

    def _renew_due(self) -> float | None:
        """Make one renewal attempt; return when the next is due, or None when done."""

    def _abandon(self, reason: Error) -> None:
        """Mark the guard lost because renewal stopped for `reason`."""


class Renewer:
    """Renews the leases of many guards from one lazily started thread."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Renewable]] = []
        self._entry: dict[Renewable, int] = {}  # guard -> sequence number of its live heap entry
        self._in_flight: set[Renewable] = set()
        self._sequence = itertools.count()
        self._stop_reason: Error | None = None
        self._thread: threading.Thread | None = None

    def add(self, guard: Renewable, due: float) -> None:
        """Renew `guard` from `due` on; after `stop`, mark it lost at once."""
        with self._changed:
            reason = self._stop_reason
            if reason is None:
                self._push(guard, due)
                self._start_thread()
                self._changed.notify_all()
        if reason is not None:
            guard._abandon(reason)

    def remove(self, guard: Renewable) -> None:
        """Stop renewing `guard`, after waiting for a renewal of it already under way."""
        with self._changed:
            self._entry.pop(guard, None)
            while guard in self._in_flight:
                self._changed.wait()

    def stop(self, reason: Error) -> None:
        """Stop the thread and mark every guard still served lost because of `reason`."""
        with self._changed:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._abandon_all()

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="volcano-renewer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while (batch := self._wait_for_due()) is not None:
                for guard in batch:
                    self._serve(guard)
        except Exception:
            logger.exception("the lease renewer stopped unexpectedly")
            with self._changed:
                if self._stop_reason is None:
                    self._stop_reason = LockLostError("the lease renewer stopped unexpectedly")
        finally:
            self._abandon_all()

    def _wait_for_due(self) -> list[Renewable] | None:
        """Sleep until some guards are due and claim them; None once stopped."""
        with self._changed:
            while self._stop_reason is None:
                now = self._clock.monotonic()
                due = self._pop_due(now)
                if due:
                    self._in_flight.update(due)
                    return due
                self._clock.wait(self._changed, self._seconds_until_due(now))
            return None

    def _serve(self, guard: Renewable) -> None:
        try:
            next_due = guard._renew_due()
        except Exception as exc:
            logger.exception("renewing a lease failed unexpectedly")
            reason = LockLostError("renewing the lease failed unexpectedly")
            reason.__cause__ = exc
            guard._abandon(reason)
            next_due = None
        with self._changed:
            self._in_flight.discard(guard)
            if next_due is None:
                self._entry.pop(guard, None)
            elif guard in self._entry:  # not removed while its renewal ran
                self._push(guard, next_due)
            self._changed.notify_all()

    def _push(self, guard: Renewable, due: float) -> None:
        sequence = next(self._sequence)
        self._entry[guard] = sequence
        heapq.heappush(self._heap, (due, sequence, guard))

    def _pop_due(self, now: float) -> list[Renewable]:
        due: list[Renewable] = []
        while self._heap and self._heap[0][0] <= now:
            _, sequence, guard = heapq.heappop(self._heap)
            if self._entry.get(guard) == sequence:
                due.append(guard)
        return due

    def _seconds_until_due(self, now: float) -> float | None:
        while self._heap and self._entry.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)  # a removed guard's entry
        return max(0.0, self._heap[0][0] - now) if self._heap else None

    def _abandon_all(self) -> None:
        with self._changed:
            reason = self._stop_reason or LockLostError("the lease renewer stopped")
            guards = list(self._entry)
            self._entry.clear()
            self._heap.clear()
            self._changed.notify_all()
        for guard in guards:
            guard._abandon(reason)
