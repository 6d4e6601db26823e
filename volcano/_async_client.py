"""`volcano.AsyncClient`: the asyncio client and its `locks` namespace.

The same surface as `Client`, awaited; both build their requests and read their answers with
the same code, and only the sending differs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import httpx

from . import _config, _requests, _tracing, _validate
from ._base import BaseClient
from ._clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    import uuid
    from collections.abc import AsyncIterator, Callable
    from datetime import timedelta
    from types import TracebackType

    from . import _watch
    from ._async_engine import AsyncEngine
    from ._elections import AsyncElections
    from ._exceptions import Error
    from ._groups import AsyncGroups
    from ._guard import AsyncLockGuard
    from ._models import ForceReleaseResult, LockHolder, LockLease, LockState


class AsyncClient(BaseClient[httpx.AsyncClient, "AsyncEngine", "AsyncLocks"]):
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
        _clock: Clock = SYSTEM_CLOCK,  # for tests: the clock of renewals and retries
    ) -> None:
        from ._async_engine import AsyncEngine  # the renewal machinery: with the first client

        super().__init__(
            httpx.AsyncClient,
            AsyncEngine,
            AsyncLocks,
            anon_key=anon_key,
            service_key=service_key,
            api_url=api_url,
            timeout=timeout,
            http_client=http_client,
            clock=_clock,
        )

    @functools.cached_property
    def elections(self) -> AsyncElections:
        """Leader elections on locks: campaign, leader, observe."""
        from ._elections import AsyncElections  # loaded with the first election

        return AsyncElections(self._engine)

    @functools.cached_property
    def groups(self) -> AsyncGroups:
        """Groups of members with capabilities: create, join, members, watch, campaign..."""
        from ._groups import AsyncGroups  # loaded with the first group call

        return AsyncGroups(self._engine)

    async def __aenter__(self) -> AsyncClient:
        self._engine.check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop renewing, mark active guards lost, and close the HTTP client if it is ours.

        Calling it again does nothing. A closed client raises `ClientClosedError`.
        """
        if await self._engine.close() and self._owns_http:
            await self._http.aclose()


class AsyncLocks:
    """The lock operations of an `AsyncClient`, reached as `client.locks`.

    The same methods as `Locks`, awaited, with the same arguments, results and errors.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<AsyncLocks of {self._engine.describe()}>"

    @_tracing.traced_async("acquire")
    async def acquire(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        shared: bool = False,
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
            key,
            ttl=ttl,
            limit=limit,
            shared=shared,
            wait=wait,
            label=label,
            token=token,
            request_id=request_id,
        )
        return (await self._engine.acquire(acquisition)).value

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
        return (await self._engine.send(call)).value

    @_tracing.traced_async("release")
    async def release(
        self, key: str, lease: LockLease, *, request_id: str | uuid.UUID | None = None
    ) -> None:
        """End `lease`; see `Locks.release`."""
        await self._engine.send(_requests.release(key, lease, request_id=request_id))

    @_tracing.traced_async("get")
    async def get(self, key: str, *, request_id: str | uuid.UUID | None = None) -> LockState:
        """Report `key`'s state without acquiring it; see `Locks.get`."""
        return (await self._engine.send(_requests.get(key, request_id=request_id))).value

    @_tracing.traced_async("force_release")
    async def force_release(
        self, key: str, *, request_id: str | uuid.UUID | None = None
    ) -> ForceReleaseResult:
        """Remove `key`'s live lease, whoever holds it; see `Locks.force_release`."""
        call = _requests.force_release(key, request_id=request_id)
        return (await self._engine.send(call)).value

    @_tracing.traced_async("check")
    async def check(
        self, key: str, fencing_token: int, *, request_id: str | uuid.UUID | None = None
    ) -> bool:
        """Whether `fencing_token` names a live lease of `key` now; see `Locks.check`."""
        call = _requests.check(key, fencing_token, request_id=request_id)
        return (await self._engine.send(call)).value

    def watch(self, key: str, *, after_version: int | None = None) -> _watch.AsyncLockWatch:
        """Watch `key`: its state now, then one state per change; see `Locks.watch`.

        An async iterator (`async for state in client.locks.watch(key)`, or `anext()`), and an
        async context manager. `aclose()` (or leaving the `async with`) ends it at once,
        cancelling a poll under way; so does cancelling the task that reads it.
        """
        from . import _watch  # loaded with the first watch or listing

        return _watch.async_watch(self._engine, key, after_version)

    def list(self, prefix: str = "", *, page_size: int = 100) -> AsyncIterator[LockState]:
        """Every key that is held or waited for, in key order; see `Locks.list`.

        An async iterator: `async for state in client.locks.list("report-"):`.
        """
        checked, size = _validate.prefix(prefix), _validate.page_size(page_size)
        from . import _watch  # loaded with the first watch or listing

        return _watch.async_pages(
            self._engine.send,
            lambda after: _requests.list_page(checked, after=after, page_size=size),
            "",
        )

    def holders(self, key: str, *, page_size: int = 100) -> AsyncIterator[LockHolder]:
        """Every live lease of `key`, in fencing token order; see `Locks.holders`.

        An async iterator: `async for holder in client.locks.holders("build-slots"):`.
        """
        checked, size = (
            _validate.key(key),
            _validate.page_size(page_size, _validate.HOLDERS_PAGE_MAX),
        )
        from . import _watch  # loaded with the first watch or listing

        return _watch.async_pages(
            self._engine.send,
            lambda after: _requests.holders_page(checked, after=after, page_size=size),
            0,
        )

    def with_lock(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        shared: bool = False,
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
            shared=shared,
            wait=wait,
            label=label,
            token=token,
            request_id=request_id,
            at_risk_margin=at_risk_margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
        )
        from ._guard import AsyncLockGuard  # loaded with the first guard

        return AsyncLockGuard(self._engine, plan)
