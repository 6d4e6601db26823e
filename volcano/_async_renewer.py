"""The renewal loop of an `AsyncClient`: one task serves every guard, one task per batch sends.

The asyncio twin of `_renewer.py`, over the same `Schedule`: the loop task sleeps until the
schedule needs it, takes a step, calls the user's callbacks, and starts each batch as a task of
its own (at most `MAX_IN_FLIGHT` at once), which only sends and reports back. Leaving a block
lets go of a renewal of its guard that is under way: it stays under way for the other leases of
its batch, and its answer for this guard is not taken in (renewal keeps the owner and fencing
tokens, so the release still names the latest lease). Everything runs on the client's event
loop, so the schedule needs no lock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ._exceptions import LockLostError
from ._ownership import deliver
from ._schedule import MAX_IN_FLIGHT, BatchesUnsupported, Schedule

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ._clock import Clock
    from ._exceptions import Error
    from ._ownership import Ownership
    from ._schedule import Batch, Outcome

logger = logging.getLogger("volcano")


class AsyncRenewer:
    """Renews the leases of an async client's guards from one lazily started task.

    Args:
        send: Sends one batch and returns each lease's outcome, in order (never raising but
            `BatchesUnsupported`).
        clock: The client's clock.
        limit: How many requests may be under way at once.
    """

    def __init__(
        self,
        send: Callable[[Batch], Awaitable[Sequence[Outcome]]],
        clock: Clock,
        limit: int = MAX_IN_FLIGHT,
    ) -> None:
        self._send = send
        self._clock = clock
        self._schedule = Schedule(limit)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._waiting = False

    def add(self, guard: Ownership) -> None:
        """Renew `guard` from now on; once stopped, mark it lost at once."""
        reason = self._schedule.stopped
        if reason is not None:
            deliver(guard.stop(reason))
            return
        self._schedule.add(guard)
        if self._task is None or self._task.done():
            self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="volcano-renewer")
        self._changed.set()

    def remove(self, guard: Ownership) -> None:
        """Stop renewing `guard`, letting go of a renewal of it that is under way."""
        self._schedule.remove(guard, let_go=True)

    def refuse(self, reason: Error) -> None:
        """Take no guards from now on (the client closed before this loop ever ran)."""
        deliver(self._schedule.stop(reason))

    async def stop(self, reason: Error) -> None:
        """Stop the loop and its renewals; every guard still served is lost for `reason`."""
        notices = self._schedule.stop(reason)
        tasks = [*self._batches, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        deliver(notices)

    def settled(self) -> bool:
        """Whether the loop is asleep with no renewal under way (a test's fake clock asks)."""
        asleep = self._task is None or self._task.done() or self._waiting
        return asleep and self._schedule.idle()

    async def _run(self) -> None:
        reason = LockLostError("the lease renewer stopped")
        try:
            while self._schedule.stopped is None:
                work = self._schedule.step(self._clock.monotonic())
                deliver(work.notices)
                for batch in work.starts:
                    task = asyncio.get_running_loop().create_task(
                        self._renew(batch), name=f"volcano-renew-{batch.request_id}"
                    )
                    self._batches.add(task)
                    task.add_done_callback(self._batches.discard)
                pause = self._schedule.next_wake(self._clock.monotonic())
                if pause is None and not self._schedule and self._schedule.idle():
                    return  # nothing left to serve; the next guard starts a new task
                if pause == 0:
                    await asyncio.sleep(0)
                    continue
                self._changed.clear()
                self._waiting = True
                try:
                    await self._clock.async_wait(self._changed, pause)
                finally:
                    self._waiting = False
        except Exception:
            logger.exception("the lease renewer stopped unexpectedly")
            reason = LockLostError("the lease renewer stopped unexpectedly")
        finally:
            deliver(self._schedule.abandon(reason))  # cancelled from outside, or broken

    async def _renew(self, batch: Batch) -> None:
        outcomes: Sequence[Outcome] = batch.unsent()
        try:
            outcomes = await self._send(batch)
        except BatchesUnsupported:
            self._schedule.singles()
        except Exception as exc:  # noqa: BLE001 - a bug loses this batch, never the loop
            outcomes = batch.failed(exc)
        finally:
            self._schedule.finish(batch, outcomes)
            self._changed.set()
