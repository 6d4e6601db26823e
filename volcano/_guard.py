"""The with_lock guards: hold a lease for a block, renewing it in the background.

```python
with client.locks.with_lock("daily-report", ttl=30) as guard:
    for item in work:
        if guard.lost:
            raise RuntimeError("lock ownership was lost")
        write(item, fence=guard.lease.fencing_token)
```

Entering acquires (retrying once and waiting, like `acquire`); when a caller's `request_id` is
answered with a replayed outcome, or a wait for the lock outlasted a third of the ttl, it then
renews once, because that lease may have been granted at a time this client never saw. While the
block runs, the lease is renewed before it can expire; `guard.lease` is the latest lease and
`guard.lost` turns True when a renewal is refused (409, or another 4xx) or none succeeded before
the lease's deadline by the client's monotonic clock. Leaving the block stops renewal and releases
the latest lease unless it was lost. Exiting never raises because the lease was lost, and a failed
release is logged, never raised, so an exception from the block is never masked: **the block must
check `guard.lost`** (or `wait_lost`) and stop its protected work, and the protected resource
should check fencing tokens, because renewal cannot stop code that is already running.

A guard is single use: it cannot be entered twice or re-entered after it exits. After exit,
`lease`, `lost` and `lost_reason` keep telling what happened; a release refused because the
lease was no longer held (force-released or taken over before a renewal noticed) counts as lost.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from typing import TYPE_CHECKING

import attrs

from . import _requests
from ._exceptions import Error, GuardStateError, LeaseNotHeldError, LockLostError
from ._renewal import RENEW_AFTER_FRACTION, Timeline

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

    from ._async_client import AsyncClient
    from ._client import Client
    from ._clock import Clock
    from ._models import LockLease
    from ._requests import Acquisition
    from ._transport import Call

logger = logging.getLogger("volcano")


class _Phase(enum.Enum):
    NEW = "not entered"
    ENTERING = "entering"
    ACTIVE = "active"
    EXITING = "exiting"
    EXITED = "exited"


@attrs.frozen
class _Attempt:
    """One renewal attempt: the request, its timeout, and when it is sent."""

    call: Call[LockLease]
    request_timeout: float
    sent_at: float


class _GuardState:
    """The state both guards share: phase, timeline, and the answers to lease/lost/lost_reason."""

    def __init__(
        self, acquisition: Acquisition, clock: Clock, timeout: float, *, replayable: bool
    ) -> None:
        self._acquisition = acquisition
        # The acquisition carries a caller's request id, so a replayed answer may describe a
        # lease made by an earlier call, at a time this client never saw: entering then renews
        # it to date it.
        self._replayable = replayable
        self._clock = clock
        self._timeout = timeout
        self._phase_lock = threading.Lock()
        self._phase = _Phase.NEW
        self._timeline: Timeline | None = None
        self._lost_at_exit = False

    def __repr__(self) -> str:
        status = self._phase.value
        if self._timeline is not None and self._timeline.lost_reason is not None:
            status += ", lost"
        return f"<{type(self).__name__} key={self.key!r} {status}>"

    @property
    def key(self) -> str:
        """The lock's key."""
        return self._acquisition.key

    @property
    def lease(self) -> LockLease:
        """The latest lease: the one acquired, or the latest renewal of it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        return self._entered_timeline().lease

    @property
    def lost(self) -> bool:
        """Whether ownership was lost: a renewal was refused, or the lease's deadline passed.

        It turns True as soon as the deadline passes by the monotonic clock, even if the
        renewal is still waiting for an answer. After exit it tells whether ownership was lost
        before the guard left, including when the release on exit was refused with
        `LeaseNotHeldError`.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        timeline = self._entered_timeline()
        if self._phase is _Phase.EXITED:
            return self._lost_at_exit
        return timeline.lost(self._clock.monotonic())

    @property
    def lost_reason(self) -> Error | None:
        """The error that ended ownership, or None while held (and before entry).

        A refused renewal gives the server's error (`LeaseNotHeldError` for a 409); a deadline
        reached without a successful renewal gives `LockLostError`, caused by the last renewal
        error; a closed client gives `ClientClosedError`.
        """
        if self._timeline is None:
            return None
        if self._phase is not _Phase.EXITED:
            self._timeline.lost(self._clock.monotonic())
        return self._timeline.lost_reason

    def _wake(self) -> None:
        """Wake everything waiting for a change of state (loss or exit)."""
        raise NotImplementedError

    def _entered_timeline(self) -> Timeline:
        if self._timeline is None:
            raise GuardStateError(
                f"the guard on {self.key!r} has not been entered; "
                "use it as `with client.locks.with_lock(...) as guard:`"
            )
        return self._timeline

    def _needs_fresh_date(self, lease: LockLease, sent_at: float, replayed: bool) -> bool:
        """Whether to renew on entry, dating the lease from that renewal's send.

        A replay of a caller's request id may describe an earlier acquisition; a waiting
        acquisition answered after a third of the ttl was granted at some unknown moment after
        `sent_at`, perhaps more than a ttl later. Dating either from `sent_at` could make the
        guard give up a lease the server still grants it; the renewal is due anyway. (An answer
        to a request that did not wait is at most one request's time old: dating it from its
        send stays the conservative bound it always was.)
        """
        if replayed and self._replayable:
            return True
        waited = self._acquisition.wait > 0
        return (
            waited and self._clock.monotonic() - sent_at >= lease.ttl_seconds * RENEW_AFTER_FRACTION
        )

    def _begin_entering(self) -> None:
        with self._phase_lock:
            if self._phase is _Phase.NEW:
                self._phase = _Phase.ENTERING
                return
            phase = self._phase
        if phase is _Phase.EXITED:
            raise GuardStateError(
                f"the guard on {self.key!r} has been used; call with_lock() again for a new lease"
            )
        raise GuardStateError(
            f"the guard on {self.key!r} is already entered; a guard is not re-entrant"
        )

    def _entering_failed(self) -> None:
        with self._phase_lock:
            self._phase = _Phase.EXITED

    def _activate(self, lease: LockLease, sent_at: float) -> Timeline:
        timeline = Timeline(lease, sent_at, timeout=self._timeout, on_lost=self._wake)
        with self._phase_lock:
            self._timeline = timeline
            self._phase = _Phase.ACTIVE
        return timeline

    def _begin_exiting(self) -> Timeline:
        with self._phase_lock:
            if self._phase is not _Phase.ACTIVE or self._timeline is None:
                raise GuardStateError(f"the guard on {self.key!r} is {self._phase.value}")
            self._phase = _Phase.EXITING
            return self._timeline

    def _finish_exit(self, lost: bool) -> None:
        with self._phase_lock:
            self._lost_at_exit = lost
            self._phase = _Phase.EXITED
        self._wake()

    def _abandon(self, reason: Error) -> None:
        """Mark the lease lost because renewal stopped for `reason`."""
        if self._timeline is not None:
            self._timeline.lose(reason)

    def _next_renewal(self) -> _Attempt | None:
        """The renewal attempt due now, or None when it is too late for one."""
        timeline = self._entered_timeline()
        now = self._clock.monotonic()
        request_timeout = timeline.begin_attempt(now)
        if request_timeout is None:
            return None
        return _Attempt(_requests.renewal(timeline.lease), request_timeout, now)

    def _renewal_failed(self, error: Error) -> float | None:
        return self._entered_timeline().failed(error, self._clock.monotonic())

    def _renewal_succeeded(self, lease: LockLease, attempt: _Attempt) -> float | None:
        return self._entered_timeline().succeeded(lease, attempt.sent_at)

    def _poll_lost(self, end: float | None) -> tuple[bool, float | None]:
        """(lost, None) once the answer is known; else (False, seconds to wait and ask again)."""
        timeline = self._entered_timeline()
        if self._phase is _Phase.EXITED:
            return self._lost_at_exit, None
        now = self._clock.monotonic()
        if timeline.lost(now):
            return True, None
        pause = timeline.deadline - now
        if end is not None:
            if now >= end:
                return False, None
            pause = min(pause, end - now)
        return False, pause

    def _deadline_for_wait(self, timeout: float | None) -> float | None:
        if timeout is None:
            return None
        return self._clock.monotonic() + max(0.0, timeout)

    def _release_failed(self, error: BaseException) -> bool:
        """Log a failed release; return True when it proved the lease was no longer held."""
        # A volcano error's text already names its request id.
        logger.warning(
            "releasing the lease on %s failed: %s",
            self.key,
            error,
            exc_info=not isinstance(error, Error),
        )
        if isinstance(error, LeaseNotHeldError):
            self._entered_timeline().lose(error, log=False)
            return True
        return False


