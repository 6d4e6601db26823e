"""An asyncio event loop on a virtual clock that never sleeps: the explorer moves time itself.

`VirtualLoop` is asyncio's own selector loop with two documented extension points filled in: its
`time()` reads a virtual clock, and its selector never blocks. Asked to sleep (no callback ready,
no timer due: the selector is called with a timeout other than 0), the loop is idle, and it stops.
So `settle()` runs every callback that can run at the current virtual time, and `advance(t)`
moves time forward one due timer at a time, settling after each, so callbacks run in the order
and at the virtual times a real loop would run them, without any real waiting.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable

__all__ = ["VirtualLoop"]


class _NeverBlocks(selectors.DefaultSelector):
    """A selector that polls instead of waiting, and tells its loop when the loop went idle."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # asyncio asks for 0 while callbacks are ready, else for the time to its next timer
        # (None: it has none): anything but 0 means the loop would sleep.
        if timeout != 0 and self.loop is not None:
            self.loop.went_idle(timeout)
        return super().select(0)


class VirtualLoop(asyncio.SelectorEventLoop):
    """A loop whose time is virtual seconds, moved only by `advance`."""

    def __init__(self, start: float = 0.0) -> None:
        selector = _NeverBlocks()
        super().__init__(selector)
        selector.loop = self
        self._now = start
        self._idle = False
        self._next_due: float | None = None
        # Called with the new time whenever time moves (a database clock can follow it).
        self.on_time: Callable[[float], None] = lambda _now: None

    def time(self) -> float:
        """The virtual clock."""
        return self._now

    def went_idle(self, sleep: float | None) -> None:
        """Called by the selector when nothing can run until time moves: stop settling.

        `sleep` is how long the loop would sleep: until its next timer (None: no timer).
        """
        self._idle = True
        self._next_due = None if sleep is None else self._now + sleep
        self.stop()

    def settle(self) -> None:
        """Run everything that can run now (callbacks, due timers), without moving time."""
        self._idle = False
        while not self._idle:
            self.run_forever()

    def next_timer(self) -> float | None:
        """When the earliest pending timer is due (None: none), as of the last `settle`."""
        return self._next_due

    def advance(self, seconds: float) -> None:
        """Move time `seconds` forward, firing each timer due meanwhile at its own time."""
        end = self._now + seconds
        self.settle()
        while True:
            due = self.next_timer()
            if due is None or due > end:
                break
            self._set(max(self._now, due))
            self.settle()
        self._set(end)
        self.settle()

    def _set(self, now: float) -> None:
        self._now = now
        self.on_time(now)
