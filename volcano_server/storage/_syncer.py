"""Group commit: one thread fsyncs a file for every commit waiting, so concurrent writers share it.

Writers commit without syncing and take a ticket (`committed`); the syncer thread, whenever
tickets are pending, fdatasyncs the file once and marks every ticket taken before that fsync
began as synced. A writer's answer goes out only once its ticket is synced: threads wait with
`wait`, the event loop awaits `synced`. One client pays one fsync per commit as before; several
clients committing while an fsync runs share the next one.

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
        self._cond = threading.Condition()
        self._committed = 0  # tickets taken
        self._synced = 0  # every ticket up to this one is on disk (or failed)
        self._failed: list[tuple[int, int, str]] = []  # (first, last, why) of failed fsyncs
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._stop = False
        self.fsyncs = 0
        self._thread = threading.Thread(target=self._run, name="volcano-sqlite-syncer", daemon=True)
        self._thread.start()

    def committed(self) -> int:
        """Take the ticket of a commit just made; the syncer will cover it."""
        with self._cond:
            self._committed += 1
            self._cond.notify_all()
            return self._committed

    def last(self) -> int:
        """The ticket of the latest commit so far."""
        with self._cond:
            return self._committed

    def wait(self, ticket: int) -> None:
        """Block until `ticket` is on disk; StorageUnavailable if its fsync failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._synced >= ticket)
        self._check(ticket)

    async def synced(self, ticket: int) -> None:
        """Return once `ticket` is on disk, without blocking the event loop."""
        with self._cond:
            done = self._synced >= ticket
            if not done:
                loop = asyncio.get_running_loop()
                future: asyncio.Future[None] = loop.create_future()
                self._waiters.append((ticket, loop, future))
        if not done:
            await future
        self._check(ticket)

    def close(self) -> None:
        """Sync what is pending, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()

    def _check(self, ticket: int) -> None:
        with self._cond:
            for first, last, why in self._failed:
                if first <= ticket <= last:
                    raise StorageUnavailable(f"sqlite: the commit did not reach the disk: {why}")

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._committed > self._synced or self._stop)
                if self._committed == self._synced:
                    return  # stopping, nothing pending
                first, target = self._synced + 1, self._committed
            try:
                (self._sync or os.fdatasync)(self._fd)
            except OSError as exc:
                with self._cond:
                    self._failed = [*self._failed[-15:], (first, target, str(exc))]
            self._release(target)

    def _release(self, target: int) -> None:
        with self._cond:
            self.fsyncs += 1
            self._synced = target
            self._cond.notify_all()
            ready = [w for w in self._waiters if w[0] <= target]
            self._waiters = [w for w in self._waiters if w[0] > target]
        for _, loop, future in ready:
            # RuntimeError: its loop has closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