class LockGuard(_GuardState):
    """A lease held for a `with` block and renewed by the client's renewal thread.

    Made by `Client.locks.with_lock`. Entering acquires the lease (raising what `acquire`
    raises, after the same single retry); when `with_lock` was given a `request_id` and the
    answer is a replay, it then renews the lease once, not retried, raising what `renew` raises
    (`LeaseNotHeldError` if the lease that request id made has expired). While the block runs,
    one thread per client renews every guard's lease a third of the way into its ttl, retrying
    transient failures until the lease's deadline (`sent_at + ttl` by the monotonic clock). A
    refused renewal (409, 401, 403, 422) or the deadline passing makes `lost` True and wakes
    `wait_lost`, and logs a WARNING on the `volcano` logger.

    Exiting stops renewal and releases the latest lease unless it was lost. It never raises
    because the lease was lost, and a failed release is logged, not raised, so an exception
    from the block always propagates unchanged: **check `guard.lost` in the block** and stop
    the protected work when it turns True; give `guard.lease.fencing_token` to the protected
    resource so an expired holder's late writes are refused.

    A guard is single use: entering it twice, or again after exit, raises `GuardStateError`.
    After exit, `lease`, `lost` and `lost_reason` keep describing what happened.
    """

    def __init__(
        self, client: Client, acquisition: Acquisition, *, replayable: bool = False
    ) -> None:
        super().__init__(acquisition, client._clock, client.timeout, replayable=replayable)
        self._client = client
        self._changed = threading.Event()

    def __enter__(self) -> LockGuard:
        self._begin_entering()
        try:
            lease, sent_at, replayed = self._client._acquire(self._acquisition)
            if self._needs_fresh_date(lease, sent_at, replayed):
                sent_at = self._clock.monotonic()
                lease = self._client._send(_requests.renewal(lease))
        except BaseException:
            self._entering_failed()
            raise
        timeline = self._activate(lease, sent_at)
        self._client._renewer().add(self, timeline.next_attempt_at)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        timeline = self._begin_exiting()
        self._client._renewer().remove(self)
        lost = timeline.lost(self._clock.monotonic())
        if not lost:
            lost = self._release(timeline.lease)
        self._finish_exit(lost)

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until ownership is lost or `timeout` seconds pass (None: no limit).

        Returns:
            True if ownership was lost within the timeout; False otherwise, or when the guard
            exited without losing it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        end = self._deadline_for_wait(timeout)
        while True:
            lost, pause = self._poll_lost(end)
            if pause is None:
                return lost
            self._changed.wait(pause)

    def _wake(self) -> None:
        self._changed.set()

    def _renew_due(self) -> float | None:
        """Make the renewal attempt that is due; return when the next one is due, or None."""
        attempt = self._next_renewal()
        if attempt is None:
            return None
        try:
            lease = self._client._send(attempt.call, request_timeout=attempt.request_timeout)
        except Error as exc:
            return self._renewal_failed(exc)
        return self._renewal_succeeded(lease, attempt)

    def _release(self, lease: LockLease) -> bool:
        """Release `lease`; return True when the refusal showed it was already lost."""
        try:
            self._client._send(_requests.release(lease.key, lease, request_id=None))
        except Exception as exc:  # noqa: BLE001 - logged; raising would mask the block's error
            return self._release_failed(exc)
        return False


