"""`volcano.AsyncClient`: the asyncio client and its `locks` namespace.

The same surface as `Client`, awaited; both build their requests and read their answers with
the same code, and only the sending differs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, TypeVar

import httpx

from . import _config, _requests, _tracing, _validate
from ._async_renewer import AsyncRenewer
from ._clock import SYSTEM_CLOCK, Clock
from ._elections import AsyncElections
from ._exceptions import ClientClosedError, InvalidArgumentError, LockHeldError
from ._guard import AsyncLockGuard
from ._retry import retry_once_async
from ._transport import AsyncTransport
from ._waiting import WaitChain

if TYPE_CHECKING:
    import uuid
    from collections.abc import AsyncIterator, Callable
    from datetime import timedelta
    from types import TracebackType

    from ._exceptions import Error
    from ._models import ForceReleaseResult, LockLease, LockState
    from ._ownership import Attempt
    from ._requests import Acquisition
    from ._transport import Answer, Call
    from ._watch import AsyncLockWatch

T = TypeVar("T")


class AsyncClient:
    """A client of the Volcano locks API for asyncio code.

    Every argument defaults to its environment variable. Use it as an async context manager
    (`async with volcano.AsyncClient() as client:`), or `await client.close()` when done.

    Args:
        anon_key: The project's anon key (default: `VOLCANO_ANON_KEY`). It names the project.
        service_key: The project's service key (default: `VOLCANO_SERVICE_KEY`), the
            credential. Keep it on trusted servers only.
        api_url: The API's base URL (default: `VOLCANO_API_URL`, else
            `https://api.volcano.dev`). Requests always go there, even through `http_client`.
        timeout: Seconds (or a `timedelta`) each request may take; default 10.
        http_client: An `httpx.AsyncClient` to send through (for proxies, TLS settings, or
            tests). Its base URL and timeout are not used; its default headers, cookies and
            query parameters are read once, here. `close()` leaves it open.
        _clock: For tests only: the clock that times renewals and retries.

    Raises:
        InvalidArgumentError: A key is missing (the message names its variable), or an
            argument is malformed.
    """

    def __init__(
        self,
        *,
        anon_key: str | None = None,
        service_key: str | None = None,
        api_url: str | None = None,
        timeout: float | timedelta = _config.DEFAULT_TIMEOUT,
        http_client: httpx.AsyncClient | None = None,
        _clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._settings = _config.resolve(
            anon_key=anon_key, service_key=service_key, api_url=api_url, timeout=timeout
        )
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidArgumentError(
                f"http_client must be an httpx.AsyncClient, got {type(http_client).__name__}"
            )
        self._owns_http = http_client is None
        self._http = httpx.AsyncClient() if http_client is None else http_client
        self._clock = _clock
        self._transport = AsyncTransport(self._http, self._settings, _clock)
        self._closed = False
        self._renewer_instance: AsyncRenewer | None = None
        self._locks = AsyncLocks(self)
        self._elections = AsyncElections(self)

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"AsyncClient(api_url={self.api_url!r}, timeout={self.timeout!r}{state})"

    async def __aenter__(self) -> AsyncClient:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def locks(self) -> AsyncLocks:
        """The lock operations: acquire, renew, release, get, force_release, check, with_lock."""
        return self._locks

    @property
    def elections(self) -> AsyncElections:
        """Leader elections on locks: campaign, leader, observe."""
        return self._elections

    @property
    def api_url(self) -> str:
        """The base URL requests go to."""
        return self._settings.api_url

    @property
    def timeout(self) -> float:
        """Seconds each request may take."""
        return self._settings.timeout

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    async def close(self) -> None:
        """Stop renewing, mark active guards lost, and close the HTTP client if it is ours.

        Calling it again does nothing. A closed client raises `ClientClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        if self._renewer_instance is not None:
            await self._renewer_instance.stop(ClientClosedError("the client was closed"))
        if self._owns_http:
            await self._http.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this volcano.AsyncClient is closed")

    async def _send(self, call: Call[T], *, request_timeout: float | None = None) -> Answer[T]:
        self._check_open()
        return await self._transport.send(call, request_timeout=request_timeout)

    async def _acquire(self, acquisition: Acquisition) -> Answer[LockLease]:
        """Acquire, each request retried once; the answer dates from its request's first send.

        The one path every acquisition takes (`acquire` and entering `with_lock`). A wait longer
        than one request may hold is a chain of requests with the same owner token
        (`WaitChain`); each request's timeout stretches over its wait.
        """
        clock = self._clock
        chain = WaitChain(acquisition, clock.monotonic())
        while True:
            call, wait = chain.next_call(clock.monotonic())
            send = functools.partial(self._send, call, request_timeout=self.timeout + wait)
            try:
                return await retry_once_async(send, clock.async_sleep, f"acquire {call.key}")
            except LockHeldError:
                if not chain.goes_on(clock.monotonic()):
                    raise

    async def _renew(self, attempt: Attempt) -> Answer[LockLease]:
        """Send one of the renewal loop's attempts (a trace of its own, linked to its guard)."""
        with _tracing.renewal(attempt.trace, attempt.call.key):
            return await self._send(attempt.call, request_timeout=attempt.timeout)

    def _renewer(self) -> AsyncRenewer:
        """The client's renewal loop, made on first use; once closed, it refuses new guards."""
        if self._renewer_instance is None:
            self._renewer_instance = AsyncRenewer(self._renew, self._clock)
            if self._closed:
                self._renewer_instance.refuse(ClientClosedError("the client was closed"))
        return self._renewer_instance


class AsyncLocks:
    """The lock operations of an `AsyncClient`, reached as `client.locks`.

    The same methods as `Locks`, awaited, with the same arguments, results and errors.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def __repr__(self) -> str:
        return f"<AsyncLocks of {self._client!r}>"

    @_tracing.traced_async("acquire")
    async def acquire(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        wait: float | timedelta = 0,
        label: str | None = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> LockLease:
        """Acquire a lease on `key` for `ttl` seconds, waiting up to `wait`; see `Locks.acquire`.

        A transport failure or a 503 is retried once with the very same owner token, request
        id, key, ttl and credentials; nothing else is retried. Cancelling a waiting acquire
        closes its connection, which takes it out of the key's queue.
        """
        acquisition = _requests.acquire(
            key, ttl=ttl, limit=limit, wait=wait, label=label, token=token, request_id=request_id
        )
        return (await self._client._acquire(acquisition)).value

    @_tracing.traced_async("renew")
    async def renew(
        self,
        key: str,
        lease: LockLease,
        *,
        ttl: float | timedelta | None = None,
        label: str | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> LockLease:
        """Extend `lease`, returning a new lease (the old one is unchanged); see `Locks.renew`."""
        call = _requests.renew(key, lease, ttl=ttl, label=label, request_id=request_id)
        return (await self._client._send(call)).value

    @_tracing.traced_async("release")
    async def release(
        self, key: str, lease: LockLease, *, request_id: str | uuid.UUID | None = None
    ) -> None:
        """End `lease`; see `Locks.release`."""
        await self._client._send(_requests.release(key, lease, request_id=request_id))

    @_tracing.traced_async("get")
    async def get(self, key: str, *, request_id: str | uuid.UUID | None = None) -> LockState:
        """Report `key`'s state without acquiring it; see `Locks.get`."""
        return (await self._client._send(_requests.get(key, request_id=request_id))).value

    @_tracing.traced_async("force_release")
    async def force_release(
        self, key: str, *, request_id: str | uuid.UUID | None = None
    ) -> ForceReleaseResult:
        """Remove `key`'s live lease, whoever holds it; see `Locks.force_release`."""
        call = _requests.force_release(key, request_id=request_id)
        return (await self._client._send(call)).value

    @_tracing.traced_async("check")
    async def check(
        self, key: str, fencing_token: int, *, request_id: str | uuid.UUID | None = None
    ) -> bool:
        """Whether `fencing_token` names a live lease of `key` now; see `Locks.check`."""
        call = _requests.check(key, fencing_token, request_id=request_id)
        return (await self._client._send(call)).value

    def watch(self, key: str, *, after_version: int | None = None) -> AsyncLockWatch:
        """Watch `key`: its state now, then one state per change; see `Locks.watch`.

        An async iterator (`async for state in client.locks.watch(key)`, or `anext()`), and an
        async context manager. `aclose()` (or leaving the `async with`) ends it at once,
        cancelling a poll under way; so does cancelling the task that reads it.
        """
        from . import _watch

        cursor = _watch.WatchCursor(_validate.key(key), _validate.version(after_version))
        client = self._client
        return _watch.AsyncLockWatch(
            cursor, send=client._send, clock=client._clock, timeout=client.timeout
        )

    def list(self, prefix: str = "", *, page_size: int = 100) -> AsyncIterator[LockState]:
        """Every key that is held or waited for, in key order; see `Locks.list`.

        An async iterator: `async for state in client.locks.list("report-"):`.
        """
        from . import _watch

        checked, size = _validate.prefix(prefix), _validate.page_size(page_size)
        return _watch.async_pages(self._client._send, checked, size)

    def with_lock(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        wait: float | timedelta = 0,
        label: str | None = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> AsyncLockGuard:
        """A guard holding `key` for an `async with` block; see `Locks.with_lock`.

        ```python
        async with client.locks.with_lock("daily-report", ttl=30) as guard:
            guard.check()  # raises LockLostError once ownership is lost
        ```

        The callbacks are plain functions, called on the event loop: they must not block.
        """
        plan = _requests.with_lock(
            key,
            ttl=ttl,
            limit=limit,
            wait=wait,
            label=label,
            token=token,
            request_id=request_id,
            at_risk_margin=at_risk_margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
        )
        return AsyncLockGuard(self._client, plan)
