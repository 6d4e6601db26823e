"""A with_lock guard's ownership of its lease: every state, every event, and the one move.

```
state      event                               next state   (any pair not listed: no change)
NEW        ENTER                               ENTERING
ENTERING   ACQUIRED                            HELD
ENTERING   ACQUISITION_FAILED                  FAILED
HELD       RENEWED, RENEWAL_FAILED             HELD
HELD       AT_RISK (time: deadline - margin)   AT_RISK
AT_RISK    RENEWED                             HELD
AT_RISK    RENEWAL_FAILED                      AT_RISK
HELD, AT_RISK, RELEASING
           DEADLINE (time: no renewal in time)
           REFUSED (a 409 or another refusal)
           STOPPED (the client closed)         LOST
HELD, AT_RISK
           EXIT                                RELEASING
RELEASING  RENEWED (one under way at exit)     RELEASING
RELEASING  RELEASED, RELEASE_FAILED            RELEASED
RELEASING  RELEASE_REFUSED (409 on release)    LOST
LOST       EXIT                                LOST
```

In RELEASING the deadline counts only until the release is sent (`to_release`): from then on
the server's answer decides. It accepts a release only of the live lease that matches both
tokens, so a 204 proves the lease was held until the release ended it, whatever the client's
deadline did while the request was in flight: RELEASED, never LOST.

Time is the client's monotonic clock, counted from when the request that produced the current
lease was first *sent*: the server's expiry is at least that late, so `deadline = sent_at +
ttl` is never after the real one. A renewal is tried once a third of the ttl has passed,
leaving two thirds to retry transient failures (transport errors, timeouts, 5xx, 429) after a
backoff, until the deadline (`Timeline.failed`, `Timeline.attempt_timeout`): the backoff
doubles from 0.1 s up to a step (2 s, at most a tenth of the ttl); no attempt begun before the
last call, a step before the deadline, outlasts it, so one that hangs (a request into a server
that died) leaves the last step for another; the last call is tried whatever the backoff (the
step is its round trip's margin), and after it attempts go on every 0.1 s while an answer may
still come in time: a server back a step before the deadline is reached. Each attempt is
bounded by the time left. The lease is at risk when no renewal has succeeded and less than the
margin is left; lost at the deadline, or at once on a refusal.

`_move` is the only place a state changes: it records the reason, logs, wakes waiters (when the
state changed) and hands back the user's callbacks to call outside every lock. Reading a state
never changes it: `state(now)` judges the time-driven moves (`AT_RISK`, `DEADLINE`) that are due
but not yet made, so a guard never reports held past its deadline even while its renewal loop is
busy; the loop makes those moves when it wakes for them.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    Error,
    GuardStateError,
    LockLostError,
)
from ._group_models import Membership
from ._models import LockLease
from ._validate import new_uuid

if TYPE_CHECKING:
    from ._seam import Success
    from ._tracing import GuardTrace

LeaseT = TypeVar("LeaseT", LockLease, Membership)
"""What an ownership holds: a lease on a key, or a membership of a group (renewed alike)."""

logger = logging.getLogger("volcano")

RENEW_AFTER_FRACTION = 1 / 3
"""The share of the ttl that passes before the first renewal attempt."""
AT_RISK_FRACTION = 1 / 3
"""The default at-risk margin, as a share of the ttl."""
BACKOFF_FIRST = 0.1
"""Seconds before the first retry of a failed renewal (doubling after each failure)."""
BACKOFF_CAP = 2.0
"""The longest wait between renewal attempts."""
BACKOFF_TTL_FRACTION = 0.1
"""No wait between attempts is longer than this share of the ttl."""
EARLY_TTL_FRACTION = 0.05
"""A renewal goes out at most this share of the ttl before it is due, to share a request."""


class GuardState(enum.Enum):
    """Where a with_lock guard stands; `guard.state` reads it.

    Attributes:
        NEW: Made by `with_lock`, not entered yet.
        ENTERING: Acquiring the lease.
        HELD: The lease is held and renewed in the background.
        AT_RISK: Still held, but no renewal has succeeded and less than the at-risk margin
            is left before the lease may expire: pause or checkpoint the protected work.
        RELEASING: The block has ended; renewal has stopped and the release is under way.
        RELEASED: The block ended with the lease held, and the guard let it go.
        LOST: Ownership ended before the guard let go (`guard.lost_reason` says why): stop
            the protected work.
        FAILED: Entering raised; nothing was held.
    """

    NEW = "new"
    ENTERING = "entering"
    HELD = "held"
    AT_RISK = "at_risk"
    RELEASING = "releasing"
    RELEASED = "released"
    LOST = "lost"
    FAILED = "failed"


class Event(enum.Enum):
    """What can happen to a guard (see the table in the module docstring)."""

    ENTER = "enter"
    ACQUIRED = "acquired"
    ACQUISITION_FAILED = "acquisition failed"
    RENEWED = "renewed"
    RENEWAL_FAILED = "renewal failed"
    AT_RISK = "at risk"
    DEADLINE = "deadline"
    REFUSED = "refused"
    STOPPED = "stopped"
    EXIT = "exit"
    RELEASED = "released"
    RELEASE_FAILED = "release failed"
    RELEASE_REFUSED = "release refused"


_S = GuardState
_E = Event
_LIVE = (_S.HELD, _S.AT_RISK, _S.RELEASING)
"""The states in which the lease may still be held, so a DEADLINE move can be made."""
_TIMED = (_S.HELD, _S.AT_RISK)
"""The states judged by the clock on reading; RELEASING is judged once, by `to_release`."""

TRANSITIONS: dict[tuple[GuardState, Event], GuardState] = {
    (_S.NEW, _E.ENTER): _S.ENTERING,
    (_S.ENTERING, _E.ACQUIRED): _S.HELD,
    (_S.ENTERING, _E.ACQUISITION_FAILED): _S.FAILED,
    (_S.HELD, _E.RENEWED): _S.HELD,
    (_S.HELD, _E.RENEWAL_FAILED): _S.HELD,
    (_S.HELD, _E.AT_RISK): _S.AT_RISK,
    (_S.AT_RISK, _E.RENEWED): _S.HELD,
    (_S.AT_RISK, _E.RENEWAL_FAILED): _S.AT_RISK,
    **{(state, event): _S.LOST for state in _LIVE for event in (_E.DEADLINE, _E.REFUSED)},
    **{(state, _E.STOPPED): _S.LOST for state in _LIVE},
    (_S.HELD, _E.EXIT): _S.RELEASING,
    (_S.AT_RISK, _E.EXIT): _S.RELEASING,
    (_S.LOST, _E.EXIT): _S.LOST,
    (_S.RELEASING, _E.RENEWED): _S.RELEASING,
    (_S.RELEASING, _E.RELEASED): _S.RELEASED,
    (_S.RELEASING, _E.RELEASE_FAILED): _S.RELEASED,
    (_S.RELEASING, _E.RELEASE_REFUSED): _S.LOST,
}
"""Every move a guard can make: (state, event) -> next state."""

Callback = Callable[[Error], object]
"""An `on_lost` or `on_at_risk` callback: it gets the reason."""


def is_transient(error: BaseException) -> bool:
    """Whether a renewal that failed with `error` may succeed if tried again."""
    if isinstance(error, APIConnectionError):
        return True
    if isinstance(error, APIStatusError):
        status = error.status_code
        return status >= 500 or status in (408, 429) or status < 400
    return False


def backoff(failures: int, ttl: float) -> float:
    """Seconds to wait after the `failures`-th failed attempt in a row."""
    return min(BACKOFF_FIRST * 2.0 ** (failures - 1), step(ttl))


def step(ttl: float) -> float:
    """The longest wait between attempts on a lease of `ttl`; also the last call's margin."""
    return min(BACKOFF_CAP, ttl * BACKOFF_TTL_FRACTION)


