"""The with_lock guards: hold a lease for a block, renewing it in the background.

```python
with client.locks.with_lock("daily-report", ttl=30, on_lost=stop_work) as guard:
    for item in work:
        guard.check()  # raises LockLostError once ownership is lost
        write(item, fence=guard.lease.fencing_token)
```

A guard is a thin shell around its `Ownership` (the state machine in `_ownership.py`, where
every state and move is listed): entering acquires and hands the guard to the client's renewal
loop; leaving takes it back and releases; the properties read the machine. A guard uses only the
engine its client handed it (`_engine.py`: acquire, renew, release, hold, let go, the clock).
`LockGuard` and `AsyncLockGuard` differ only in how they wait and send.

Entering acquires (retrying once and waiting, like `acquire`); when a caller's `request_id` is
answered with a replayed outcome, or a wait for the lock outlasted a third of the ttl, it then
renews once, because that lease may have been granted at a time this client never saw. Exiting
never raises because the lease was lost, and a failed release is logged, never raised, so an
exception from the block is never masked: **the block must check the guard** (`check()`, `lost`,
`state`, `wait_lost`, or an `on_lost` callback) and stop its protected work, and the protected
resource should check fencing tokens, because renewal cannot stop code that is already running.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Generic

from ._exceptions import GuardStateError, LockLostError
from ._ownership import RENEW_AFTER_FRACTION, GuardState, LeaseT, Ownership, deliver
from ._tracing import GuardTrace

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from types import TracebackType

    from ._async_engine import AsyncEngine
    from ._clock import Clock
    from ._engine import Engine
    from ._exceptions import Error
    from ._models import LockLease
    from ._requests import GuardPlan
    from ._seam import Success

_FINAL = (GuardState.LOST, GuardState.RELEASED, GuardState.FAILED)


class OwnershipShell(Generic[LeaseT]):
    """What every guard shares, whatever it holds: its state machine, and reading it.

    A lock guard holds a key's lease; a membership guard (`_membership`) a group membership.

    Args:
        key: What it holds, as logs and messages name it.
        timeout: The client's request timeout.
        margin: The at-risk margin (None: a third of the ttl).
        on_lost: Called once when ownership is lost.
        on_at_risk: Called each time the lease becomes at risk.
        clock: The client's clock.
    """

    _ENTER_HINT = "use it as `with client.locks.with_lock(...) as guard:`"

    def __init__(
        self,
        key: str,
        *,
        timeout: float,
        margin: float | None,
        on_lost: Callable[[Error], object] | None,
        on_at_risk: Callable[[Error], object] | None,
        clock: Clock,
    ) -> None:
        self._clock = clock
        self._ownership: Ownership[LeaseT] = Ownership(
            key,
            timeout=timeout,
            margin=margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
            wake=self._wake,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r} {self.state.value}>"

    @property
    def key(self) -> str:
        """The lock's key."""
        return self._ownership.key

    @property
    def state(self) -> GuardState:
        """Where the guard stands: `GuardState.HELD`, `AT_RISK`, `LOST`, ... (never raises).

        It turns `AT_RISK` when no renewal has succeeded and less than the at-risk margin is
        left, and `LOST` as soon as the deadline passes by the monotonic clock, even while a
        renewal is still waiting for its answer.
        """
        return self._ownership.state(self._clock.monotonic())

    @property
    def lease(self) -> LeaseT:
        """The latest lease: the one acquired, or the latest renewal of it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        lease = self._ownership.lease()
        if lease is None:
            raise GuardStateError(
                f"the guard on {self.key!r} has not been entered; {self._ENTER_HINT}"
            )
        return lease

    @property
    def lost(self) -> bool:
        """Whether ownership was lost: a renewal was refused, or the lease's deadline passed.

        A property, read as `if guard.lost:` (not `guard.lost()`, Ruby's `guard.lost?`); a
        real `bool`, so `guard.lost is True` and JSON work as with any flag.

        It turns True as soon as the deadline passes by the monotonic clock, even if the
        renewal is still waiting for an answer, and never turns False again. After exit it
        tells whether ownership was lost before the guard let go, including when the release
        on exit was refused with `LeaseNotHeldError`.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        _ = self.lease
        return self.state is GuardState.LOST

    @property
    def lost_reason(self) -> Error | None:
        """The error that ended ownership, or None while held (and before entry).

        A refused renewal gives the server's error (`LeaseNotHeldError` for a 409); a deadline
        reached without a successful renewal gives `LockLostError`, caused by the last renewal
        error; a closed client gives `ClientClosedError`.
        """
        return self._ownership.reason(self._clock.monotonic())

    def check(self) -> None:
        """Raise `LockLostError` if ownership has been lost; return quietly while it lasts.

        For protected loops: `guard.check()` at each step instead of an `if guard.lost`.

        Raises:
            LockLostError: Ownership was lost; its `__cause__` is `lost_reason`.
            GuardStateError: The guard has not been entered.
        """
        _ = self.lease
        reason = self._ownership.reason(self._clock.monotonic())
        if reason is not None:
            raise LockLostError(f"the lease on {self.key!r} was lost: {reason}") from reason

    def _wake(self) -> None:
        """Wake everything waiting for the guard's state to change."""
        raise NotImplementedError

    def _poll_lost(self, end: float | None) -> tuple[bool | None, float | None]:
        """(lost, None) once the answer is known; else (None, seconds to wait and ask again).

        The pause is None when only a move can change the answer (a release in flight, no
        timeout): wait for a wake-up with no timer.
        """
        _ = self.lease
        now = self._clock.monotonic()
        state = self._ownership.state(now)
        if state in _FINAL:
            return state is GuardState.LOST, None
        if end is not None and now >= end:
            return False, None
        change = self._ownership.next_change(now)
        pauses = [t - now for t in (change, end) if t is not None]
        return None, min(pauses) if pauses else None

    def _end_of_wait(self, timeout: float | None) -> float | None:
        if timeout is None:
            return None
        return self._clock.monotonic() + max(0.0, timeout)

    def _stop_renewing(self) -> None:
        """The block ended: the renewal loop is to let the guard go."""
        deliver(self._ownership.begin_exit(self._clock.monotonic()))

    def _to_release(self) -> LeaseT | None:
        """Once renewal has stopped: the lease to release, or None when ownership is lost."""
        notices, lease = self._ownership.to_release(self._clock.monotonic())
        deliver(notices)
        return lease

    def _released(self, error: Exception | None) -> None:
        """The release was answered (`error` None), or failed with `error`."""
        deliver(self._ownership.release_ended(error, self._clock.monotonic()))


class _GuardBase(OwnershipShell["LockLease"]):
    """What both lock guards share: their plan, their span, and dating a replayed lease."""

    def __init__(self, plan: GuardPlan, *, clock: Clock, timeout: float) -> None:
        self._plan = plan
        self._trace: GuardTrace | None = None  # its span, from entering on (when tracing)
        super().__init__(
            plan.acquisition.key,
            timeout=timeout,
            margin=plan.at_risk_margin,
            on_lost=plan.on_lost,
            on_at_risk=plan.on_at_risk,
            clock=clock,
        )

    def _start_trace(self) -> GuardTrace | None:
        """The guard's span, from entering to the end of its release (None: not tracing)."""
        acquisition = self._plan.acquisition
        return GuardTrace.start(acquisition.key, acquisition.ttl, acquisition.wait)

    def _traced(self) -> contextlib.AbstractContextManager[None]:
        """The guard's own requests (acquisition, release) as children of its span."""
        return self._trace.current() if self._trace is not None else contextlib.nullcontext()

    def _end_trace(self, failure: BaseException | None) -> None:
        if self._trace is not None:
            lease = self._ownership.lease()
            self._trace.end(lease.fencing_token if lease is not None else None, failure)

    def _dates_replay(self, answer: Success[LockLease]) -> bool:
        """Whether an acquisition's answer must be renewed before the guard can date it.

        A replay of a caller's request id may describe an earlier acquisition; a waiting
        acquisition answered after a third of the ttl was granted at some unknown moment after
        its send, perhaps more than a ttl later. Dating either from its send could make the
        guard give up a lease the server still grants it; the renewal is due anyway. (An answer
        to a request that did not wait is at most one request's time old: dating it from its
        send stays the conservative bound it always was.)
        """
        if answer.replayed and self._plan.replayable:
            return True
        waited = self._plan.acquisition.wait > 0
        age = self._clock.monotonic() - answer.sent_at
        return waited and age >= answer.value.ttl_seconds * RENEW_AFTER_FRACTION


class LockGuard(_GuardBase):
    """A lease held for a `with` block and renewed by the client's renewal loop.

    Made by `Client.locks.with_lock`. Entering acquires the lease (raising what `acquire`
    raises, after the same single retry and any wait); when `with_lock` was given a `request_id`
    and the answer is a replay, or a wait outlasted a third of the ttl, it then renews the lease
    once, not retried, raising what `renew` raises (`LeaseNotHeldError` if the lease has expired
    meanwhile). While the block runs, the client's renewal thread renews every guard's lease a
    third of the way into its ttl, retrying transient failures until the lease's deadline
    (`sent_at + ttl` by the monotonic clock, from the first send of the request that renewed
    it). Renewals due together go out as one request (a batch), and requests run side by side,
    so a slow answer delays only the leases it carries.

    `state` reads `HELD`, then `AT_RISK` when no renewal has succeeded and less than the
    at-risk margin is left, and `LOST` when a renewal is refused (409, 401, 403, 422) or the
    deadline passes; `on_at_risk` and `on_lost` are called then (on one of the client's renewal
    threads, once per change; keep them short), `wait_lost` wakes, and the `volcano` logger
    logs a WARNING.

    Exiting stops renewal and releases the latest lease unless it was lost (`state` turns
    `RELEASED`, or `LOST` if the release was refused with 409). It never raises because the
    lease was lost, and a failed release is logged, not raised, so an exception from the block
    always propagates unchanged: **check the guard in the block** (`guard.check()`) and stop the
    protected work once it is lost; give `guard.lease.fencing_token` to the protected resource
    so an expired holder's late writes are refused.

    A guard is single use: entering it twice, or again after exit, raises `GuardStateError`.
    After exit, `state`, `lease`, `lost` and `lost_reason` keep describing what happened.
    """

    def __init__(self, engine: Engine, plan: GuardPlan) -> None:
        self._engine = engine
        self._changed = threading.Condition()
        super().__init__(plan, clock=engine.clock, timeout=engine.timeout)

    def __enter__(self) -> LockGuard:
        self._ownership.enter()
        self._trace = self._start_trace()
        try:
            with self._traced():
                answer = self._engine.acquire(self._plan.acquisition)
                if self._dates_replay(answer):
                    answer = self._engine.renew(answer.value)
        except BaseException as failure:
            self._ownership.acquisition_failed()
            self._end_trace(failure)
            raise
        self._ownership.acquired(answer, self._trace)
        self._engine.hold(self._ownership)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop_renewing()
        self._engine.let_go(self._ownership)  # a renewal under way ends first
        if (lease := self._to_release()) is None:
            self._end_trace(self.lost_reason)
            return
        try:
            with self._traced():
                self._engine.release(lease)
        except Exception as failure:  # noqa: BLE001 - logged; raising would mask the block's error
            self._released(failure)
            self._end_trace(failure)
        else:
            self._released(None)
            self._end_trace(None)

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until ownership is lost or `timeout` seconds pass (None: no limit).

        Returns:
            True if ownership was lost within the timeout; False otherwise, or when the guard
            exited without losing it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        end = self._end_of_wait(timeout)
        with self._changed:
            while True:
                lost, pause = self._poll_lost(end)
                if lost is not None:
                    return lost
                self._changed.wait(pause)

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


class AsyncLockGuard(_GuardBase):
    """A lease held for an `async with` block and renewed by the client's renewal task.

    Made by `AsyncClient.locks.with_lock`; it follows the rules of `LockGuard`, with the
    client's asyncio task instead of its thread (callbacks run on the event loop: they must not
    block), and `await guard.wait_lost()`. Exiting lets go of a renewal under way (it may carry
    other guards' leases too; its answer for this guard is ignored: renewal keeps the owner and
    fencing tokens, so the release still names the latest lease) and then releases.
    """

    def __init__(self, engine: AsyncEngine, plan: GuardPlan) -> None:
        import asyncio  # here, not at the top: sync-only users never import asyncio

        self._engine = engine
        self._changed: asyncio.Event = asyncio.Event()
        super().__init__(plan, clock=engine.clock, timeout=engine.timeout)

    async def __aenter__(self) -> AsyncLockGuard:
        self._ownership.enter()
        self._trace = self._start_trace()
        try:
            with self._traced():
                answer = await self._engine.acquire(self._plan.acquisition)
                if self._dates_replay(answer):
                    answer = await self._engine.renew(answer.value)
        except BaseException as failure:
            self._ownership.acquisition_failed()
            self._end_trace(failure)
            raise
        self._ownership.acquired(answer, self._trace)
        self._engine.hold(self._ownership)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop_renewing()
        self._engine.let_go(self._ownership)  # a renewal under way is let go of
        if (lease := self._to_release()) is None:
            self._end_trace(self.lost_reason)
            return
        try:
            with self._traced():
                await self._engine.release(lease)
        except Exception as failure:  # noqa: BLE001 - logged; raising would mask the block's error
            self._released(failure)
            self._end_trace(failure)
        else:
            self._released(None)
            self._end_trace(None)

    async def wait_lost(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - the contract's name
        """Wait until ownership is lost or `timeout` seconds pass (None: no limit).

        Returns:
            True if ownership was lost within the timeout; False otherwise, or when the guard
            exited without losing it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        import asyncio

        end = self._end_of_wait(timeout)
        while True:
            self._changed.clear()  # before polling: a move made after the poll still wakes
            lost, pause = self._poll_lost(end)
            if lost is not None:
                return lost
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), pause)

    def _wake(self) -> None:
        self._changed.set()
