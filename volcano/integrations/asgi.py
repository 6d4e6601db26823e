"""Run a coroutine, or an APScheduler scheduler, only on the instance that is the elected leader.

For an ASGI app's lifespan (Starlette, FastAPI, any framework with a lifespan context), with
no dependency beyond the SDK; `pip install "volcano[apscheduler]"` for the scheduler. Every
instance of the app campaigns in one election (`client.elections`); the leader runs the job,
the others wait in line, and when the leader stops (it resigns) or dies (its lease runs out
after `ttl` seconds) the next in line starts the job. An instance that loses the leadership
(the lock server unreachable for a ttl, a force release) cancels its job at once.

```python
import contextlib
from starlette.applications import Starlette
from volcano.integrations.asgi import while_leader


async def send_digests(leadership: volcano.AsyncLeadership) -> None:
    while True:
        await send_due_digests(fence=leadership.term)
        await asyncio.sleep(60)


@contextlib.asynccontextmanager
async def lifespan(app):
    async with while_leader("digests", send_digests, ttl=10):
        yield


app = Starlette(lifespan=lifespan)  # FastAPI(lifespan=lifespan) alike
```

Logs go to the `volcano.integrations.asgi` logger: elected (INFO), lost (WARNING), a job that
raised (ERROR, with its traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import TYPE_CHECKING, Protocol

import volcano

from . import _naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from types import TracebackType

__all__ = ["Scheduler", "WhileLeader", "scheduler_while_leader", "while_leader"]

logger = logging.getLogger(__name__)


class WhileLeader:
    """An async context manager that runs `job` whenever this instance leads `name`.

    Made by `while_leader`. Entering starts a campaign in the background and returns at once
    (the app starts serving); once elected, `job(leadership)` runs as a task. When the
    leadership is lost the task is cancelled and the instance campaigns again; when `job`
    raises, the error is logged, the instance resigns (the next in line takes over) and
    campaigns again after `retry_delay`; when `job` returns, the instance resigns and stops
    campaigning. Leaving cancels the job (awaiting its cleanup), then resigns.
    """

    def __init__(
        self,
        name: str,
        job: Callable[[volcano.AsyncLeadership], Awaitable[object]],
        *,
        client: volcano.AsyncClient | None,
        ttl: float,
        label: str | None,
        retry_delay: float,
    ) -> None:
        self._name = name
        self._job = job
        self._client = client
        self._owns_client = client is None
        self._ttl = ttl
        self._label = label or _naming.label(socket.gethostname(), os.getpid())
        self._retry_delay = retry_delay
        self._leadership: volcano.AsyncLeadership | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<WhileLeader {self._name!r} {'leading' if self.leading else 'following'}>"

    @property
    def leading(self) -> bool:
        """Whether this instance leads now (and so runs the job)."""
        return self.leadership is not None

    @property
    def leadership(self) -> volcano.AsyncLeadership | None:
        """The leadership while this instance leads (its `term` fences the job's writes)."""
        leadership = self._leadership
        return None if leadership is None or leadership.lost else leadership

    async def __aenter__(self) -> WhileLeader:
        if self._task is not None:
            raise volcano.GuardStateError("a WhileLeader is entered once")
        if self._client is None:
            self._client = volcano.AsyncClient()
        self._task = asyncio.create_task(self._campaign(self._client), name=f"volcano:{self._name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        finally:
            if self._owns_client and self._client is not None:
                await self._client.close()

    async def _campaign(self, client: volcano.AsyncClient) -> None:
        while True:
            try:
                async with client.elections.campaign(
                    self._name, ttl=self._ttl, label=self._label
                ) as leadership:
                    finished = await self._lead(leadership)
            except volcano.Error as error:
                logger.warning("campaign for %r failed: %s", self._name, error)
                finished = False
            if finished:
                return
            await asyncio.sleep(self._retry_delay)

    async def _lead(self, leadership: volcano.AsyncLeadership) -> bool:
        """Run the job while leading; True when it returned (the instance is done)."""
        logger.info(
            "elected leader of %r in term %s (%s)", self._name, leadership.term, self._label
        )
        self._leadership = leadership
        job = asyncio.create_task(_call(self._job, leadership))
        lost = asyncio.create_task(leadership.wait_lost())
        try:
            await asyncio.wait({job, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._leadership = None
            lost.cancel()
            job.cancel()
            outcome = (await asyncio.gather(job, lost, return_exceptions=True))[0]
        if not job.cancelled() and not isinstance(outcome, BaseException):
            logger.info("the job of %r returned; resigning (term %s)", self._name, leadership.term)
            return True
        if leadership.lost:
            logger.warning(
                "lost the leadership of %r (term %s): %s; the job was cancelled",
                self._name,
                leadership.term,
                leadership.lost_reason,
            )
        elif isinstance(outcome, Exception):
            logger.error(
                "the job of %r raised; resigning (term %s)",
                self._name,
                leadership.term,
                exc_info=outcome,
            )
        return False


async def _call(
    job: Callable[[volcano.AsyncLeadership], Awaitable[object]], leadership: volcano.AsyncLeadership
) -> object:
    return await job(leadership)


def while_leader(
    name: str,
    job: Callable[[volcano.AsyncLeadership], Awaitable[object]],
    *,
    client: volcano.AsyncClient | None = None,
    ttl: float = 10.0,
    label: str | None = None,
    retry_delay: float = 1.0,
) -> WhileLeader:
    """Run `job(leadership)` only while this instance leads the election `name`.

    ```python
    async with while_leader("digests", send_digests, ttl=10) as leader:
        ...  # the app serves; leader.leading says whether this instance runs the job
    ```

    Args:
        name: The election's name (a key of its own: 1 to 255 letters, digits, `.`, `_`,
            `:`, `-`), the same on every instance of the app.
        job: A coroutine function taking the `volcano.AsyncLeadership`, whose `term` fences
            the job's writes; cancelled when the leadership is lost or the app stops.
        client: The `volcano.AsyncClient` to campaign with; None (the default): one from
            the environment (`VOLCANO_*`), closed on exit.
        ttl: The leader's lease ttl in seconds (default 10): the longest a dead leader keeps
            the job from running elsewhere.
        label: This instance's public label, shown to observers; default `host:pid`.
        retry_delay: Seconds before campaigning again after the job raised or the server
            could not be reached (default 1).
    """
    return WhileLeader(name, job, client=client, ttl=ttl, label=label, retry_delay=retry_delay)


class Scheduler(Protocol):
    """What `scheduler_while_leader` uses of a scheduler: APScheduler 3's `BaseScheduler`."""

    @property
    def running(self) -> bool:
        """Whether the scheduler has been started."""

    def start(self, paused: bool = False) -> None:
        """Start the scheduler; `paused` starts it without running jobs."""

    def shutdown(self, wait: bool = True) -> None:
        """Stop the scheduler."""

    def pause(self) -> None:
        """Stop running jobs until `resume()`."""

    def resume(self) -> None:
        """Run jobs again."""


@contextlib.asynccontextmanager
async def scheduler_while_leader(
    name: str,
    scheduler: Scheduler,
    *,
    client: volcano.AsyncClient | None = None,
    ttl: float = 10.0,
    label: str | None = None,
) -> AsyncIterator[WhileLeader]:
    """Run an APScheduler scheduler's jobs only while this instance leads the election `name`.

    ```python
    scheduler = AsyncIOScheduler()
    scheduler.add_job(send_digests, "interval", minutes=1)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with scheduler_while_leader("digests", scheduler, ttl=10):
            yield
    ```

    Every instance starts the scheduler paused (unless it is running already); the leader
    resumes it, and pauses it again when the leadership is lost. A job already running
    then runs to its end (APScheduler cannot stop it): fence its writes with
    `leader.leadership.term`. A job that fell due while no instance led is run, or skipped,
    by APScheduler's own rules (`misfire_grace_time`, `coalesce`) once a leader resumes.
    Leaving pauses the scheduler, resigns, and shuts the scheduler down if it was started
    here. Arguments as for `while_leader`.
    """
    started = not scheduler.running
    if started:
        scheduler.start(paused=True)
    else:
        scheduler.pause()

    async def resumed(leadership: volcano.AsyncLeadership) -> None:
        scheduler.resume()
        try:
            await asyncio.Event().wait()  # until cancelled: lost, or the app stops
        finally:
            scheduler.pause()

    try:
        async with WhileLeader(
            name, resumed, client=client, ttl=ttl, label=label, retry_delay=1.0
        ) as leader:
            yield leader
    finally:
        if started:
            scheduler.shutdown(wait=False)
