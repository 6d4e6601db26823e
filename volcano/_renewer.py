"""The renewal loop of a `Client`: one thread serves every guard, a few threads send.

The loop thread sleeps until its `Schedule` needs it (a renewal due, an at-risk point, a deadline, a
new guard, or close), takes a step, calls the user's callbacks, and hands the batches of renewals to
at most `MAX_IN_FLIGHT` sender threads. A sender sends, takes its outcomes in with a step of its own
(calling the callbacks they bring) and goes on with whatever fell due meanwhile, so one slow answer
holds up only the leases of its own batch, and a busy loop does not pass every batch between
threads; a sender thread starts only when all the others are busy. All are daemon threads, like the
loop: a program that never closes its client is not kept from exiting by a renewal waiting for its
answer.

State is shared behind one `threading.Condition`; the loop's `finally` leaves every guard it still
serves lost, so a guard is never left looking held by a loop that is gone.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from typing import TYPE_CHECKING

from ._exceptions import LockLostError
from ._ownership import deliver
from ._schedule import MAX_IN_FLIGHT, BatchesUnsupported, Schedule

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._clock import Clock
    from ._exceptions import Error
    from ._ownership import Ownership
    from ._schedule import Batch, Outcome, Work

logger = logging.getLogger("volcano")


class Renewer:
    """Renews the leases of a client's guards from one lazily started thread.

    Args:
        send: Sends one batch and returns each lease's outcome, in order (never raising but
            `BatchesUnsupported`).
        clock: The client's clock.
        limit: How many requests may be under way at once.
    """

    def __init__(
        self,
        send: Callable[[Batch], Sequence[Outcome]],
        clock: Clock,
        limit: int = MAX_IN_FLIGHT,
    ) -> None:
        self._send = send
        self._clock = clock
        self._changed = threading.Condition()
        self._schedule = Schedule(limit)
        self._thread: threading.Thread | None = None
        self._senders = _Senders(limit)
        self._waiting = False

    def add(self, guard: Ownership) -> None:
        """Renew `guard` from now on; once stopped, mark it lost at once."""
        with self._changed:
            reason = self._schedule.stopped
            if reason is None:
                self._schedule.add(guard)
                self._start()
                self._changed.notify_all()
        if reason is not None:
            deliver(guard.stop(reason))

    def remove(self, guard: Ownership) -> None:
        """Stop renewing `guard`, after waiting for a renewal of it already under way."""
        with self._changed:
            self._schedule.remove(guard)
            while self._schedule.busy(guard):
                self._changed.wait()

    def stop(self, reason: Error) -> None:
        """Stop the loop; every guard still served is lost because of `reason`."""
        with self._changed:
            notices = self._schedule.stop(reason)
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._senders.stop()  # renewals under way end within their own timeouts
        deliver(notices)

    def settled(self) -> bool:
        """Whether the loop is asleep with no renewal under way (a test's fake clock asks)."""
        with self._changed:
            return (self._thread is None or self._waiting) and self._schedule.idle()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="volcano-renewer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while (work := self._next_work()) is not None:
                deliver(work.notices)
                for batch in work.starts:
                    self._senders.run(functools.partial(self._renew, batch))
        except Exception:
            logger.exception("the lease renewer stopped unexpectedly")
        finally:
            with self._changed:
                notices = self._schedule.stop(LockLostError("the lease renewer stopped"))
                self._changed.notify_all()
            deliver(notices)

    def _next_work(self) -> Work | None:
        """Sleep until the schedule has something to do, and take that step; None once stopped."""
        with self._changed:
            while self._schedule.stopped is None:
                work = self._schedule.step(self._clock.monotonic())
                self._changed.notify_all()  # for remove(): a finished renewal was taken in
                if work.starts or work.notices:
                    return work
                pause = self._schedule.next_wake(self._clock.monotonic())
                if pause == 0:
                    continue
                self._waiting = True
                self._clock.wait(self._changed, pause)
                self._waiting = False
            return None

    def _renew(self, batch: Batch) -> None:
        """Send `batch`, take its outcomes in, and go on with any batch now due.

        A sender takes in its own outcomes and starts what has fallen due meanwhile itself, so
        a busy loop does not hand every batch from thread to thread twice.
        """
        while True:
            outcomes: Sequence[Outcome] = batch.unsent()
            unsupported = False
            try:
                outcomes = self._send(batch)
            except BatchesUnsupported:
                unsupported = True
            except Exception as exc:  # noqa: BLE001 - a bug loses this batch, never the loop
                outcomes = batch.failed(exc)
            finally:
                with self._changed:
                    if unsupported:
                        self._schedule.singles()
                    self._schedule.finish(batch, outcomes)
                    work = self._schedule.step(self._clock.monotonic())
                    self._changed.notify_all()  # remove() waits for this; the loop re-plans
            deliver(work.notices)
            if not work.starts:
                return
            batch, *others = work.starts
            for other in others:
                self._senders.run(functools.partial(self._renew, other))


class _Senders:
    """Up to `limit` daemon threads that run renewal attempts, started only when needed.

    The schedule never has more than `limit` attempts under way, so every attempt handed over
    finds a thread that is idle or newly started: none waits behind another.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0

    def run(self, job: Callable[[], None]) -> None:
        """Run `job` on an idle sender, or on a new one."""
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._limit:
                thread = threading.Thread(
                    target=self._work, name=f"volcano-renewal-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._queue.put(job)

    def stop(self) -> None:
        """End every sender once its job (if any) is done."""
        with self._lock:
            threads, self._threads, self._idle = self._threads, [], 0
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            job()
            with self._lock:
                self._idle += 1
