"""Group commit: one fsync covers every commit made while the previous one ran.

Writers commit without syncing and take a ticket (`committed`). Whoever waits for a ticket
gets it synced: a worker thread blocks in `block_until_synced`, the event loop awaits `synced`.
The fsync itself runs on the syncer thread, which fdatasyncs the file once for every ticket
pending and then releases them all, so writers that commit while an fsync runs share the next
one; and while the loop waits, it goes on serving other requests. A caller with nothing else
to do (the only request in flight) may ask to sync `here`, on its own thread, to save the two
thread hand-offs, provided no fsync is under way already.

An fsync that fails fails every ticket it covered (`StorageUnavailable`, answered 503): their
commits are in the file but may not be on the disk, so nobody is told they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable

from ._base import StorageUnavailable

__all__ = ["Syncer"]


class Syncer:
    """Owns the thread that fdatasyncs `fd` for pending commits; `close` stops it."""

    def __init__(self, fd: int, sync: Callable[[int], None] | None = None) -> None:
        self._fd = fd
        self._sync = sync  # None: os.fdatasync, looked up at each call
        # One lock, two conditions: the syncer thread waits on `_work` (a ticket wanted, or
        # stopping), threads blocked in `block_until_synced` on `_cond` (a ticket synced). A
        # sync done on the loop (`here`) then wakes neither unless one of them has a reason to
        # run: waking the idle syncer thread only to re-check its predicate took the GIL from
        # the loop on every uncontended request (py-spy: 7.6 % of the server's GIL time, issue
        # 27).
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._blocked = 0  # threads in `block_until_synced`
        self._committed = 0  # tickets taken
        self._synced = 0  # every ticket up to this one is on disk (or failed)
        self._wanted = 0  # the latest ticket someone waits for
        self._busy = False  # an fsync is under way
        self._failed: list[tuple[int, int, str]] = []  # (first, last, why) of failed fsyncs
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._stop = False
        self.fsyncs = 0
        self._thread = threading.Thread(target=self._run, name="volcano-sqlite-syncer", daemon=True)
        self._thread.start()

    def committed(self) -> int:
        """Take the ticket of a commit just made; it is synced once someone waits for it."""
        with self._cond:
            self._committed += 1
            return self._committed

    def last(self) -> int:
        """The ticket of the latest commit so far."""
        with self._cond:
            return self._committed

    def block_until_synced(self, ticket: int) -> None:
        """Block until `ticket` is on disk; StorageUnavailable if its fsync failed."""
        with self._cond:
            self._want(ticket)
            self._blocked += 1
            try:
                self._cond.wait_for(lambda: self._synced >= ticket)
            finally:
                self._blocked -= 1
        self._check(ticket)

    async def synced(self, ticket: int, *, here: bool = False) -> None:
        """Return once `ticket` is on disk.

        With `here`, fsync on this thread (blocking it) if no fsync is under way; otherwise
        suspend the awaiting task, not the loop, while the syncer thread does it.
        """
        batch: tuple[int, int] | None = None
        future: asyncio.Future[None] | None = None
        with self._cond:
            if self._synced >= ticket:
                pass
            elif here and not self._busy:
                batch = self._claim()
            else:
                loop = asyncio.get_running_loop()
                future = loop.create_future()
                self._waiters.append((ticket, loop, future))
                self._want(ticket)
        if batch is not None:
            self._fsync(*batch)
        elif future is not None:
            await future
        self._check(ticket)

    def close(self) -> None:
        """Sync what is pending, then stop the thread."""
        with self._cond:
            self._stop = True
            self._want(self._committed)
        self._thread.join()

    def _want(self, ticket: int) -> None:
        """(Holding the lock.) Ask the syncer thread to cover `ticket`."""
        self._wanted = max(self._wanted, ticket)
        self._work.notify()

    def _claim(self) -> tuple[int, int]:
        """(Holding the lock, no fsync under way.) Take every pending ticket for one fsync."""
        self._busy = True
        return self._synced + 1, self._committed

    def _check(self, ticket: int) -> None:
        with self._cond:
            for first, last, why in self._failed:
                if first <= ticket <= last:
                    raise StorageUnavailable(f"sqlite: the commit did not reach the disk: {why}")

    def _run(self) -> None:
        while True:
            with self._cond:
                self._work.wait_for(
                    lambda: not self._busy and (self._stop or self._wanted > self._synced)
                )
                if self._wanted <= self._synced:
                    return  # stopping, and nothing is pending
                batch = self._claim()
            self._fsync(*batch)

    def _fsync(self, first: int, target: int) -> None:
        """Fdatasync once for tickets `first` to `target`, then release their waiters."""
        try:
            (self._sync or os.fdatasync)(self._fd)
        except OSError as exc:
            with self._cond:
                self._failed = [*self._failed[-15:], (first, target, str(exc))]
        with self._cond:
            self.fsyncs += 1
            self._busy = False
            self._synced = target
            if self._blocked:
                self._cond.notify_all()
            if self._stop or self._wanted > target:  # more to sync, now that none runs
                self._work.notify()
            ready = [w for w in self._waiters if w[0] <= target]
            self._waiters = [w for w in self._waiters if w[0] > target]
        for _, loop, future in ready:
            # RuntimeError: its loop has closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