@attrs.frozen
class Renewal(Generic[LeaseT]):
    """One renewal attempt to make: of which lease, how long it may take, and its request.

    The request (`request_id`) carries it alone, or in a batch with others; its span links to
    the guard's (`trace`).
    """

    lease: LeaseT
    timeout: float
    request_id: str
    trace: GuardTrace | None = None


@attrs.frozen
class Timeline(Generic[LeaseT]):
    """A lease and its times, and the failed attempts since it was adopted.

    Renew from `renew_at`, at risk from `at_risk_at`, lost at `deadline`.

    Time is the client's monotonic clock, from the first send of the request that produced the
    lease (`Success.sent_at`): the server's expiry is at least that late.
    """

    lease: LeaseT | None = None
    deadline: float = math.inf
    at_risk_at: float = math.inf
    renew_at: float = math.inf
    failures: int = 0
    last_error: Error | None = None

    @classmethod
    def of(cls, answer: Success[LeaseT], margin: float | None) -> Timeline[LeaseT]:
        """The timeline of the lease in `answer` (`margin` None: a third of the ttl)."""
        ttl = answer.value.ttl_seconds
        deadline = answer.sent_at + ttl
        return cls(
            lease=answer.value,
            deadline=deadline,
            at_risk_at=deadline - (ttl * AT_RISK_FRACTION if margin is None else margin),
            renew_at=answer.sent_at + ttl * RENEW_AFTER_FRACTION,
        )

    @property
    def ttl(self) -> float:
        """The lease's ttl (0 before there is one)."""
        return self.lease.ttl_seconds if self.lease is not None else 0.0

    @property
    def last_call(self) -> float:
        """The last attempt that still has a step's margin for its round trip."""
        return self.deadline - step(self.ttl)

    def failed(self, error: Error, now: float) -> Timeline[LeaseT]:
        """After a transient failure at `now`: when to try again.

        After a backoff, but never after the last call; past it, every `BACKOFF_FIRST` s (or
        less) while an answer may still come in time.
        """
        failures = self.failures + 1
        ttl = self.ttl
        if now < self.last_call:
            retry_at = min(now + backoff(failures, ttl), self.last_call)
        else:
            retry_at = now + backoff(1, ttl)
            if retry_at > self.deadline - backoff(1, ttl) / 2:
                retry_at = self.deadline  # too late for any answer: no more attempts
        return attrs.evolve(self, renew_at=retry_at, failures=failures, last_error=error)

    def attempt_timeout(self, now: float, limit: float) -> float:
        """How long an attempt begun at `now` may wait for its answer.

        No longer than `limit` (the client's timeout), nor past the deadline, nor, begun
        before the last call, past it (but a step at least): one that hangs (sent into a
        server that died) leaves the last step for one more try.
        """
        left = self.deadline - now
        if now < self.last_call:
            left = min(left, max(self.last_call - now, step(self.ttl)))
        return min(limit, left)


