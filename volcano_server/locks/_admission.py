"""Fair admission: each project's share of the server's storage time, lease-keeping first.

Storage work that runs in a worker thread (all of it on PostgreSQL; on SQLite, work that would
block and work too long for the event loop) takes a slot while it runs: `slots` at once, which
on PostgreSQL are the pool's connections. While every slot is taken, work waits in line, and
each freed slot goes to the project that has used the least storage time lately (the measured
duration of its work, decayed with a half-life of `half_life` seconds); within a project,
work that keeps a lease alive or hands it on (renewals, releases, hand-offs) goes first. So a
project that floods the server waits behind its own work, and one that asks little is served
next, whatever the flood: what a project may cost the others is one slot's work at a time.
`reserved` slots are kept for lease-keeping work, so reads can never take every slot away from
a renewal.

Work for a client's request that has waited `patience` seconds in line is refused with 429 and
`Retry-After` (only the flooding project is kept waiting that long); work the server does for
itself (a hand-off, a watch's read) waits for its turn however long it takes.

Work run on the event loop (short local SQLite transactions, bounded by the API's bounds) takes
no slot and never waits, but its duration is charged to its project like any other.

Everything here runs on the event loop: no lock is needed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable

import attrs

from ..wire._errors import ApiError

__all__ = ["KEY_LOOKUP", "UPKEEP", "Admission", "Job"]


@attrs.frozen
class Job:
    """Whose storage work this is, and how it may be served.

    `project`: whose share it counts against (None: the server's own upkeep, never queued).
    `keeps`: it keeps a lease alive or hands one on (renew, release, a hand-off): first in its
    project's line, and it may use the reserved slots. `request`: a client waits for it, so it
    is refused 429 past the line's patience rather than waiting on.
    """

    project: int | None
    keeps: bool = False
    request: bool = True


UPKEEP = Job(None, keeps=True, request=False)
"""The server's own work (heartbeats, revocation checks): no project's share."""

KEY_LOOKUP = Job(-1)
"""Looking up a request's keys before its project is known: they share one pseudo-project's
share, so a flood of requests with made-up keys (never cached) waits behind itself, not
before the projects' work."""


class _Waiting:
    """Work waiting in its project's line for a slot."""

    __slots__ = ("granted", "keeps")

    def __init__(self, keeps: bool) -> None:
        self.keeps = keeps
        self.granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class Admission:
    """Slots for storage work, handed out by each project's recent use (see the module)."""

    def __init__(
        self,
        slots: int,
        *,
        reserved: int = 1,
        patience: float = 2.0,
        half_life: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[], object] = lambda: None,
    ) -> None:
        if slots < 1 or not 0 <= reserved < slots:
            raise ValueError(f"need 1 or more slots, fewer of them reserved: {slots}, {reserved}")
        self.slots = slots
        self._open_to_all = slots - reserved  # the slots any work may take
        self._patience = patience
        self._decay = math.log(2) / half_life
        self._clock = clock
        self._busy = 0  # slots taken
        self._busy_open = 0  # of those, by work that is not lease-keeping
        self._lines: dict[int, tuple[collections.deque[_Waiting], collections.deque[_Waiting]]]
        self._lines = {}  # project -> (its lease-keeping work, its other work), each in order
        self._used: dict[int, tuple[float, float]] = {}  # project -> (seconds, when), decaying
        self.refused = 0  # requests refused for waiting past patience
        self._on_refused = on_refused

    @property
    def waiting(self) -> int:
        """How much work waits in line for a slot."""
        return sum(len(keep) + len(other) for keep, other in self._lines.values())

    def used(self, project: int) -> float:
        """The project's recent storage time: seconds, decayed by age."""
        seconds, at = self._used.get(project, (0.0, 0.0))
        return seconds * math.exp(-self._decay * max(0.0, self._clock() - at))

    def charge(self, project: int | None, seconds: float) -> None:
        """Count `seconds` of storage time against `project` (work done on the loop, say)."""
        if project is not None and seconds > 0:
            self._used[project] = (self.used(project) + seconds, self._clock())
            if len(self._used) > 10_000:  # bounded: forget the projects that used least
                for quiet, _ in sorted(self._used.items(), key=lambda x: x[1])[:5_000]:
                    del self._used[quiet]

    @contextlib.asynccontextmanager
    async def slot(self, job: Job) -> AsyncIterator[None]:
        """Hold a slot for the block: at once if one is free and nobody waits, else in line.

        The block's duration is charged to the job's project.

        Raises:
            ApiError: 429 for a request that waited in line past the patience.
        """
        project = job.project
        if project is None:
            yield  # upkeep: no slot, no line (it is small, and the server depends on it)
            return
        if not self._free_for(job.keeps) or self._lines:
            await self._wait(project, job)
        else:
            self._take(job.keeps)
        started = self._clock()
        try:
            yield
        finally:
            self.charge(project, self._clock() - started)
            self._give_back(job.keeps)

    def _free_for(self, keeps: bool) -> bool:
        if self._busy >= self.slots:
            return False
        return keeps or self._busy_open < self._open_to_all

    def _take(self, keeps: bool) -> None:
        self._busy += 1
        if not keeps:
            self._busy_open += 1

    def _give_back(self, keeps: bool) -> None:
        self._busy -= 1
        if not keeps:
            self._busy_open -= 1
        self._dispatch()

    async def _wait(self, project: int, job: Job) -> None:
        waiting = _Waiting(job.keeps)
        line = self._lines.setdefault(project, (collections.deque(), collections.deque()))
        line[0 if job.keeps else 1].append(waiting)
        self._dispatch()  # a slot may be free for this one, past others that cannot use it
        try:
            if job.request:
                async with asyncio.timeout(self._patience):
                    await asyncio.shield(waiting.granted)
            else:
                await asyncio.shield(waiting.granted)
        except BaseException as exc:
            if waiting.granted.done() and not waiting.granted.cancelled():
                self._give_back(job.keeps)  # granted as it gave up: the slot goes on
            else:
                waiting.granted.cancel()
                self._leave_line(project, waiting)
            if isinstance(exc, TimeoutError):
                self.refused += 1
                self._on_refused()
                raise ApiError.over_time_share(math.ceil(self._patience)) from None
            raise

    def _leave_line(self, project: int, waiting: _Waiting) -> None:
        line = self._lines.get(project)
        if line is None:
            return
        with contextlib.suppress(ValueError):
            line[0 if waiting.keeps else 1].remove(waiting)
        if not line[0] and not line[1]:
            del self._lines[project]

    def _dispatch(self) -> None:
        """Give free slots to waiting work: the project that used least first, keepers first."""
        while self._lines and self._busy < self.slots:
            choice: tuple[float, int, _Waiting] | None = None
            for project, (keep, other) in self._lines.items():
                if keep:
                    first = keep[0]
                elif other and self._busy_open < self._open_to_all:
                    first = other[0]
                else:
                    continue
                used = self.used(project)
                if choice is None or used < choice[0]:
                    choice = (used, project, first)
            if choice is None:
                return  # only reads wait, and the slots left are reserved
            _, project, first = choice
            self._leave_line(project, first)
            self._take(first.keeps)
            first.granted.set_result(None)
