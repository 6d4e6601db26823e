"""This server's own heartbeat, and whether the others' can be judged by it.

Another server counts as dead once its heartbeat row lapses: its waiters are stepped over and,
later, purged. But when the database itself was away (a failover, a restart, a cut link), every
server's heartbeat lapsed for that reason alone, and the first server back would step over the
live waiters of the others before they had a chance to beat again. So a server judges others'
heartbeats only while its own is alive and has been beating without a lapse for a whole
heartbeat lifetime. That is enough for a server whose heartbeat ran out while this one was
beating (the database was there: it did not beat, so it is gone). It is not enough for one
whose heartbeat ran out before this server's run began, in the same outage maybe: a live
server may reach the database again seconds later than this one (its connections to a host
that vanished must time out first, a new one may try the vanished host first, on a loaded
machine all of it slower), and judged dead its waiters would be stepped over by those behind
them. Such a server is judged only once the run has lasted `recovery_us` more (not in a
server's first run, from its start: a crashed server's waiters would block its keys). Until
then a waiter of a lapsed server is treated as alive (its key is reserved for it, which costs
a dead server's waiter a reservation's length each time), and nobody's waiters are purged.

Time here is the storage clock: each beat is dated by its own transaction's clock, and a
question is asked at a transaction's clock too, so servers with skewed clocks, and the
schedule explorer's virtual clock, agree. A beat that failed ends the run: only written beats
count.
"""

from __future__ import annotations

import threading

__all__ = ["Pulse"]


class Pulse:
    """Whether this server's heartbeat has run without a lapse for `lifetime_us`.

    The beat loop reports each written beat (`beat`) and each failed one (`lapsed`); the
    transactions ask `judges` from any thread, at their own clock, and the purge `judges_all`.
    """

    def __init__(self, lifetime_us: int, recovery_us: int = 0) -> None:
        self._lifetime = lifetime_us
        self._recovery = recovery_us
        self._lock = threading.Lock()
        # (when the last written beat was dated, when the current run without a lapse began)
        self._run: tuple[int, int] | None = None
        self._runs = 0
        self._after_lapse = False  # the current run began after a lapse or a gap of its own

    @property
    def runs(self) -> int:
        """How many runs have begun (a request placed in an earlier one may have been purged).

        Between two runs this server's heartbeat lapsed, or its beats hung, in others' eyes.
        """
        with self._lock:
            return self._runs

    def beat(self, at_us: int) -> bool:
        """A heartbeat dated `at_us` (its transaction's clock) was written.

        True if it begins a new run (the first beat, or one after a lapse or a gap): this
        server's heartbeat may have lapsed meanwhile in others' eyes.
        """
        with self._lock:
            run = self._run
            if run is None or at_us - run[0] > self._lifetime:  # the first, or after a gap
                self._run = (at_us, at_us)
                self._after_lapse = self._runs > 0
                self._runs += 1
                return True
            self._run = (at_us, run[1])
            return False

    def lapsed(self) -> None:
        """A heartbeat could not be written: judge nobody until a new run has lasted."""
        with self._lock:
            self._run = None

    def judges(self, now_us: int, lapsed_us: int) -> bool:
        """Whether, at `now_us`, a server whose heartbeat ran out at `lapsed_us` is gone.

        Only while this server's own heartbeat is fresh and has run a whole lifetime; when
        that run began after a lapse of its own (an outage), a server that lapsed before it
        began only once it has run `recovery_us` more. A server's first run (its start) waits
        for no recovery: a database that was there all along left the others none to make,
        and the waiters of a server that crashed and was restarted must not block its keys.
        """
        with self._lock:
            run, after_lapse = self._run, self._after_lapse
        if run is None:
            return False
        last, since = run
        lasted = now_us - since
        if now_us - last >= self._lifetime or lasted < self._lifetime:
            return False
        if lapsed_us >= since or not after_lapse:
            return True
        return lasted >= self._lifetime + self._recovery

    def judges_all(self, now_us: int) -> bool:
        """Whether every lapsed heartbeat may be judged at `now_us`, however old (the purge)."""
        return self.judges(now_us, 0)
