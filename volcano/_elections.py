"""Leader election: a recipe on a lock (a limit-1 key), with no endpoint of its own.

```python
with client.elections.campaign("scheduler", label="worker-7:8080", ttl=10) as leadership:
    while True:
        leadership.check()  # raises LockLostError once leadership is lost
        run_one_round(fence=leadership.term)
```

A campaign waits in the key's line (as long as it takes, or `wait`) and yields a `Leadership`:
a with_lock guard whose `term` is its fencing token, so a term is never reused and a later
leader's is always higher. Leaving the block resigns (stops renewing, then releases); the next
candidate in line is handed the key at once. `leader()` reads who leads now, `observe()` yields
each change of leader and each vacancy.

Right by construction, where peers went wrong:

- A campaign returns only a leadership whose lease is live by the client's own conservative
  reckoning (`sent + ttl`, the request's first send on the monotonic clock, never after the
  server's expiry), and after a wait it renews the lease once before trusting it. An answer
  that comes too late to lead on, or a lease that ran out while the answer travelled (the
  renewal is refused), makes it campaign again instead (mailgun/holster#38 returned
  leadership after the lease had expired).
- Resigning happens when the block has ended: its code no longer runs when the release
  frees the key for the next leader, and a cancelled task (asyncio) or Ctrl-C leaves through
  the same exit (kubernetes/client-go#728 released on cancel while the leader still worked).
  A deposed leader's guard turns LOST no later than its lease ends, renewal or not.
- An observer reports what the server's state says, version after version (never an older
  version after a newer one, never two leaders in one state), folding states that came
  faster than its polls into the latest (etcd#18163 reported a leader from a stale read).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from . import _requests, _validate, _watch
from ._exceptions import Error, GuardStateError, InvalidArgumentError, LeaseNotHeldError
from ._guard import AsyncLockGuard, LockGuard
from ._models import LockMode
from ._ownership import GuardState, Ownership, deliver, is_transient

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta
    from types import TracebackType

    from ._async_engine import AsyncEngine
    from ._clock import Clock
    from ._engine import Engine
    from ._models import LockLease, LockState
    from ._requests import GuardPlan
    from ._seam import Call, Success

__all__ = [
    "AsyncCampaign",
    "AsyncElections",
    "AsyncLeaderObserver",
    "AsyncLeadership",
    "Campaign",
    "Elections",
    "Leader",
    "LeaderObserver",
    "Leadership",
    "leader_of",
]

_LEADING = (GuardState.HELD, GuardState.AT_RISK)


class Leader(NamedTuple):
    """Who leads an election: the leader's public label and its term (its fencing token).

    A tuple `(label, term)`, also read as `.label` and `.term`.
    """

    label: str | None
    term: int


def leader_of(name: str, state: LockState) -> Leader | None:
    """The leader a key's state names, or None when the office is vacant.

    Raises:
        InvalidArgumentError: The key is not an election: it is in use with a limit above 1,
            or held shared.
    """
    if state.limit != 1 or len(state.holders) > 1:
        raise InvalidArgumentError(
            f"{name!r} is not an election: its key is in use with limit {state.limit}"
            f" ({len(state.holders)} holders); campaign on a name of its own"
        )
    if any(holder.mode is LockMode.SHARED for holder in state.holders):
        raise InvalidArgumentError(
            f"{name!r} is not an election: its key is held shared; campaign on a name of its own"
        )
    if not state.holders:
        return None
    holder = state.holders[0]
    return Leader(holder.label, holder.fencing_token)


class _Changes:
    """Which leaders an observer reports: the first, then each one that differs from the last."""

    def __init__(self) -> None:
        self._last: Leader | bool | None = False  # False: nothing reported yet

    def new(self, leader: Leader | None) -> bool:
        if self._last is not False and leader == self._last:
            return False
        self._last = leader
        return True


# -- the leadership: a guard with a term ----------------------------------------------------


class _LeadershipBase:
    """What both leaderships add to their guard: the name, the label, proclaiming."""

    _plan: GuardPlan
    _label: str | None
    _ownership: Ownership[LockLease]
    _clock: Clock

    @property
    def name(self) -> str:
        """The election's name (its key)."""
        return self._plan.acquisition.key

    @property
    def label(self) -> str | None:
        """The label this leader shows, as last set by the campaign or `proclaim`."""
        return self._label

    def _proclamation(self, state: GuardState, lease: LockLease, label: object) -> Call[LockLease]:
        """The renewal that shows `label` (None: none), once the guard is known to lead."""
        if state not in _LEADING:
            raise GuardStateError(f"the leadership of {self.name!r} is {state.value}, not leading")
        return _requests.renew(lease.key, lease, ttl=None, request_id=None, label=label or "")

    def _refused(self, error: Error) -> None:
        """A proclamation failed: a refusal ends the leadership; other failures change nothing."""
        if not is_transient(error):
            deliver(self._ownership.refused(error, self._clock.monotonic()))

    def _proclaimed(self, answer: Success[LockLease], label: str | None) -> None:
        deliver(self._ownership.relabelled(answer, self._clock.monotonic()))
        self._label = label or None


