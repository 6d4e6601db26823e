"""Membership guards: be a member of a group for a block, renewed in the background.

```python
with client.groups.membership("workers", "worker-7", ttl=10, capabilities={"port": 8080}) as held:
    while not held.lost:
        serve_one_request()
```

A membership is a lease on its group, so its guard is a lock guard's twin over the same state
machine (`_ownership.Ownership`) and the same renewal engine: entering joins (retried once,
as an acquisition is), the client's renewal loop renews it with the other memberships due at
the same time (`POST /v1/members/renew`: a request per batch, not per member), and leaving
stops renewing and leaves the group. The member is lost when a renewal is refused (removed,
or its ttl ran out while the client could not reach the server) or its deadline passes by the
client's monotonic clock; `held.lost`, `held.check()`, `wait_lost()` and `on_lost` tell of it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from . import _seam
from ._exceptions import Error
from ._group_models import Membership
from ._guard import OwnershipShell
from ._ownership import deliver, is_transient
from ._retry import retry_once, retry_once_async
from ._validate import new_uuid

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

    from ._async_engine import AsyncEngine
    from ._clock import Clock
    from ._engine import Engine
    from ._group_requests import Joining, MembershipPlan
    from ._seam import Call, Success

__all__ = ["AsyncMembershipGuard", "MembershipGuard", "join", "join_async"]


class _MembershipBase(OwnershipShell[Membership]):
    """What both membership guards share: the plan, the names, and capabilities."""

    _ENTER_HINT = "use it as `with client.groups.membership(...) as held:`"

    def __init__(self, plan: MembershipPlan, *, clock: Clock, timeout: float) -> None:
        self._plan = plan
        joining = plan.joining
        super().__init__(
            f"{joining.member}@{joining.group}",
            timeout=timeout,
            margin=plan.at_risk_margin,
            on_lost=plan.on_lost,
            on_at_risk=plan.on_at_risk,
            clock=clock,
        )

    def __repr__(self) -> str:
        joining = self._plan.joining
        return (
            f"<{type(self).__name__} group={joining.group!r} member={joining.member!r}"
            f" {self.state.value}>"
        )

    @property
    def group(self) -> str:
        """The group's name."""
        return self._plan.joining.group

    @property
    def member(self) -> str:
        """The member's name."""
        return self._plan.joining.member

    @property
    def membership(self) -> Membership:
        """The latest membership: the one joined, or the latest renewal of it.

        Raises:
            GuardStateError: The guard has not been entered.
        """
        return self.lease

    def _update_call(self, capabilities: object) -> Call[Membership]:
        from . import _group_requests  # the guard is made by them: no import at the top

        self.check()
        return _group_requests.update(self.lease, capabilities, request_id=None)

    def _update_failed(self, error: Error) -> None:
        """A refused update (409: the membership ended) loses the membership."""
        if not is_transient(error):
            deliver(self._ownership.refused(error, self._clock.monotonic()))


class MembershipGuard(_MembershipBase):
    """A group membership held for a `with` block and renewed by the client's renewal loop.

    Made by `Client.groups.membership`. Entering joins (raising what `join` raises, after the
    same single retry); the client's renewal thread renews the membership a third of the way
    into its ttl, with the other memberships due then, and retries transient failures until its
    deadline. `state`, `lost`, `lost_reason`, `check()`, `wait_lost()`, `on_lost` and
    `on_at_risk` behave as a lock guard's. Exiting stops renewal and leaves the group; it never
    raises because the membership was lost, and a failed leave is logged, not raised.
    """

    def __init__(self, engine: Engine, plan: MembershipPlan) -> None:
        self._engine = engine
        self._changed = threading.Condition()
        super().__init__(plan, clock=engine.clock, timeout=engine.timeout)

    def __enter__(self) -> MembershipGuard:
        self._ownership.enter()
        try:
            answer = join(self._engine, self._plan.joining)
        except BaseException:
            self._ownership.acquisition_failed()
            raise
        self._ownership.acquired(answer)
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
        if (membership := self._to_release()) is None:
            return
        try:
            self._engine.send(_seam.groups.leave(membership, request_id=new_uuid()))
        except Exception as failure:  # noqa: BLE001 - logged; raising would mask the block's error
            self._released(failure)
        else:
            self._released(None)

    def update(self, capabilities: object) -> None:
        """Announce new capabilities (None: none); the membership's expiry stays.

        Raises:
            LockLostError: The membership was lost before.
            LeaseNotHeldError: The server ended it meanwhile: the membership is lost.
            InvalidArgumentError: The capabilities are not bytes or a JSON value, or too large.
        """
        call = self._update_call(capabilities)
        try:
            self._engine.send(call)
        except Error as error:
            self._update_failed(error)
            raise

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the membership is lost or `timeout` seconds pass (None: no limit).

        Returns:
            True if it was lost within the timeout; False otherwise, or when the guard exited
            without losing it.
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


class AsyncMembershipGuard(_MembershipBase):
    """The asyncio twin of `MembershipGuard`: `async with client.groups.membership(...) as held`.

    Exiting lets go of a renewal under way (renewal keeps the owner and fencing tokens, so the
    leave still names the latest membership) and then leaves the group.
    """

    def __init__(self, engine: AsyncEngine, plan: MembershipPlan) -> None:
        import asyncio  # here, not at the top: sync-only users never import asyncio

        self._engine = engine
        self._changed: asyncio.Event = asyncio.Event()
        super().__init__(plan, clock=engine.clock, timeout=engine.timeout)

    async def __aenter__(self) -> AsyncMembershipGuard:
        self._ownership.enter()
        try:
            answer = await join_async(self._engine, self._plan.joining)
        except BaseException:
            self._ownership.acquisition_failed()
            raise
        self._ownership.acquired(answer)
        self._engine.hold(self._ownership)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop_renewing()
        self._engine.let_go(self._ownership)
        if (membership := self._to_release()) is None:
            return
        try:
            await self._engine.send(_seam.groups.leave(membership, request_id=new_uuid()))
        except Exception as failure:  # noqa: BLE001 - logged; raising would mask the block's error
            self._released(failure)
        else:
            self._released(None)

    async def update(self, capabilities: object) -> None:
        """Announce new capabilities (None: none); see `MembershipGuard.update`."""
        call = self._update_call(capabilities)
        try:
            await self._engine.send(call)
        except Error as error:
            self._update_failed(error)
            raise

    async def wait_lost(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - as the lock guard's
        """Wait until the membership is lost or `timeout` seconds pass (None: no limit)."""
        import asyncio
        import contextlib

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


def join(engine: Engine, joining: Joining) -> Success[Membership]:
    """Join, retried once after a transport failure or a 503 with the very same request.

    The answer dates from the first send: a replay answered to the retry describes the
    membership the first attempt made.
    """
    call = joining.call()
    first = engine.clock.monotonic()

    def attempt(*, resend: bool) -> Success[Membership]:
        return engine.send(call, sent_at=first, resend=resend)

    return retry_once(attempt, engine.clock.sleep, f"join {call.subject}")


async def join_async(engine: AsyncEngine, joining: Joining) -> Success[Membership]:
    """The asyncio twin of `join`."""
    call = joining.call()
    first = engine.clock.monotonic()

    async def attempt(*, resend: bool) -> Success[Membership]:
        return await engine.send(call, sent_at=first, resend=resend)

    return await retry_once_async(attempt, engine.clock.async_sleep, f"join {call.subject}")
