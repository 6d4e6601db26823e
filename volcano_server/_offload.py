"""Where storage work runs: on the event loop when it need not block, else in a worker thread.

Storage work is a function of one argument, whether it may block (`Work`). SQLite's short local
transactions are first tried on the loop with `False`: a backend that would have to wait raises
`WouldBlock` before changing anything, and only then is the work repeated in a worker thread
with `True`. Network backends (PostgreSQL) always go to a thread. The server takes its offload
at construction, so a test can run the very same server with storage work it schedules itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread

from .storage import WouldBlock

__all__ = ["Offload", "ThreadOffload", "Work"]

T = TypeVar("T")

Work = Callable[[bool], T]
"""Storage work, given whether it may block."""


class Offload(Protocol):
    """Runs storage work somewhere and returns its result (or raises its error)."""

    async def __call__(self, work: Callable[[bool], T]) -> T:
        """Run `work`."""
        ...


class ThreadOffload:
    """On the loop without blocking when the storage runs inline, else in a worker thread."""

    def __init__(self, *, inline: bool, threads: int = 32) -> None:
        self._inline = inline
        self._threads = anyio.CapacityLimiter(threads)

    async def __call__(self, work: Callable[[bool], T]) -> T:
        """Run `work`: inline first when allowed, in a thread when it would block."""
        if self._inline:
            try:
                return work(False)
            except WouldBlock:
                pass
        return await anyio.to_thread.run_sync(work, True, limiter=self._threads)
