"""What an `AsyncClient` hands its parts: the asyncio twin of `_engine.Engine`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypeVar

from . import _seam
from ._async_renewer import AsyncRenewer
from ._engine import EngineBase, batch_failed, each_renewed, renew_many, renew_one, renewed
from ._exceptions import ClientClosedError, Error, LockHeldError
from ._retry import retry_once_async
from ._validate import new_uuid
from ._waiting import WaitChain

if TYPE_CHECKING:
    import httpx

    from ._clock import Clock
    from ._config import Settings
    from ._models import LockLease
    from ._ownership import Ownership
    from ._requests import Acquisition
    from ._schedule import Batch, Outcome
    from ._seam import Answer, Call

T = TypeVar("T")


class AsyncEngine(EngineBase):
    """The machinery of an `AsyncClient`; see `Engine`."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings, clock: Clock) -> None:
        super().__init__(settings, clock, "AsyncClient")
        self._sender = _seam.AsyncSender(http, settings)
        self._renewer_made: AsyncRenewer | None = None

    async def send(
        self, call: Call[T], *, request_timeout: float | None = None, sent_at: float | None = None
    ) -> Answer[T]:
        """Send `call` once; see `Engine.send`."""
        self.check_open()
        first = self.clock.monotonic() if sent_at is None else sent_at
        return await self._sender.send(call, sent_at=first, request_timeout=request_timeout)

    async def acquire(self, acquisition: Acquisition) -> Answer[LockLease]:
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

    async def renew(self, lease: LockLease) -> Answer[LockLease]:
        """Renew `lease` once for its own ttl, not retried."""
        return await self.send(_seam.renew(lease, ttl=lease.ttl_seconds, request_id=new_uuid()))

    async def release(self, lease: LockLease) -> None:
        """Release `lease` once, not retried."""
        await self.send(_seam.release(lease, request_id=new_uuid()))

    def hold(self, ownership: Ownership) -> None:
        """Renew `ownership`'s lease in the background from now on."""
        self._renewer().add(ownership)

    def let_go(self, ownership: Ownership) -> None:
        """Renew it no more; a renewal of it under way is let go of (its answer ignored)."""
        self._renewer().remove(ownership)

    async def close(self) -> bool:
        """Refuse every request from now on; stop renewing, each guard still held lost.

        Returns whether this call closed it (False: it was closed already).
        """
        if self.closed:
            return False
        self.closed = True
        if self._renewer_made is not None:
            await self._renewer_made.stop(ClientClosedError("the client was closed"))
        return True

    def settled(self) -> bool:
        """Whether the renewal loop is asleep with nothing under way (a test's fake clock)."""
        return self._renewer_made is None or self._renewer_made.settled()

    def _renewer(self) -> AsyncRenewer:
        """The client's renewal loop, made on first use; once closed, it refuses new guards."""
        if self._renewer_made is None:
            self._renewer_made = AsyncRenewer(self._renew_batch, self.clock)
            if self.closed:
                self._renewer_made.refuse(ClientClosedError("the client was closed"))
        return self._renewer_made

    async def _renew_batch(self, batch: Batch) -> list[Outcome]:
        """Send one batch of renewals; each lease's outcome, in order."""
        timeout = batch.timeout
        try:
            if len(batch.entries) == 1:
                return renewed(await self.send(renew_one(batch), request_timeout=timeout))
            return each_renewed(await self.send(renew_many(batch), request_timeout=timeout))
        except Error as error:
            return batch_failed(batch, error)
