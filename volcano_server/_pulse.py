"""This server's own heartbeat, and whether the others' can be judged by it.

Another server counts as dead once its heartbeat row lapses: its waiters are stepped over and,
later, purged. But when the database itself was away (a failover, a restart, a cut link), every
server's heartbeat lapsed for that reason alone, and the first server back would step over the
live waiters of the others before they had a chance to beat again. So a server judges others'
heartbeats only while its own is alive and has been without a lapse for a whole heartbeat
lifetime: by then every live server has had that same lifetime to beat on the database as it
is now. Until then a waiter of a lapsed server is treated as alive (its key is reserved for it,
which costs a dead server's waiter a reservation's length), and nobody's waiters are purged.

Only written heartbeats count, timed from when each write began (its row lives a lifetime from
a moment no earlier): a write still under way when the database went away says nothing, so a
server cannot judge others on the strength of a beat that is failing but has not failed yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Pulse"]


class Pulse:
    """Whether this server's heartbeat is alive and has run without a lapse for `lifetime`.

    The beat loop wraps each heartbeat write in `beating()`; anyone may ask `judges_others`
    from any thread (the state is one tuple, replaced whole).
    """

    def __init__(self, lifetime: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._lifetime = lifetime
        self._clock = clock
        # (when the last written beat began, when the current run without a lapse began)
        self._state: tuple[float, float] | None = None

    @contextmanager
    def beating(self) -> Iterator[None]:
        """Around one heartbeat write: it counts if the block ends without an exception."""
        began = self._clock()
        yield
        state = self._state
        if state is None or began - state[0] > self._lifetime:  # first, or after a lapse
            self._state = (began, began)
        else:
            self._state = (began, state[1])

    def judges_others(self) -> bool:
        """Whether another server's lapsed heartbeat means that server is gone."""
        state, now = self._state, self._clock()
        if state is None:
            return False
        last, unbroken_since = state
        return now - last < self._lifetime and now - unbroken_since >= self._lifetime