class Leadership(LockGuard, _LeadershipBase):
    """A campaign's win: a with_lock guard on the election's key, whose term is its fencing token.

    Everything a `LockGuard` has (`lost`, `check()`, `state`, `wait_lost()`, `lease`, the
    `on_lost` callback), and `term`, `label` and `proclaim()`. Made by `campaign`; leaving
    the campaign's block resigns.
    """

    def __init__(self, engine: Engine, plan: GuardPlan) -> None:
        super().__init__(engine, plan)
        self._label = plan.acquisition.label

    def __repr__(self) -> str:
        return f"<Leadership {self.key!r} {self.state.value}>"

    @property
    def term(self) -> int:
        """The term of this leadership: its lease's fencing token.

        Higher than every earlier leader's: give it to the resources the leader writes to, so
        that a deposed leader's late writes are refused.
        """
        return self.lease.fencing_token

    def proclaim(self, label: str | None) -> None:
        """Show a new label (None: none) to observers, renewing the lease with it.

        Raises:
            LockLostError: Leadership was lost before.
            LeaseNotHeldError: The server ended the lease meanwhile: leadership is lost.
            GuardStateError: The leadership is not in its block.
            APIConnectionError: No answer: the label may or may not have changed.
        """
        self.check()
        call = self._proclamation(self.state, self.lease, label)
        try:
            answer = self._engine.send(call)
        except Error as error:
            self._refused(error)
            raise
        self._proclaimed(answer, label)


class AsyncLeadership(AsyncLockGuard, _LeadershipBase):
    """The asyncio twin of `Leadership`: `await leadership.proclaim(label)`."""

    def __init__(self, engine: AsyncEngine, plan: GuardPlan) -> None:
        super().__init__(engine, plan)
        self._label = plan.acquisition.label

    def __repr__(self) -> str:
        return f"<AsyncLeadership {self.key!r} {self.state.value}>"

    @property
    def term(self) -> int:
        """The term of this leadership: its lease's fencing token (see `Leadership.term`)."""
        return self.lease.fencing_token

    async def proclaim(self, label: str | None) -> None:
        """Show a new label (None: none) to observers; see `Leadership.proclaim`."""
        self.check()
        call = self._proclamation(self.state, self.lease, label)
        try:
            answer = await self._engine.send(call)
        except Error as error:
            self._refused(error)
            raise
        self._proclaimed(answer, label)


# -- campaigning ----------------------------------------------------------------------------


class _Attempts:
    """A campaign's acquisitions: the first as planned, each later one with what is left."""

    def __init__(self, plan: GuardPlan, now: float) -> None:
        self._plan = plan
        self._deadline = now + plan.acquisition.wait
        self._tries = 0
        self._failures = 0

    def failed(self, error: Error, now: float) -> float:
        """An acquisition failed: seconds to wait before the next, or raises `error`.

        Transport trouble and an overloaded or restarting server (what a watch retries) are
        waited out, backing off as a watch does, while the campaign's wait lasts: a candidate
        that waits as long as it takes outlives a server restart. Trying again is safe: the
        owner token is the same, and a candidate granted the key by a request whose answer was
        lost is given its own lease back.
        """
        left = self._deadline - now
        if not _watch.retryable(error) or left <= 0:
            raise error
        self._failures += 1
        return min(_watch.backoff(self._failures, error), left)

    def answered(self) -> None:
        """An acquisition got an answer: failures in a row start again from none."""
        self._failures = 0

    def next_plan(self, now: float) -> GuardPlan:
        """The plan of the next acquisition: the same owner token (its place in line)."""
        self._tries += 1
        if self._tries == 1:
            return self._plan
        left = max(0.0, self._deadline - now) if math.isfinite(self._deadline) else math.inf
        acquisition = self._plan.acquisition._replace(wait=left, request_id=_validate.new_uuid())
        return self._plan._replace(acquisition=acquisition)


