"""The renewal engine's decisions: one pure scheduler per client, shared by both loops.

A `Schedule` knows when each guard needs the loop next (a renewal due, its at-risk point, its
deadline: a heap of those times), which renewals are under way, and what came back; it does no
I/O and takes `now` as an argument. The loops (in `_engine.py`, `_async_engine.py`) only wait,
hand the batches a step starts to the engine's send, report their outcomes, and call the user's
callbacks outside their lock.

Each step gathers the renewals that are due, and those due within `EARLY` seconds (at most a
twentieth of their ttl: `Ownership.due`), into batches of up to `BATCH_SIZE` leases: one request
each, so a client's guards cost a request per batch, not per guard (a batch of one is a plain
renew). A batch holds leases of one kind: keys' leases (`POST /v1/leases/renew`) or group
memberships (`POST /v1/members/renew`). Up to `MAX_IN_FLIGHT` requests are under way at
once, so a slow or failed one holds up only the leases it carries (which share its fate: a
request that never answers is given up when its most pressed lease runs out), never the next
batch; past that, due leases wait in the order they fell due. Each lease's outcome is judged
by its own guard: a refusal inside a batch loses that guard only, a transient failure retries
that lease after its own backoff. A guard whose renewal
is under way is still woken for its at-risk point and deadline, so those moves (and their
callbacks) happen on time however long the answer takes.

A guard let go of while its renewal is under way, or answered but not yet taken in, is
forgotten at once: its outcome is never taken in. An unexpected exception while the schedule
works on one guard (a bug) is contained to that guard: it is logged, the guard is lost with a
`LockLostError` caused by it (a guard that had left is only forgotten), and every other guard
is served on.

The loop's owner holds a lock around every call (the asyncio loop runs them on one thread).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
from typing import TYPE_CHECKING, Any

import attrs

from ._exceptions import Error, LockLostError
from ._validate import new_uuid

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from ._ownership import Notice, Ownership, Renewal
    from ._seam import Success

    Guard = Ownership[Any]

MAX_IN_FLIGHT = 8
"""How many renewal requests of one client may be under way at once."""
BATCH_SIZE = 500
"""The most leases one request renews (the server's limit)."""
EARLY = 0.1
"""Seconds before it is due that a renewal may go out, to share a request with others."""

logger = logging.getLogger("volcano")


class BatchesUnsupported(Exception):
    """The server has no batch renewal (an older one): send one lease per request."""


@attrs.frozen
class Batch:
    """Renewals that go out in one request, under its request id."""

    request_id: str
    entries: tuple[tuple[Guard, Renewal[Any]], ...]

    @property
    def leases(self) -> tuple[Any, ...]:
        """The leases to renew, in order: all of one kind (keys' leases, or memberships)."""
        return tuple(renewal.lease for _, renewal in self.entries)

    @property
    def subjects(self) -> list[str]:
        """What each lease is on, as logs name it (a key; a member of a group)."""
        return [guard.key for guard, _ in self.entries]

    @property
    def timeout(self) -> float:
        """How long the request may take: no longer than its most pressed lease has left."""
        return min(renewal.timeout for _, renewal in self.entries)

    def unsent(self) -> list[Outcome]:
        """Outcomes for a batch that never went out: each lease is due again as it was."""
        return [Outcome() for _ in self.entries]

    def failed(self, exc: Exception) -> list[Outcome]:
        """Outcomes for a batch whose send raised `exc`, which is not a volcano error: a bug.

        It is logged, and loses the guards of this batch (only these) with a `LockLostError`
        caused by it: nobody can tell whether their leases were renewed.
        """
        keys = ", ".join(guard.key for guard, _ in self.entries[:5])
        logger.error("renewing the leases on %s failed unexpectedly", keys, exc_info=exc)
        outcomes = []
        for guard, _ in self.entries:
            reason = LockLostError(f"renewing the lease on {guard.key!r} failed unexpectedly")
            reason.__cause__ = exc
            outcomes.append(Outcome(error=reason))
        return outcomes


@attrs.frozen
class Outcome:
    """How one lease's renewal ended: an answer, an error, or neither (it was not sent)."""

    answer: Success[Any] | None = None
    error: Error | None = None


@attrs.define
class Work:
    """What the loop must do after a step: send these batches, call these callbacks."""

    starts: list[Batch] = attrs.Factory(list)
    notices: list[Notice] = attrs.Factory(list)


class Schedule:
    """Every guard one client renews, when each needs the loop, and the batches under way.

    Args:
        limit: How many requests may be under way at once.
        batch_size: The most leases one request carries.
        new_id: Makes each request's id.
    """

    def __init__(
        self,
        limit: int = MAX_IN_FLIGHT,
        batch_size: int = BATCH_SIZE,
        new_id: Callable[[], str] = new_uuid,
    ) -> None:
        self._limit = limit
        self.batch_size = batch_size
        self._new_id = new_id
        self._heap: list[tuple[float, int, Guard]] = []
        self._entry: dict[Guard, int] = {}  # served guard -> its live heap entry
        self._ready: dict[Guard, None] = {}  # due for a renewal, waiting for a slot
        self._in_flight: dict[Guard, str] = {}  # guard -> the request carrying its renewal
        self._batches: set[str] = set()  # requests under way
        self._finished: dict[Guard, Outcome] = {}  # answered, not yet taken in (in order)
        self._let_go: set[Guard] = set()  # removed while under way: outcome not taken in
        self._sequence = itertools.count()
        self.stopped: Error | None = None

    def __len__(self) -> int:
        return len(self._entry)

    def add(self, guard: Guard) -> None:
        """Serve `guard` from now on."""
        self._push(guard)

    def remove(self, guard: Guard, *, let_go: bool = False) -> bool:
        """Stop serving `guard`; return whether a renewal of it is still under way.

        `let_go`: that renewal's outcome is not taken in when it comes (it stays under way for
        the others of its batch); otherwise the caller waits for it (`busy`).
        """
        self._entry.pop(guard, None)
        self._ready.pop(guard, None)
        busy = guard in self._in_flight
        if busy and let_go:
            if self._finished.pop(guard, None) is None:  # still under way in its batch
                self._let_go.add(guard)
            del self._in_flight[guard]
            guard.renewal_ended()
            return False
        return busy

    def busy(self, guard: Guard) -> bool:
        """Whether a renewal of `guard` is under way (its outcome not yet taken in)."""
        return guard in self._in_flight

    def finish(self, batch: Batch, outcomes: Sequence[Outcome]) -> None:
        """Note how each lease of `batch` fared (in order); the next `step` takes them in."""
        self._batches.discard(batch.request_id)
        for (guard, _), outcome in zip(batch.entries, outcomes, strict=True):
            if guard in self._let_go:
                self._let_go.discard(guard)
            elif self._in_flight.get(guard) == batch.request_id:
                self._finished[guard] = outcome

    def singles(self) -> None:
        """From now on, one lease per request (a server without batch renewals)."""
        self.batch_size = 1

    def step(self, now: float) -> Work:
        """Take in finished renewals, make the moves due at `now`, and start what may start."""
        work = Work()
        finished, self._finished = self._finished, {}
        for guard, outcome in finished.items():
            with self._contained(guard, work):
                del self._in_flight[guard]
                work.notices += _take_in(guard, outcome, now)
                if guard in self._entry:
                    self._push(guard)
        later: list[tuple[Guard, bool]] = []
        while self._heap and self._heap[0][0] <= now + EARLY:
            _, sequence, guard = heapq.heappop(self._heap)
            if self._entry.get(guard) != sequence:
                continue  # superseded, or the guard left
            with self._contained(guard, work):
                notices, renew = guard.due(now, early=EARLY)
                work.notices += notices
                if renew:
                    self._ready[guard] = None
                later.append((guard, not renew))
        for guard, renewal in later:
            with self._contained(guard, work):
                self._push(guard, renewal=renewal)
        while self._ready and len(self._batches) < self._limit:
            work.starts += self._start(now, work)
        return work

    def next_wake(self, now: float) -> float | None:
        """Seconds until the loop must step again (0: at once), or None: only when told."""
        if self._finished or (self._ready and len(self._batches) < self._limit):
            return 0.0
        while self._heap and self._entry.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        return max(0.0, self._heap[0][0] - now) if self._heap else None

    def idle(self) -> bool:
        """Whether no renewal is under way or waiting to be taken in."""
        return not self._batches and not self._finished

    def stop(self, reason: Error) -> list[Notice]:
        """Stop for good: every guard still served, and any added later, is lost for `reason`."""
        if self.stopped is None:
            self.stopped = reason
        return self.abandon(reason)

    def abandon(self, reason: Error) -> list[Notice]:
        """Lose every guard still served because of `reason`, and forget them."""
        guards = list(self._entry)
        for collection in (self._entry, self._ready, self._in_flight, self._batches):
            collection.clear()
        self._heap.clear()
        self._finished.clear()
        self._let_go.clear()
        notices: list[Notice] = []
        for guard in guards:
            notices += guard.stop(reason)
        return notices

    def _start(self, now: float, work: Work) -> list[Batch]:
        """One batch of the ready guards (none if none may renew any more).

        A batch holds leases of one kind, that of the guard first in line: keys' leases and
        group memberships are renewed by requests of their own.
        """
        kind: type | None = None
        chosen: list[Guard] = []
        for guard in list(self._ready):
            if len(chosen) == self.batch_size:
                break
            with self._contained(guard, work):
                its_kind = type(guard.lease())
                kind = kind or its_kind
                if its_kind is kind:
                    chosen.append(guard)
        request_id = self._new_id()
        entries = []
        for guard in chosen:
            del self._ready[guard]
            with self._contained(guard, work):
                renewal = guard.begin_renewal(now, early=EARLY, request_id=request_id)
                if renewal is not None:
                    entries.append((guard, renewal))
                    self._in_flight[guard] = request_id
                self._push(guard)  # still woken for its at-risk point and deadline
        if not entries:
            return []
        self._batches.add(request_id)
        return [Batch(request_id, tuple(entries))]

    @contextlib.contextmanager
    def _contained(self, guard: Guard, work: Work) -> Iterator[None]:
        """Run one guard's part of a step; an exception from it (a bug) loses that guard only.

        The guard is forgotten; one still served is lost with a `LockLostError` caused by the
        exception (its lease may lapse unrenewed), one that had left only forgotten. The log
        names the key and the exception, never a token (a lease's repr redacts its owner token).
        """
        try:
            yield
        except Exception as exc:  # a bug: contained to this guard, never the loop's
            served = guard in self._entry
            logger.exception(
                "the renewal loop failed on the lease on %s; %s, every other lease is renewed on",
                guard.key,
                "it is lost" if served else "it had left",
            )
            self._entry.pop(guard, None)
            self._ready.pop(guard, None)
            self._in_flight.pop(guard, None)
            self._finished.pop(guard, None)
            if served:
                reason = LockLostError(f"renewing the lease on {guard.key!r} failed unexpectedly")
                reason.__cause__ = exc
                try:
                    work.notices += guard.stop(reason)
                except Exception:  # the guard is beyond saving; the others are not
                    logger.exception("losing the lease on %s failed", guard.key)

    def _push(self, guard: Guard, *, renewal: bool = True) -> None:
        wake = guard.next_wake(renewal=renewal)
        if wake is None:
            self._entry.pop(guard, None)
            self._ready.pop(guard, None)
            return
        sequence = next(self._sequence)
        self._entry[guard] = sequence
        heapq.heappush(self._heap, (wake, sequence, guard))


def _take_in(guard: Guard, outcome: Outcome, now: float) -> list[Notice]:
    if outcome.answer is not None:
        return guard.renewed(outcome.answer, now)
    if outcome.error is not None:
        return guard.renewal_failed(outcome.error, now)
    guard.renewal_ended()
    return []
