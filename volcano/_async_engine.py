"""What an `AsyncClient` hands its parts: the asyncio twin of `_engine.Engine`.

The renewal loop is one task per client over the same `Schedule`; each batch it starts is a task
of its own (at most `MAX_IN_FLIGHT` at once) that only sends and reports back. Everything runs
on the client's event loop, so the schedule needs no lock. Leaving a block lets go of a renewal
of its guard that is under way: it stays under way for the other leases of its batch, and its
answer for this guard is not taken in (renewal keeps the owner and fencing tokens, so the
release still names the latest lease).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any, TypeVar

from . import _seam, _tracing
from ._engine import EngineBase, renewals
from ._exceptions import ClientClosedError, Error, LockHeldError, LockLostError
from ._ownership import deliver
from ._retry import retry_once_async
from ._validate import new_uuid
from ._waiting import WaitChain

if TYPE_CHECKING:
    from collections.abc import Sequence

    import httpx

    from ._clock import Clock
    from ._config import Settings
    from ._models import LockLease
    from ._ownership import Ownership
    from ._requests import Acquisition
    from ._schedule import Batch, Outcome
    from ._seam import Call, Success

logger = logging.getLogger("volcano")

T = TypeVar("T")


class AsyncEngine(EngineBase):
    """The machinery of an `AsyncClient`; see `Engine`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings, clock: Clock) -> None:
        super().__init__(settings, clock, "AsyncClient")
        self._sender = _seam.AsyncSender(http, settings)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._waiting = False

    async def send(
        self,
        call: Call[T],
        *,
        resend: bool = False,
        request_timeout: float | None = None,
        sent_at: float | None = None,
    ) -> Success[T]:
        """Send `call` once; see `Engine.send`."""
        self.check_open()
        first = self.clock.monotonic() if sent_at is None else sent_at
        return await self._sender.send(
            call, sent_at=first, resend=resend, request_timeout=request_timeout
        )

    async def acquire(self, acquisition: Acquisition) -> Success[LockLease]:
        """Acquire, each request retried once; see `Engine.acquire`."""
        clock = self.clock
        chain = WaitChain(acquisition, clock.monotonic())
        while True:
            call, wait = chain.next_call(clock.monotonic())
            send = functools.partial(
                self.send, call, request_timeout=self.timeout + wait, sent_at=clock.monotonic()
            )
            try:
                return await retry_once_async(send, clock.async_sleep, f"acquire {call.subject}")
            except LockHeldError:
                if not chain.goes_on(clock.monotonic()):
                    raise

    async def renew(self, lease: LockLease) -> Success[LockLease]:
        """Renew `lease` once for its own ttl, not retried."""
        return await self.send(_seam.renew(lease, ttl=lease.ttl_seconds, request_id=new_uuid()))

    async def release(self, lease: LockLease) -> None:
        """Release `lease` once, not retried."""
        await self.send(_seam.release(lease, request_id=new_uuid()))

    def hold(self, ownership: Ownership[Any]) -> None:
        """Renew `ownership`'s lease in the background from now on; once closed, it is lost."""
        reason = self._schedule.stopped
        if reason is not None:
            deliver(ownership.stop(reason))
            return
        self._schedule.add(ownership)
        if self._task is None or self._task.done():
            self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="volcano-renewer")
        self._changed.set()

    def let_go(self, ownership: Ownership[Any]) -> None:
        """Renew it no more; a renewal of it under way is let go of (its answer ignored)."""
        self._schedule.remove(ownership, let_go=True)

    async def close(self) -> bool:
        """Refuse every request from now on; stop renewing, each guard still held lost.

        Returns whether this call closed it (False: it was closed already).
        """
        if self.closed:
            return False
        self.closed = True
        notices = self._schedule.stop(ClientClosedError("the client was closed"))
        tasks = [*self._batches, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        deliver(notices)
        return True

    def settled(self) -> bool:
        """Whether the loop is asleep with no renewal under way (a test's fake clock asks)."""
        asleep = self._task is None or self._task.done() or self._waiting
        return asleep and self._schedule.idle()

    async def _run(self) -> None:
        reason = LockLostError("the lease renewer stopped")
        try:
            while self._schedule.stopped is None:
                work = self._schedule.step(self.clock.monotonic())
                deliver(work.notices)
                for batch in work.starts:
                    task = asyncio.get_running_loop().create_task(
                        self._send_batch(batch), name=f"volcano-renew-{batch.request_id}"
                    )
                    self._batches.add(task)
                    task.add_done_callback(self._batches.discard)
                pause = self._schedule.next_wake(self.clock.monotonic())
                if pause is None and not self._schedule and self._schedule.idle():
                    return  # nothing left to serve; the next guard starts a new task
                if pause == 0:
                    await asyncio.sleep(0)
                    continue
                self._changed.clear()
                self._waiting = True
                try:
                    await self.clock.async_wait(self._changed, pause)
                finally:
                    self._waiting = False
        except Exception:
            logger.exception("the lease renewer stopped unexpectedly")
            reason = LockLostError("the lease renewer stopped unexpectedly")
        finally:
            deliver(self._schedule.abandon(reason))  # cancelled from outside, or broken

    async def _send_batch(self, batch: Batch) -> None:
        fared: Exception | Sequence[Outcome] = batch.unsent()
        try:
            fared = self.outcomes(batch, await self._answer(batch))
        except Exception as exc:  # noqa: BLE001 - BatchesUnsupported, or a bug: see finish()
            fared = exc
        finally:  # cancelled (the client closed): its leases were not renewed
            self.finish(batch, fared)
            self._changed.set()

    async def _answer(self, batch: Batch) -> Success[Sequence[object]] | Error:
        call = renewals(batch)
        traces = [renewal.trace for _, renewal in batch.entries]
        try:
            with _tracing.renewals(traces, batch.subjects):
                return await self.send(call, request_timeout=batch.timeout)
        except Error as error:
            return error