class Campaign:
    """A campaign for an election: a context manager that yields a `Leadership` once it wins.

    Made by `Elections.campaign`. Entering waits in line until the key is handed over (or the
    wait runs out: `LockHeldError`); leaving resigns.
    """

    def __init__(self, engine: Engine, plan: GuardPlan) -> None:
        self._engine = engine
        self._plan = plan
        self._leadership: Leadership | None = None

    def __repr__(self) -> str:
        return f"<Campaign {self._plan.acquisition.key!r}>"

    def __enter__(self) -> Leadership:
        if self._leadership is not None:
            raise GuardStateError("a campaign is entered once; campaign() again for another")
        clock = self._engine.clock
        attempts = _Attempts(self._plan, clock.monotonic())
        while True:
            leadership = Leadership(self._engine, attempts.next_plan(clock.monotonic()))
            try:
                leadership.__enter__()
            except LeaseNotHeldError:
                continue  # elected, but the lease ended before it could be dated: again
            except Error as error:
                clock.sleep(attempts.failed(error, clock.monotonic()))
                continue
            attempts.answered()
            if leadership.state in _LEADING:
                self._leadership = leadership
                return leadership
            leadership.__exit__(None, None, None)  # won too late to lead: nothing to release

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._leadership is not None:
            self._leadership.__exit__(exc_type, exc, traceback)


class AsyncCampaign:
    """The asyncio twin of `Campaign`: `async with client.elections.campaign(...) as lead:`."""

    def __init__(self, engine: AsyncEngine, plan: GuardPlan) -> None:
        self._engine = engine
        self._plan = plan
        self._leadership: AsyncLeadership | None = None

    def __repr__(self) -> str:
        return f"<AsyncCampaign {self._plan.acquisition.key!r}>"

    async def __aenter__(self) -> AsyncLeadership:
        if self._leadership is not None:
            raise GuardStateError("a campaign is entered once; campaign() again for another")
        clock = self._engine.clock
        attempts = _Attempts(self._plan, clock.monotonic())
        while True:
            leadership = AsyncLeadership(self._engine, attempts.next_plan(clock.monotonic()))
            try:
                await leadership.__aenter__()
            except LeaseNotHeldError:
                continue  # elected, but the lease ended before it could be dated: again
            except Error as error:
                await clock.async_sleep(attempts.failed(error, clock.monotonic()))
                continue
            attempts.answered()
            if leadership.state in _LEADING:
                self._leadership = leadership
                return leadership
            await leadership.__aexit__(None, None, None)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._leadership is not None:
            await self._leadership.__aexit__(exc_type, exc, traceback)


# -- observing ------------------------------------------------------------------------------


