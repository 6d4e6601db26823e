"""Work that arrives in bursts, done at most so much per turn of the event loop.

uvloop (libuv) accepts every pending connection in one turn of its loop, runs every timer that
is due in one turn, and every callback made ready in one turn. A burst of 3,000 connections, or
3,000 clients whose deadlines pass together, then holds the loop for hundreds of milliseconds
in one piece, and every request already under way waits that long. A `Pacer` runs such work in
order, at most `per_turn` items per turn, leaving the loop to poll its sockets in between.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["Pacer"]


class Pacer:
    """Runs callbacks in the order given, at most `per_turn` of them per event-loop turn."""

    def __init__(self, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, got {per_turn}")
        self._per_turn = per_turn
        self._queue: deque[Callable[[], None]] = deque()
        self._done = 0  # callbacks run in the current turn
        self._next_turn: asyncio.Handle | None = None  # counts the next turn from zero

    def __len__(self) -> int:
        """How many callbacks wait for a later turn."""
        return len(self._queue)

    def submit(self, work: Callable[[], None]) -> None:
        """Run `work` now if this turn has room and nothing waits before it, else later."""
        if self._next_turn is None:
            self._done = 0  # nothing ran since the last count: this turn starts from zero
            self._next_turn = asyncio.get_running_loop().call_soon(self._turn)
        if self._queue or self._done >= self._per_turn:
            self._queue.append(work)
            return
        self._done += 1
        work()

    def _turn(self) -> None:
        """A new turn: run what waits, up to the turn's share, and count the turn after."""
        self._next_turn = None
        self._done = 0
        try:
            while self._queue and self._done < self._per_turn:
                self._done += 1
                self._queue.popleft()()
        finally:  # a callback that raised is the loop's to report; the rest still run
            if self._done:
                self._next_turn = asyncio.get_running_loop().call_soon(self._turn)