class AsyncLockGuard(_GuardState):
    """A lease held for an `async with` block and renewed by an asyncio task.

    Made by `AsyncClient.locks.with_lock`; it follows the rules of `LockGuard`, with one
    asyncio task per guard instead of the shared thread, and `await guard.wait_lost()`.
    Exiting cancels a renewal under way (renewal keeps the owner and fencing tokens, so the
    release still names the latest lease) and then releases.
    """

    def __init__(
        self, client: AsyncClient, acquisition: Acquisition, *, replayable: bool = False
    ) -> None:
        super().__init__(acquisition, client._clock, client.timeout, replayable=replayable)
        self._client = client
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncLockGuard:
        import asyncio  # here, not at the top: sync-only users never import asyncio

        self._begin_entering()
        self._changed = asyncio.Event()
        try:
            lease, sent_at, replayed = await self._client._acquire(self._acquisition)
            if self._needs_fresh_date(lease, sent_at, replayed):
                sent_at = self._clock.monotonic()
                lease = await self._client._send(_requests.renewal(lease))
        except BaseException:
            self._entering_failed()
            raise
        self._activate(lease, sent_at)
        if self._client._track(self):  # else the client is closed and the guard already lost
            self._task = asyncio.get_running_loop().create_task(
                self._renew_loop(), name=f"volcano-renew-{self.key}"
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        timeline = self._begin_exiting()
        await self._stop_renewing()
        self._client._untrack(self)
        lost = timeline.lost(self._clock.monotonic())
        if not lost:
            lost = await self._release(timeline.lease)
        self._finish_exit(lost)

    async def wait_lost(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - the contract's name
        """Wait until ownership is lost or `timeout` seconds pass (None: no limit).

        Returns:
            True if ownership was lost within the timeout; False otherwise, or when the guard
            exited without losing it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        import asyncio

        end = self._deadline_for_wait(timeout)
        while True:
            lost, pause = self._poll_lost(end)
            if pause is None or self._changed is None:
                return lost
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), pause)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _shut_down(self, reason: Error) -> None:
        """Mark the lease lost for `reason` and stop renewing it (the client is closing)."""
        self._abandon(reason)
        await self._stop_renewing()

    async def _stop_renewing(self) -> None:
        import asyncio

        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def _renew_loop(self) -> None:
        try:
            due: float | None = self._entered_timeline().next_attempt_at
            while due is not None:
                await self._clock.async_sleep(max(0.0, due - self._clock.monotonic()))
                due = await self._renew_due()
        except Exception as exc:
            logger.exception("renewing the lease on %s failed unexpectedly", self.key)
            reason = LockLostError(f"renewing the lease on {self.key!r} failed unexpectedly")
            reason.__cause__ = exc
            self._abandon(reason)
        finally:
            if self._phase is _Phase.ACTIVE:  # stopped by something other than exit or close
                self._abandon(LockLostError(f"renewal of the lease on {self.key!r} stopped"))

    async def _renew_due(self) -> float | None:
        attempt = self._next_renewal()
        if attempt is None:
            return None
        try:
            lease = await self._client._send(attempt.call, request_timeout=attempt.request_timeout)
        except Error as exc:
            return self._renewal_failed(exc)
        return self._renewal_succeeded(lease, attempt)

    async def _release(self, lease: LockLease) -> bool:
        """Release `lease`; return True when the refusal showed it was already lost."""
        try:
            await self._client._send(_requests.release(lease.key, lease, request_id=None))
        except Exception as exc:  # noqa: BLE001 - logged; raising would mask the block's error
            return self._release_failed(exc)
        return False
