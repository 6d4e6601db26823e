"""This server's own heartbeat, and whether the others' can be judged by it.

Another server counts as dead once its heartbeat row lapses: its waiters are stepped over and,
later, purged. But when the database itself was away (a failover, a restart, a cut link), every
server's heartbeat lapsed for that reason alone, and the first server back would step over the
live waiters of the others before they had a chance to beat again. So a server judges others'
heartbeats only once its own has been written without a break for a whole heartbeat lifetime:
by then every live server has had that same lifetime to beat on the database as it is now.
Until then a waiter of a lapsed server is treated as alive (its key is reserved for it, which
costs a dead server's waiter a reservation's length), and nobody's waiters are purged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Pulse"]


class Pulse:
    """Whether this server's heartbeat has run unbroken for `lifetime` seconds.

    Its writes are reported by the beat loop (`beat`); anyone may ask `judges_others` from
    any thread (a float read and written whole).
    """

    def __init__(self, lifetime: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._lifetime = lifetime
        self._clock = clock
        self._unbroken_since: float | None = None  # None: not written since start or a failure

    def beat(self, *, written: bool) -> None:
        """One heartbeat write: it reached the database, or it did not."""
        if not written:
            self._unbroken_since = None
        elif self._unbroken_since is None:
            self._unbroken_since = self._clock()

    def judges_others(self) -> bool:
        """Whether another server's lapsed heartbeat means that server is gone."""
        since = self._unbroken_since
        return since is not None and self._clock() - since >= self._lifetime