@attrs.frozen
class Notice:
    """A user's callback to call, outside every lock, with the reason of a move."""

    callback: Callback
    reason: Error
    name: str
    key: str

    def deliver(self) -> None:
        """Call it; an exception it raises is logged, never propagated."""
        try:
            self.callback(self.reason)
        except Exception:
            logger.exception("the %s callback of the guard on %s raised", self.name, self.key)


def deliver(notices: list[Notice]) -> None:
    """Call each callback in turn."""
    for notice in notices:
        notice.deliver()


class Ownership(Generic[LeaseT]):
    """One guard's state machine: its lease, its timeline, and its moves.

    Its lease is a key's (`LockLease`) or a group membership (`Membership`): both are renewed
    alike, and batched with leases of their own kind (`Schedule`).

    Thread-safe: the renewal loop, the thread leaving the block and readers share it. It tells
    the loop when it needs it and which renewal to make, and takes in outcomes; it never sends.

    Args:
        key: The lock's key.
        timeout: The client's request timeout; no renewal attempt waits longer.
        margin: Seconds before the deadline at which the lease is at risk (None: a third of
            the ttl).
        on_lost: Called once when ownership is lost.
        on_at_risk: Called each time the lease becomes at risk.
        wake: Called after every change of state, outside the lock, to wake waiters.
    """

    def __init__(
        self,
        key: str,
        *,
        timeout: float,
        margin: float | None,
        on_lost: Callback | None,
        on_at_risk: Callback | None,
        wake: Callable[[], None],
    ) -> None:
        self.key = key
        self._timeout = timeout
        self._margin = margin
        self._callbacks = {GuardState.LOST: on_lost, GuardState.AT_RISK: on_at_risk}
        self._wake = wake
        self._lock = threading.Lock()
        self._state = GuardState.NEW
        self._timeline: Timeline[LeaseT] = Timeline()
        self._in_flight: tuple[Renewal[LeaseT], float] | None = None  # (renewal, its start)
        self._reason: Error | None = None
        self._expired: LockLostError | None = None  # the DEADLINE reason, made once
        self._trace: GuardTrace | None = None  # the guard's span, which renewals link to

    def __repr__(self) -> str:
        return f"<Ownership of {self.key!r}: {self._state.value}>"

    # -- reading (never moves) ---------------------------------------------------------------

    def state(self, now: float) -> GuardState:
        """The state at `now`, counting the time-driven moves that are due."""
        with self._lock:
            return self._judge(now)

    def lease(self) -> LeaseT | None:
        """The latest lease, or None before one was acquired."""
        with self._lock:
            return self._timeline.lease

    def reason(self, now: float) -> Error | None:
        """The error that ended ownership, or None while it lasts (or never began)."""
        with self._lock:
            if self._judge(now) is not GuardState.LOST:
                return None
            return self._reason if self._reason is not None else self._deadline_reason()

    def next_change(self, now: float) -> float | None:
        """When a time-driven move could next happen (for waiters), or None: never by time."""
        with self._lock:
            state, timeline = self._judge(now), self._timeline
            if state is GuardState.HELD:
                return min(timeline.at_risk_at, timeline.deadline)
            return timeline.deadline if state in _TIMED else None

    def next_wake(self, *, renewal: bool = True) -> float | None:
        """When the renewal loop must next look at this guard, or None: nothing more to do.

        `renewal=False` leaves out a renewal already known to be due (it waits for a slot).
        """
        with self._lock:
            if self._state not in _TIMED:
                return None
            timeline = self._timeline
            wake = timeline.deadline
            if self._state is GuardState.HELD:
                wake = min(wake, timeline.at_risk_at)
            if renewal and self._in_flight is None:
                wake = min(wake, timeline.renew_at)
            return wake

    # -- events --------------------------------------------------------------------------------

    def enter(self) -> None:
        """Begin entering; a guard is single use, so any other state refuses."""
        if self._move(Event.ENTER) is None:
            with self._lock:
                state = self._state
            if state in (GuardState.ENTERING, GuardState.HELD, GuardState.AT_RISK):
                raise GuardStateError(
                    f"the guard on {self.key!r} is already entered; a guard is not re-entrant"
                )
            raise GuardStateError(
                f"the guard on {self.key!r} has been used ({state.value}); "
                "call with_lock() again for a new lease"
            )

    def acquired(self, answer: Success[LeaseT], trace: GuardTrace | None = None) -> None:
        """The acquisition (and the renewal that dates a replay) succeeded, in `trace`."""
        self._trace = trace  # before the renewal loop sees the guard
        self._move(Event.ACQUIRED, timeline=Timeline.of(answer, self._margin))

    def acquisition_failed(self) -> None:
        """Entering raised: the guard is spent."""
        self._move(Event.ACQUISITION_FAILED)

    def due(self, now: float, *, early: float = 0.0) -> tuple[list[Notice], bool]:
        """Make the time-driven moves due at `now`; also say whether a renewal is due.

        `early`: a renewal due within that many seconds (at most `EARLY_TTL_FRACTION` of the
        ttl; never a retry, which keeps its backoff) counts as due already, so that it shares
        a request with those due now.
        """
        notices = self._catch_up(now)
        with self._lock:
            renew = (
                self._state in _TIMED
                and self._in_flight is None
                and now + self._early(early) >= self._timeline.renew_at
            )
        return notices, renew

    def begin_renewal(
        self, now: float, *, early: float = 0.0, request_id: str | None = None
    ) -> Renewal[LeaseT] | None:
        """The renewal to start at `now`, or None when none is due or it is too late.

        `early` as for `due`; `request_id`: the request that will carry it (a fresh one by
        default).
        """
        with self._lock:
            timeline = self._timeline
            if (
                self._state not in _TIMED
                or self._in_flight is not None
                or now + self._early(early) < timeline.renew_at
                or now >= timeline.deadline
                or timeline.lease is None
            ):
                return None
            renewal = Renewal(
                timeline.lease,
                timeline.attempt_timeout(now, self._timeout),
                request_id or new_uuid(),
                self._trace,
            )
            self._in_flight = (renewal, now)
            return renewal

    def renewed(self, answer: Success[LeaseT], now: float) -> list[Notice]:
        """A renewal succeeded; an answer that arrives after the deadline changes nothing."""
        notices = self._catch_up(now)
        timeline = Timeline.of(answer, self._margin)
        return notices + (self._move(Event.RENEWED, timeline=timeline) or [])

    def renewal_failed(self, error: Error, now: float) -> list[Notice]:
        """A renewal failed: retry a transient failure after a backoff; a refusal loses."""
        notices = self._catch_up(now)
        if not is_transient(error):
            return notices + (self._move(Event.REFUSED, reason=error) or [])
        with self._lock:
            timeline = self._timeline.failed(error, now)
        moved = self._move(Event.RENEWAL_FAILED, reason=error, timeline=timeline, now=now)
        return notices + (moved or [])

    def relabelled(self, answer: Success[LeaseT], now: float) -> list[Notice]:
        """A renewal the holder sent itself (a new label: `proclaim`) succeeded: adopt it.

        The renewal loop's own attempt, if one is under way, stays under way and is judged
        when it ends. The later of the two deadlines is kept, each counted from its own send.
        """
        notices = self._catch_up(now)
        timeline = Timeline.of(answer, self._margin)
        with self._lock:
            if timeline.deadline < self._timeline.deadline:
                timeline = attrs.evolve(self._timeline, lease=answer.value)
        moved = self._move(Event.RENEWED, timeline=timeline, keep_in_flight=True)
        return notices + (moved or [])

    def refused(self, error: Error, now: float) -> list[Notice]:
        """A request the holder sent about its lease was refused (a 409): ownership is lost."""
        return self._catch_up(now) + (self._move(Event.REFUSED, reason=error) or [])

    def renewal_ended(self) -> None:
        """The renewal under way ended without an answer to judge (cancelled, or let go of)."""
        with self._lock:
            self._in_flight = None

    def begin_exit(self, now: float) -> list[Notice]:
        """The block ended: stop renewing. A guard not in its block refuses."""
        notices = self._catch_up(now)
        moved = self._move(Event.EXIT)
        if moved is None:
            with self._lock:
                state = self._state
            raise GuardStateError(f"the guard on {self.key!r} is {state.value}, not entered")
        return notices + moved

    def to_release(self, now: float) -> tuple[list[Notice], LeaseT | None]:
        """Once renewal has stopped: the lease to release, or None when ownership is lost.

        The last time the deadline counts: past it, the guard is LOST and sends nothing.
        """
        notices = self._catch_up(now)
        with self._lock:
            past = self._state is GuardState.RELEASING and now >= self._timeline.deadline
        if past:
            notices += self._move(Event.DEADLINE, now=now) or []
        with self._lock:
            releasing = self._state is GuardState.RELEASING
            return notices, self._timeline.lease if releasing else None

    def release_ended(self, error: BaseException | None, now: float) -> list[Notice]:
        """The release on exit was answered: refused (409) means ownership was already lost.

        A release the server accepted ends the guard RELEASED even if the client's deadline
        passed while it was in flight: the server judged the lease live when it ended it.
        """
        if error is None:
            event = Event.RELEASED
        elif isinstance(error, APIStatusError) and error.status_code == 409:
            event = Event.RELEASE_REFUSED
        else:
            event = Event.RELEASE_FAILED
        return self._move(event, reason=error) or []

    def stop(self, reason: Error) -> list[Notice]:
        """Renewal stopped for good (the client closed, or its loop broke)."""
        return self._move(Event.STOPPED, reason=reason) or []

    # -- the one move ------------------------------------------------------------------------

    def _move(
        self,
        event: Event,
        *,
        reason: BaseException | None = None,
        timeline: Timeline[LeaseT] | None = None,
        now: float | None = None,
        keep_in_flight: bool = False,
    ) -> list[Notice] | None:
        """Make `event` happen, if the table lists a move for it in the current state.

        Under the lock: look up the next state, take `timeline` (a renewal's outcome, which
        ends the attempt under way unless `keep_in_flight`), record the reason. Then log, wake
        waiters, and return the callback to call. None: no move was listed.
        """
        with self._lock:
            before = self._state
            after = TRANSITIONS.get((before, event))
            if after is None:
                return None
            if timeline is not None:
                if timeline.failures == 0:  # a new lease: its deadline reason is its own
                    self._expired = None
                self._timeline = timeline
                if not keep_in_flight:
                    self._in_flight = None
            self._state = after
            entered = after if after is not before else None
            if entered is GuardState.LOST and self._reason is None:
                self._reason = reason if isinstance(reason, Error) else self._deadline_reason()
            told = None
            if entered is GuardState.LOST:
                told = self._reason
            elif entered is GuardState.AT_RISK:
                told = self._at_risk_reason(now)
            next_attempt = self._timeline.renew_at
        self._log(before, entered, event=event, reason=told or reason, now=now, retry=next_attempt)
        if entered is not None:
            self._wake()
        callback = self._callbacks.get(entered) if entered is not None else None
        if callback is None or told is None or entered is None:
            return []
        name = "on_lost" if entered is GuardState.LOST else "on_at_risk"
        return [Notice(callback, told, name, self.key)]

    def _log(
        self,
        before: GuardState,
        entered: GuardState | None,
        *,
        event: Event,
        reason: BaseException | None,
        now: float | None,
        retry: float,
    ) -> None:
        # Each reason's text carries the request id of the answer behind it.
        if event in (Event.RELEASE_REFUSED, Event.RELEASE_FAILED):
            logger.warning(
                "releasing the lease on %s failed: %s",
                self.key,
                reason,
                exc_info=not isinstance(reason, Error),
            )
        elif entered is GuardState.LOST:
            logger.warning("lost the lease on %s: %s", self.key, reason)
        elif entered is GuardState.AT_RISK:
            logger.warning("the lease on %s is at risk: %s", self.key, reason)
        elif event is Event.RENEWAL_FAILED and now is not None:
            logger.info(
                "renewal of %s failed (%s), retrying in %.2fs (request_id=%s)",
                self.key,
                type(reason).__name__,
                retry - now,
                getattr(reason, "request_id", None),
            )
        elif before is GuardState.AT_RISK and entered is GuardState.HELD:
            logger.info("the lease on %s is renewed and no longer at risk", self.key)

    # -- inside the lock -----------------------------------------------------------------------

    def _catch_up(self, now: float) -> list[Notice]:
        """Make the time-driven move due at `now`, if any (past the deadline: straight to LOST)."""
        with self._lock:
            due = self._judge(now)
            if due is self._state:
                return []
        event = Event.DEADLINE if due is GuardState.LOST else Event.AT_RISK
        return self._move(event, now=now) or []

    def _early(self, early: float) -> float:
        # A retry keeps its backoff: only the renewal a third into the ttl may go out early.
        timeline = self._timeline
        if timeline.lease is None or timeline.failures:
            return 0.0
        return min(early, timeline.lease.ttl_seconds * EARLY_TTL_FRACTION)

    def _judge(self, now: float) -> GuardState:
        if self._state in _TIMED and now >= self._timeline.deadline:
            return GuardState.LOST
        if self._state is GuardState.HELD and now >= self._timeline.at_risk_at:
            return GuardState.AT_RISK
        return self._state

    def _deadline_reason(self) -> LockLostError:
        if self._expired is None:
            timeline = self._timeline
            ttl = timeline.lease.ttl_seconds if timeline.lease is not None else 0.0
            last = timeline.last_error
            got = "" if last is None else f"; the last attempt got {last!r}"
            self._expired = LockLostError(
                f"no renewal of {self.key!r} succeeded before its ttl of {ttl:g}s ran out{got}"
            )
            self._expired.__cause__ = last
        return self._expired

    def _at_risk_reason(self, now: float | None) -> Error:
        timeline = self._timeline
        if timeline.last_error is not None:
            return timeline.last_error
        left = "" if now is None else f"; {timeline.deadline - now:.2f}s are left"
        if self._in_flight is None:
            return APITimeoutError(f"no renewal of {self.key!r} has been sent yet{left}")
        renewal, began = self._in_flight
        waited = "" if now is None else f" for {now - began:.2f}s"
        return APITimeoutError(
            f"the renewal of {self.key!r} has had no answer{waited}{left}",
            request_id=renewal.request_id,
        )