class LeaderObserver:
    """Each change of an election's leader, and each vacancy (None), in order.

    Made by `Elections.observe`: an iterator, and a context manager that closes it. The first
    item is who leads now (or None); then one item each time the leader, or its label, changes.
    """

    def __init__(self, name: str, watch: _watch.LockWatch) -> None:
        self._name = name
        self._watch = watch
        self._changes = _Changes()

    def __repr__(self) -> str:
        return f"<LeaderObserver {self._name!r}>"

    def __iter__(self) -> LeaderObserver:
        return self

    def __next__(self) -> Leader | None:
        for state in self._watch:
            leader = leader_of(self._name, state)
            if self._changes.new(leader):
                return leader
        raise StopIteration

    def close(self) -> None:
        """Stop observing."""
        self._watch.close()

    def __enter__(self) -> LeaderObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncLeaderObserver:
    """The asyncio twin of `LeaderObserver`: `async for leader in ...`; `aclose()` ends it."""

    def __init__(self, name: str, watch: _watch.AsyncLockWatch) -> None:
        self._name = name
        self._watch = watch
        self._changes = _Changes()

    def __repr__(self) -> str:
        return f"<AsyncLeaderObserver {self._name!r}>"

    def __aiter__(self) -> AsyncLeaderObserver:
        return self

    async def __anext__(self) -> Leader | None:
        async for state in self._watch:
            leader = leader_of(self._name, state)
            if self._changes.new(leader):
                return leader
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop observing, cancelling a poll under way."""
        await self._watch.aclose()

    async def __aenter__(self) -> AsyncLeaderObserver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- the namespaces -------------------------------------------------------------------------


def _plan(
    name: object,
    *,
    ttl: object,
    label: object,
    wait: object,
    on_lost: object,
    on_at_risk: object,
    at_risk_margin: object,
) -> GuardPlan:
    return _requests.with_lock(
        name,
        ttl=ttl,
        wait=_requests.FOREVER if wait is None else wait,
        label=label,
        token=None,
        request_id=None,
        on_lost=on_lost,
        on_at_risk=on_at_risk,
        at_risk_margin=at_risk_margin,
    )


class Elections:
    """Leader elections of a `Client`, reached as `client.elections`: each is a name (a key)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<Elections of {self._engine.describe()}>"

    def campaign(
        self,
        name: str,
        *,
        ttl: float | timedelta,
        label: str | None = None,
        wait: float | timedelta | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> Campaign:
        """Campaign for `name`: a context manager that yields a `Leadership` once elected.

        ```python
        with client.elections.campaign("scheduler", label="worker-7", ttl=10) as leadership:
            for item in work:
                leadership.check()  # raises LockLostError once leadership is lost
                write(item, fence=leadership.term)
        ```

        Candidates are elected in order of arrival: entering waits in the key's line (a chain
        of long polls with the same owner token, so the place is kept) until the key is handed
        over, for as long as it takes (`wait=None`, the default) or up to `wait`. The
        leadership is a with_lock guard, renewed in the background; it returns only while its
        lease is live by the client's reckoning, and campaigns again if the answer came too
        late to lead on. Leaving the block resigns: renewal stops, then the lease is released
        and the next candidate is elected at once. A leader that stops renewing (crashed,
        partitioned) is replaced when its lease expires, by the server's clock.

        Args:
            name: The election's name: a key (1 to 255 letters, digits, `.`, `_`, `:`, `-`).
                Use it for nothing else.
            ttl: How long leadership outlives its leader's last renewal: seconds (0.1 to
                86400) or a `timedelta`. It bounds how long a crashed leader keeps the office.
            label: What observers see of this leader (0 to 200 printable ASCII characters:
                a host name, an address); never a secret.
            wait: The longest to wait for election; None (the default): as long as it takes.
            on_lost: Called once, with the reason, when leadership is lost (as for
                `Locks.with_lock`).
            on_at_risk: Called when no renewal has succeeded and the lease nears its end.
            at_risk_margin: How near (seconds or a `timedelta`); default a third of the ttl.

        No answer, or an overloaded or restarting server (429, 5xx), while waiting is
        waited out and the campaign goes on with the same owner token (backing off from 0.2
        to 5 s, as a watch does), for as long as the wait lasts: a standby outlives a restart
        of the lock server.

        Raises (on entering):
            LockHeldError: `wait` ran out before this candidate was elected.
            APIConnectionError, APIStatusError: the last failure, when `wait` ran out on one;
                any other error (a 401, say) at once.
        """
        plan = _plan(
            name,
            ttl=ttl,
            label=label,
            wait=wait,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
            at_risk_margin=at_risk_margin,
        )
        return Campaign(self._engine, plan)

    def leader(self, name: str) -> Leader | None:
        """Who leads `name` now: `(label, term)`, or None when the office is vacant.

        Raises:
            InvalidArgumentError: `name`'s key is in use with a limit above 1.
        """
        return leader_of(name, self._engine.send(_requests.get(name, request_id=None)).value)

    def observe(self, name: str) -> LeaderObserver:
        """Each change of `name`'s leader, and each vacancy (None), as they happen.

        ```python
        with client.elections.observe("scheduler") as leaders:
            print("now:", next(leaders))  # None: vacant
            with client.elections.campaign("scheduler", label="worker-7", ttl=10):
                leader = next(leaders)
                print(f"{leader.label} leads in term {leader.term}")
        ```

        Or `for leader in leaders:` to go on until the loop breaks or it is closed.

        The first item is who leads now; then one per change: a new leader, a vacancy, or
        the leader's new label (`proclaim`). Built on `Locks.watch`, it reports the server's
        states in order, so terms never go back and there is never more than one leader;
        changes faster than its polls are folded into the latest, so a short-lived leader
        between two polls may go unseen, never the current one.
        """
        return LeaderObserver(name, _watch.watch(self._engine, name, None))


class AsyncElections:
    """Leader elections of an `AsyncClient`; see `Elections`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<AsyncElections of {self._engine.describe()}>"

    def campaign(
        self,
        name: str,
        *,
        ttl: float | timedelta,
        label: str | None = None,
        wait: float | timedelta | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> AsyncCampaign:
        """Campaign for `name`: `async with` it to be elected; see `Elections.campaign`.

        Cancelling the task while it waits takes it out of line; cancelling it while it
        leads resigns (the block has ended by then).
        """
        plan = _plan(
            name,
            ttl=ttl,
            label=label,
            wait=wait,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
            at_risk_margin=at_risk_margin,
        )
        return AsyncCampaign(self._engine, plan)

    async def leader(self, name: str) -> Leader | None:
        """Who leads `name` now, or None; see `Elections.leader`."""
        return leader_of(
            name, (await self._engine.send(_requests.get(name, request_id=None))).value
        )

    def observe(self, name: str) -> AsyncLeaderObserver:
        """Each change of `name`'s leader and each vacancy; see `Elections.observe`."""
        return AsyncLeaderObserver(name, _watch.async_watch(self._engine, name, None))
