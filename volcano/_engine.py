"""What a `Client` hands its parts: sending, acquiring, the renewal loop, and the clock.

The client makes its `Engine` and gives it to its `locks` and to every guard at construction, so
no part reaches into the client: `send` (one request, once), `acquire` (each request retried
once, a long wait chained: `WaitChain`; the answer dates from its request's first send), `renew`
and `release` (one each, not retried), `hold` and `let_go` (a guard's lease renewed in the
background, and no longer), `clock` and `timeout`.

The renewal loop is one thread per client. It sleeps until its `Schedule` needs it, takes a
step, calls the user's callbacks, and hands the batches it starts to at most `MAX_IN_FLIGHT`
daemon sender threads, which send (`_renew`: a plain renew for one lease, `POST
/v1/leases/renew` for more) and report each lease's outcome. A server without batch renewal
(404 or 405; 413 from a smaller body limit) is sent the same leases at once one by one, and one
lease per request from then on. The loop's `finally` leaves every guard it serves lost, so none
is left looking held by a loop that is gone; daemon threads never keep a program from exiting.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from . import _seam, _tracing
from ._exceptions import APIStatusError, ClientClosedError, Error, LockHeldError, LockLostError
from ._group_models import Membership
from ._ownership import deliver
from ._retry import retry_once
from ._schedule import MAX_IN_FLIGHT, BatchesUnsupported, Outcome, Schedule
from ._validate import new_uuid
from ._waiting import WaitChain

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import httpx

    from ._clock import Clock
    from ._config import Settings
    from ._models import LockLease
    from ._ownership import Ownership
    from ._requests import Acquisition
    from ._schedule import Batch, Work
    from ._seam import Call, Success

logger = logging.getLogger("volcano")

T = TypeVar("T")

# A batch answered with one of these goes out again lease by lease, and so does every renewal
# from then on: 404 and 405 from a server that predates batch renewal, 413 from one whose body
# limit is smaller than a batch.
_NO_BATCHES = (404, 405, 413)


class EngineBase:
    """What both engines share: settings, the clock, the schedule, whether the client is closed."""

    def __init__(self, settings: Settings, clock: Clock, name: str) -> None:
        self.settings = settings
        self.clock = clock
        self.timeout = settings.timeout
        self.closed = False
        self._name = name
        self._schedule = Schedule()

    def describe(self) -> str:
        """The client, as its repr shows it (never a key)."""
        state = ", closed" if self.closed else ""
        return f"{self._name}(api_url={self.settings.api_url!r}, timeout={self.timeout!r}{state})"

    def check_open(self) -> None:
        """Raise `ClientClosedError` once the client is closed."""
        if self.closed:
            raise ClientClosedError(f"this volcano.{self._name} is closed")

    @staticmethod
    def outcomes(batch: Batch, answer: Success[Sequence[object]] | Error) -> list[Outcome]:
        """Each lease's outcome, in order, from the answer to `batch` (or its whole error).

        A renewed lease dates from the request's first send; a refusal is that lease's alone.

        Raises:
            BatchesUnsupported: The server has no batch renewal (`_NO_BATCHES`).
        """
        if isinstance(answer, Error):
            status = answer.status_code if isinstance(answer, APIStatusError) else None
            if status in _NO_BATCHES and len(batch.entries) > 1:
                raise BatchesUnsupported from answer
            return [Outcome(error=answer) for _ in batch.entries]
        return [
            Outcome(error=result)
            if isinstance(result, Error)
            else Outcome(answer=_seam.Success(result, answer.sent_at, replayed=answer.replayed))
            for result in answer.value
        ]

    def finish(self, batch: Batch, send: Exception | Sequence[Outcome]) -> None:
        """Hand the schedule how `batch` fared: its outcomes, or what its send raised."""
        outcomes = batch.unsent()
        if isinstance(send, BatchesUnsupported):
            self._schedule.singles()
        elif isinstance(send, Exception):
            outcomes = batch.failed(send)  # a bug: it loses this batch, never the loop
        else:
            outcomes = list(send)
        self._schedule.finish(batch, outcomes)


class Engine(EngineBase):
    """The machinery of a `Client`, handed to its `locks` and its guards.

    Args:
        http: The httpx client requests go through.
        settings: The client's settings.
        clock: The client's clock.
    """

    def __init__(self, http: httpx.Client, settings: Settings, clock: Clock) -> None:
        super().__init__(settings, clock, "Client")
        self._sender = _seam.Sender(http, settings)
        self._changed = threading.Condition()  # guards the schedule; the loop sleeps on it
        self._thread: threading.Thread | None = None
        self._batches: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._senders: list[threading.Thread] = []
        self._waiting = False

    def send(
        self,
        call: Call[T],
        *,
        resend: bool = False,
        request_timeout: float | None = None,
        sent_at: float | None = None,
    ) -> Success[T]:
        """Send `call` once: the first time, or (`resend`) again with its request id.

        `sent_at`: when its request id was first sent (default: now).
        """
        self.check_open()
        first = self.clock.monotonic() if sent_at is None else sent_at
        return self._sender.send(
            call, sent_at=first, resend=resend, request_timeout=request_timeout
        )

    def acquire(self, acquisition: Acquisition) -> Success[LockLease]:
        """Acquire, each request retried once; the answer dates from its request's first send.

        A wait longer than one request may hold is a chain of requests with the same owner
        token; each request's timeout stretches over its wait.
        """
        clock = self.clock
        chain = WaitChain(acquisition, clock.monotonic())
        while True:
            call, wait = chain.next_call(clock.monotonic())
            send = functools.partial(
                self.send, call, request_timeout=self.timeout + wait, sent_at=clock.monotonic()
            )
            try:
                return retry_once(send, clock.sleep, f"acquire {call.subject}")
            except LockHeldError:
                if not chain.goes_on(clock.monotonic()):
                    raise

    def renew(self, lease: LockLease) -> Success[LockLease]:
        """Renew `lease` once for its own ttl, not retried."""
        return self.send(_seam.renew(lease, ttl=lease.ttl_seconds, request_id=new_uuid()))

    def release(self, lease: LockLease) -> None:
        """Release `lease` once, not retried."""
        self.send(_seam.release(lease, request_id=new_uuid()))

    def hold(self, ownership: Ownership[Any]) -> None:
        """Renew `ownership`'s lease in the background from now on; once closed, it is lost."""
        with self._changed:
            reason = self._schedule.stopped
            if reason is None:
                self._schedule.add(ownership)
                if self._thread is None:
                    self._thread = _daemon(self._run, "volcano-renewer")
                self._changed.notify_all()
        if reason is not None:
            deliver(ownership.stop(reason))

    def let_go(self, ownership: Ownership[Any]) -> None:
        """Renew it no more, once a renewal of it that is under way has ended."""
        with self._changed:
            self._schedule.remove(ownership)
            while self._schedule.busy(ownership):
                self._changed.wait()

    def close(self) -> bool:
        """Refuse every request from now on; stop renewing, each guard still held lost.

        Returns whether this call closed it (False: it was closed already).
        """
        with self._changed:
            if self.closed:
                return False
            self.closed = True
            notices = self._schedule.stop(ClientClosedError("the client was closed"))
            self._changed.notify_all()
            thread, senders, self._senders = self._thread, self._senders, []
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        for _ in senders:
            self._batches.put(None)
        for sender in senders:  # renewals under way end within their own timeouts
            sender.join()
        deliver(notices)
        return True

    def settled(self) -> bool:
        """Whether the loop is asleep with no renewal under way (a test's fake clock asks)."""
        with self._changed:
            return (self._thread is None or self._waiting) and self._schedule.idle()

    def _run(self) -> None:
        try:
            while (work := self._next_work()) is not None:
                deliver(work.notices)
                for batch in work.starts:
                    self._batches.put(batch)
        except Exception:
            logger.exception("the lease renewer stopped unexpectedly")
        finally:
            with self._changed:
                notices = self._schedule.stop(LockLostError("the lease renewer stopped"))
                self._changed.notify_all()
            deliver(notices)

    def _next_work(self) -> Work | None:
        """Sleep until the schedule has something to do, and take that step; None once stopped."""
        with self._changed:
            while self._schedule.stopped is None:
                work = self._schedule.step(self.clock.monotonic())
                self._changed.notify_all()  # for let_go(): a finished renewal was taken in
                if work.starts and not self._senders:  # the first batch starts the senders
                    self._senders = [
                        _daemon(self._send_batches, f"volcano-renewal-{n}")
                        for n in range(MAX_IN_FLIGHT)
                    ]
                if work.starts or work.notices:
                    return work
                pause = self._schedule.next_wake(self.clock.monotonic())
                if pause == 0:
                    continue
                self._waiting = True
                self.clock.wait(self._changed, pause)
                self._waiting = False
            return None

    def _send_batches(self) -> None:
        """A sender thread: send each batch handed over, and report how it fared."""
        while (batch := self._batches.get()) is not None:
            fared = self._fared(batch)
            with self._changed:
                self.finish(batch, fared)
                self._changed.notify_all()

    def _fared(self, batch: Batch) -> Exception | Sequence[Outcome]:
        try:
            return self.outcomes(batch, self._answer(batch))
        except Exception as exc:  # noqa: BLE001 - BatchesUnsupported, or a bug: see finish()
            return exc

    def _answer(self, batch: Batch) -> Success[Sequence[object]] | Error:
        call = renewals(batch)
        traces = [renewal.trace for _, renewal in batch.entries]
        try:
            with _tracing.renewals(traces, batch.subjects):
                return self.send(call, request_timeout=batch.timeout)
        except Error as error:
            return error


def renewals(batch: Batch) -> Call[Sequence[object]]:
    """The request that renews `batch`'s leases: keys' leases, or group memberships."""
    if isinstance(batch.leases[0], Membership):
        return _seam.groups.membership_renewals(batch.leases, request_id=batch.request_id)
    return _seam.renewals(batch.leases, request_id=batch.request_id)


def _daemon(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
