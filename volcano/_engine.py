"""What a client hands its parts: sending, acquiring, renewing, and the clock.

`Engine` (for `Client`) and `AsyncEngine` (for `AsyncClient`) are made by their client and given
to its `locks` namespace and to every guard at construction, so no part reaches into the client:

- `send`: one request, once (a closed client refuses);
- `acquire`: the one path every acquisition takes, each request retried once, a long wait
  chained (`WaitChain`); the answer dates from its request's first send;
- `renew` and `release`: one renewal or release of a lease the SDK made (not retried);
- `hold` and `let_go`: a guard's lease renewed in the background by the client's one renewal
  loop (made on first use), and no longer;
- `clock` and `timeout`.

The renewal loop sends each batch through `_renew_batch`: a batch of one is a plain renew, more
go out as one `POST /v1/leases/renew`. A server without it (an older one: 404, or 405) is sent
one lease per request from then on; a 413 sends that batch's leases one by one. Each lease's
outcome is its own: a refusal inside the batch, or the whole answer's error for every lease.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, TypeVar

from . import _seam
from ._exceptions import APIStatusError, ClientClosedError, Error, LockHeldError
from ._renewer import Renewer
from ._retry import retry_once
from ._schedule import BatchesUnsupported, Outcome
from ._validate import new_uuid
from ._waiting import WaitChain

if TYPE_CHECKING:
    import httpx

    from ._clock import Clock
    from ._config import Settings
    from ._models import LockLease
    from ._ownership import Ownership
    from ._requests import Acquisition
    from ._schedule import Batch
    from ._seam import Answer, Call

T = TypeVar("T")

# A batch answered with one of these goes out again lease by lease, and so does every renewal
# from then on: 404 and 405 from a server that predates batch renewal, 413 from one whose body
# limit is smaller than a batch.
_NO_BATCHES = (404, 405, 413)


class EngineBase:
    """What both engines share: settings, the clock, whether the client is closed."""

    def __init__(self, settings: Settings, clock: Clock, name: str) -> None:
        self.settings = settings
        self.clock = clock
        self.timeout = settings.timeout
        self.closed = False
        self._name = name

    def describe(self) -> str:
        """The client, as its repr shows it (never a key)."""
        state = ", closed" if self.closed else ""
        return f"{self._name}(api_url={self.settings.api_url!r}, timeout={self.timeout!r}{state})"

    def check_open(self) -> None:
        """Raise `ClientClosedError` once the client is closed."""
        if self.closed:
            raise ClientClosedError(f"this volcano.{self._name} is closed")


def renew_one(batch: Batch) -> Call[LockLease]:
    """The plain renew that carries a batch of one lease."""
    (lease,) = batch.leases
    return _seam.renew(lease, ttl=lease.ttl_seconds, request_id=batch.request_id)


def renew_many(batch: Batch) -> Call[list[_seam.Renewed]]:
    """The batch renewal that carries a batch of several leases."""
    return _seam.renew_many(batch.leases, request_id=batch.request_id)


def renewed(answer: Answer[LockLease]) -> list[Outcome]:
    """The outcome of a plain renew's answer."""
    return [Outcome(answer=answer)]


def each_renewed(answer: Answer[list[_seam.Renewed]]) -> list[Outcome]:
    """Each lease's outcome from a batch's answer, in order.

    A renewed lease dates from the batch's first send; a refusal is that lease's alone.
    """
    return [
        Outcome(error=result)
        if isinstance(result, Error)
        else Outcome(answer=_seam.Answer(result, answer.sent_at, replayed=answer.replayed))
        for result in answer.value
    ]


def batch_failed(batch: Batch, error: Error) -> list[Outcome]:
    """Each lease's outcome when the whole request failed with `error`: that error.

    Raises:
        BatchesUnsupported: The server has no batch renewal (`_NO_BATCHES`).
    """
    if (
        isinstance(error, APIStatusError)
        and error.status_code in _NO_BATCHES
        and len(batch.entries) > 1
    ):
        raise BatchesUnsupported from error
    return [Outcome(error=error) for _ in batch.entries]


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
        self._lifecycle = threading.Lock()
        self._renewer_made: Renewer | None = None

    def send(
        self, call: Call[T], *, request_timeout: float | None = None, sent_at: float | None = None
    ) -> Answer[T]:
        """Send `call` once; `sent_at`: when its request id was first sent (default: now)."""
        self.check_open()
        first = self.clock.monotonic() if sent_at is None else sent_at
        return self._sender.send(call, sent_at=first, request_timeout=request_timeout)

    def acquire(self, acquisition: Acquisition) -> Answer[LockLease]:
        """Acquire, each request retried once; the answer dates from its request's first send.

        A wait longer than one request may hold is a chain of requests with the same owner
        token (`WaitChain`); each request's timeout stretches over its wait.
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

    def renew(self, lease: LockLease) -> Answer[LockLease]:
        """Renew `lease` once for its own ttl, not retried."""
        return self.send(_seam.renew(lease, ttl=lease.ttl_seconds, request_id=new_uuid()))

    def release(self, lease: LockLease) -> None:
        """Release `lease` once, not retried."""
        self.send(_seam.release(lease, request_id=new_uuid()))

    def hold(self, ownership: Ownership) -> None:
        """Renew `ownership`'s lease in the background from now on."""
        self._renewer().add(ownership)

    def let_go(self, ownership: Ownership) -> None:
        """Renew it no more, once a renewal of it that is under way has ended."""
        self._renewer().remove(ownership)

    def close(self) -> bool:
        """Refuse every request from now on; stop renewing, each guard still held lost.

        Returns whether this call closed it (False: it was closed already).
        """
        with self._lifecycle:
            if self.closed:
                return False
            self.closed = True
            renewer = self._renewer_made
        if renewer is not None:
            renewer.stop(ClientClosedError("the client was closed"))
        return True

    def settled(self) -> bool:
        """Whether the renewal loop is asleep with nothing under way (a test's fake clock)."""
        return self._renewer_made is None or self._renewer_made.settled()

    def _renewer(self) -> Renewer:
        """The client's renewal loop, made on first use; once closed, it refuses new guards."""
        with self._lifecycle:
            if self._renewer_made is None:
                self._renewer_made = Renewer(self._renew_batch, self.clock)
                if self.closed:
                    self._renewer_made.stop(ClientClosedError("the client was closed"))
            return self._renewer_made

    def _renew_batch(self, batch: Batch) -> list[Outcome]:
        """Send one batch of renewals; each lease's outcome, in order."""
        try:
            if len(batch.entries) == 1:
                return renewed(self.send(renew_one(batch), request_timeout=batch.timeout))
            return each_renewed(self.send(renew_many(batch), request_timeout=batch.timeout))
        except Error as error:
            return batch_failed(batch, error)
