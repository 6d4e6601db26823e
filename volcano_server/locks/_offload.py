"""Where storage work runs (on the loop or in a worker thread), and how an outage is answered.

Storage work is a function of one argument, whether it may block (`Work`). SQLite's short local
transactions are first tried on the loop with `False`: a backend that would have to wait raises
`WouldBlock` before changing anything, and only then is the work repeated in a worker thread
with `True` (work that may take more than a few milliseconds, such as a listing, raises
`WouldBlock` itself: it never runs on the loop). Network backends (PostgreSQL) always go to a
thread. Work in a thread holds one of the admission's slots (`_admission`: each project's fair
share, lease-keeping first), and all of it is charged to its project (`Job`). The server takes
its offload at construction, so a test can run the very same server with storage work it
schedules itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread

from ..storage import OnLocked, Storage, StorageUnavailable, WouldBlock
from ..telemetry._metrics import Metrics
from ..telemetry._tracing import Tracing
from ..wire._errors import ApiError
from ._admission import UPKEEP, Admission, Job
from ._lanes import Lanes
from ._registry import KeyRef

__all__ = ["Offload", "Runner", "ThreadOffload", "Work"]

log = logging.getLogger("volcano_server")

T = TypeVar("T")

Work = Callable[[bool], T]
"""Storage work, given whether it may block."""


class Offload(Protocol):
    """Runs storage work somewhere and returns its result (or raises its error)."""

    async def __call__(self, work: Callable[[bool], T], job: Job) -> T:
        """Run `work`, done for `job`."""
        ...


class ThreadOffload:
    """On the loop without blocking when the storage runs inline, else in a worker thread.

    A thread's work holds one of `admission`'s slots; all work is charged to its job's project.
    """

    def __init__(self, *, inline: bool, admission: Admission) -> None:
        self._inline = inline
        self._admission = admission
        # More threads than slots: upkeep (key lookups, heartbeats) takes none.
        self._threads = anyio.CapacityLimiter(admission.slots + 8)

    async def __call__(self, work: Callable[[bool], T], job: Job) -> T:
        """Run `work`: inline first when allowed, in a thread when it would block."""
        if self._inline:
            started = time.perf_counter()
            try:
                return work(False)
            except WouldBlock:
                pass
            finally:
                self._admission.charge(job.project, time.perf_counter() - started)
        async with self._admission.slot(job):
            return await anyio.to_thread.run_sync(work, True, limiter=self._threads)


class Runner:
    """Runs storage work through an offload; an outage becomes 503 `unavailable`.

    Only the storage work is repeated in a worker thread after a WouldBlock (it changed
    nothing); what the caller judged before stays judged. With `tracing`, work given a name
    (`traced_as`: a lock transaction) is a span of its own when a request's span is current
    (its try on the loop and its run in a thread, as one). Work on one key (`in_lane`) runs in
    that key's lane (`_lanes`): after all work on the key that asked for it before, and until it
    ends or holds the key's lock in the database.
    """

    def __init__(
        self, offload: Offload, storage: Storage, metrics: Metrics, tracing: Tracing | None = None
    ) -> None:
        self._offload = offload
        self._storage = storage  # its commits are waited on disk here (`synced`)
        self._metrics = metrics
        self._tracing = tracing
        self.lanes = Lanes()
        self._busy = 0  # requests being served that need the loop (`serving`, `parked`)

    async def __call__(
        self, work: Callable[[bool], T], *, job: Job = UPKEEP, traced_as: str | None = None
    ) -> T:
        """Run `work` for `job`; an outage is 503."""
        try:
            return await self._traced(work, job, traced_as)
        except StorageUnavailable as exc:
            raise self.unavailable(exc) from exc

    async def in_lane(
        self, lane: KeyRef, work: Callable[[bool, OnLocked], T], *, job: Job, traced_as: str
    ) -> T:
        """Run `work` as `__call__` does, in the key's lane, handing it what leaves the lane.

        `work` passes that on to its write transaction (`Storage.write`'s `on_locked`), which
        calls it, from its thread, once it holds the key's lock.
        """
        async with self.lanes.lane(lane) as leave:
            loop = asyncio.get_running_loop()

            def on_locked() -> None:
                loop.call_soon_threadsafe(leave)

            return await self(
                lambda may_block: work(may_block, on_locked), job=job, traced_as=traced_as
            )

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Count a request as being served while the block runs (`synced` asks)."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """Count a request being served as not needing the loop while the block runs.

        A waiting acquire parked in line, a watch held open (they need the loop only when their
        turn comes or their key changes), a request held until the waiters it granted are
        answered.
        """
        self._busy -= 1
        try:
            yield
        finally:
            self._busy += 1

    async def synced(self) -> None:
        """Return once every commit made so far is on disk; an outage is 503.

        Alone, the request waits for the disk on the event loop: nothing else is waiting to
        be served, and it saves two thread hand-offs. Otherwise the loop serves others
        meanwhile (the wait runs in a worker thread), and their commits share the next fsync.
        """
        try:
            await self._storage.synced(here=self._busy == 1)
        except StorageUnavailable as exc:
            raise self.unavailable(exc) from exc

    async def _traced(self, work: Callable[[bool], T], job: Job, traced_as: str | None) -> T:
        if self._tracing is None or traced_as is None:
            return await self._offload(work, job)
        with self._tracing.transaction(traced_as):
            return await self._offload(work, job)

    def unavailable(self, exc: StorageUnavailable) -> ApiError:
        """The 503 for an outage, counted and logged."""
        self._metrics.storage_errors.labels("request").inc()
        log.warning("storage unavailable: %s", exc)
        return ApiError.unavailable("storage is unavailable, retry later")
