"""Watching a key: long polls chained from the last version seen, and listing keys page by page.

A watch is an iterator of `LockState`s: the key's state now, then one state per change (a
grant, a release, an expiry, a force release, a label changed). Each request is a long poll
(`GET /v1/locks/{key}?after_version=V&wait_seconds=W`) that the server answers as soon as the
key's version differs from V, so no change is waited for longer than it takes to hear it.
Changes faster than the polls are folded into the latest state: a watch may skip states in
between, never the latest one. A transport failure, a timeout or an overloaded server (429,
5xx) is retried after a bounded backoff, from the same version, so nothing is lost across
it; other errors end the watch.

`WatchCursor` holds every decision (what to ask next, what an answer means, how long to back
off); `LockWatch` and `AsyncLockWatch` are the thin shells that send and wait. Listing
(`pages`, `async_pages`) follows `next` from page to page. A group is watched by version in the
same way (`_group_watch`): the decisions (`VersionCursor`) and the shells (`Watch`,
`AsyncWatch`) are generic in what is watched, and only the requests differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

from . import _requests, _validate
from ._exceptions import APIConnectionError, APIStatusError, Error

if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
    from types import TracebackType

    from ._async_engine import AsyncEngine
    from ._clock import Clock
    from ._engine import Engine
    from ._models import LockState
    from ._seam import Call, Page, Success

    SyncSend = Callable[..., Success["S"]]
    AsyncSend = Callable[..., Awaitable[Success["S"]]]

Item = TypeVar("Item")  # an item of a listing
Cursor = TypeVar("Cursor")  # the cursor a listing's pages go on from

__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "POLL_SECONDS",
    "AsyncLockWatch",
    "AsyncWatch",
    "LockWatch",
    "VersionCursor",
    "Watch",
    "WatchCursor",
    "async_pages",
    "async_watch",
    "backoff",
    "pages",
    "retryable",
    "watch",
]

POLL_SECONDS = 50.0
"""How long one poll waits for a change (below common proxies' 60 s idle timeouts)."""
BACKOFF_FIRST = 0.2
"""Seconds before the first new poll after a failure (doubling after each failure in a row)."""
BACKOFF_CAP = 5.0
"""The longest wait between polls after failures (a server's Retry-After may ask longer)."""
RETRY_AFTER_CAP = 30.0
"""The longest a server's Retry-After makes a watch wait."""


def retryable(error: Error) -> bool:
    """Whether a poll that failed with `error` is tried again: transport or server trouble."""
    if isinstance(error, APIConnectionError):
        return True
    if isinstance(error, APIStatusError):
        return error.status_code >= 500 or error.status_code in (408, 429)
    return False


def backoff(failures: int, error: Error) -> float:
    """Seconds to wait after `failures` retryable failures in a row, the last one `error`.

    Doubling from BACKOFF_FIRST up to BACKOFF_CAP, or longer when the server asks (up to
    RETRY_AFTER_CAP).
    """
    delay = min(BACKOFF_FIRST * 2.0 ** (failures - 1), BACKOFF_CAP)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), RETRY_AFTER_CAP))
    return delay


class Versioned(Protocol):
    """What a watch reports: a state with a version that never goes back."""

    @property
    def version(self) -> int:
        """The state's version."""
        ...


S = TypeVar("S", bound=Versioned)


class VersionCursor(Generic[S]):
    """Where a watch of one thing stands: the last version seen, and failures in a row.

    Subclasses say how to read the thing now (`read`) and how to poll for a change (`poll`).

    Args:
        key: The name of what is watched (already checked).
        after_version: Start after this version (None: with its state now).
    """

    def __init__(self, key: str, after_version: int | None) -> None:
        self.key = key
        self.version = after_version
        self.failures = 0

    def next_call(self) -> tuple[Call[S], float]:
        """The next request and how long it may wait for a change (0: none, answer now)."""
        if self.version is None:
            return self.read(), 0.0
        return self.poll(self.version, POLL_SECONDS), POLL_SECONDS

    def read(self) -> Call[S]:
        """The request for the state now."""
        raise NotImplementedError

    def poll(self, after_version: int, wait: float) -> Call[S]:
        """The long poll answered once the version differs from `after_version`."""
        raise NotImplementedError

    def answered(self, state: S) -> S | None:
        """A poll's state: the state to report, or None when the version has not moved."""
        self.failures = 0
        if state.version == self.version:
            return None
        self.version = state.version
        return state

    def failed(self, error: Error) -> float:
        """A poll failed: seconds to wait before the next one; raises `error` if it is final."""
        if not retryable(error):
            raise error
        self.failures += 1
        return backoff(self.failures, error)


class WatchCursor(VersionCursor["LockState"]):
    """Where a watch of one key stands (see `VersionCursor`)."""

    def read(self) -> Call[LockState]:
        """A get of the key."""
        return _requests.get(self.key, request_id=None)

    def poll(self, after_version: int, wait: float) -> Call[LockState]:
        """A long poll of the key."""
        return _requests.watch(self.key, after_version=after_version, wait=wait)


class Watch(Generic[S]):
    """States one per change, from a cursor: an iterator, and a context manager closing it.

    Each `next()` blocks until the thing changes (or returns its state now, the first time).
    `close()` ends it: the next `next()` raises StopIteration; a poll under way in another
    thread first ends with its answer (at most a poll's length, 50 s). Leaving a `for` loop
    over it early sends nothing more.
    """

    def __init__(
        self, cursor: VersionCursor[S], *, send: SyncSend[S], clock: Clock, timeout: float
    ) -> None:
        self._cursor = cursor
        self._send = send
        self._clock = clock
        self._timeout = timeout
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"after version {self._cursor.version}"
        return f"<{type(self).__name__} {self._cursor.key!r} {state}>"

    @property
    def version(self) -> int | None:
        """The version of the last state reported (None before the first)."""
        return self._cursor.version

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> S:
        while not self._closed:
            call, wait = self._cursor.next_call()
            try:
                answer = self._send(call, request_timeout=self._timeout + wait)
            except Error as error:
                self._clock.sleep(self._cursor.failed(error))
                continue
            state = self._cursor.answered(answer.value)
            if state is not None:
                return state
        raise StopIteration

    def close(self) -> None:
        """Stop watching; calling it again does nothing."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class LockWatch(Watch["LockState"]):
    """The states of one key, one per change: an iterator, and a context manager closing it.

    Made by `Client.locks.watch`. Each `next()` blocks until the key changes (or returns its
    state now, the first time). `close()` ends it: the next `next()` raises StopIteration; a
    poll under way in another thread first ends with its answer (at most a poll's length,
    50 s). Leaving a `for` loop over it early sends nothing more.
    """


class AsyncWatch(Generic[S]):
    """The asyncio twin of `Watch`: an async iterator, and an async context manager.

    `aclose()` ends it at once, from any task: a poll under way is cancelled (its connection
    closed) and the iteration ends. Cancelling the task that iterates cancels the poll too.
    """

    def __init__(
        self, cursor: VersionCursor[S], *, send: AsyncSend[S], clock: Clock, timeout: float
    ) -> None:
        self._cursor = cursor
        self._send = send
        self._clock = clock
        self._timeout = timeout
        self._closed = False
        self._poll: asyncio.Future[Success[S]] | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"after version {self._cursor.version}"
        return f"<{type(self).__name__} {self._cursor.key!r} {state}>"

    @property
    def version(self) -> int | None:
        """The version of the last state reported (None before the first)."""
        return self._cursor.version

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> S:
        while not self._closed:
            call, wait = self._cursor.next_call()
            try:
                answer = await self._polled(call, wait)
            except Error as error:
                await self._clock.async_sleep(self._cursor.failed(error))
                continue
            if answer is None:
                break  # closed while the poll was under way
            state = self._cursor.answered(answer.value)
            if state is not None:
                return state
        raise StopAsyncIteration

    async def _polled(self, call: Call[S], wait: float) -> Success[S] | None:
        """The poll's answer, or None when `aclose()` cancelled it."""
        import asyncio  # here, not at the top: sync-only users never import asyncio

        poll = asyncio.ensure_future(self._send(call, request_timeout=self._timeout + wait))
        self._poll = poll
        try:
            return await poll
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and (task is None or task.cancelling() == 0):
                return None
            poll.cancel()
            raise
        finally:
            self._poll = None

    async def aclose(self) -> None:
        """Stop watching, cancelling a poll under way; calling it again does nothing."""
        self._closed = True
        if self._poll is not None:
            self._poll.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncLockWatch(AsyncWatch["LockState"]):
    """The asyncio twin of `LockWatch`: an async iterator, and an async context manager.

    `aclose()` ends it at once, from any task: a poll under way is cancelled (its connection
    closed) and the iteration ends. Cancelling the task that iterates cancels the poll too.
    """


def watch(engine: Engine, key: object, after_version: object) -> LockWatch:
    """A watch of `key` sent through `engine` (arguments checked here)."""
    cursor = WatchCursor(_validate.key(key), _validate.version(after_version))
    return LockWatch(cursor, send=engine.send, clock=engine.clock, timeout=engine.timeout)


def async_watch(engine: AsyncEngine, key: object, after_version: object) -> AsyncLockWatch:
    """The asyncio twin of `watch`."""
    cursor = WatchCursor(_validate.key(key), _validate.version(after_version))
    return AsyncLockWatch(cursor, send=engine.send, clock=engine.clock, timeout=engine.timeout)


def pages(
    send: Callable[[Call[Page[Item, Cursor]]], Success[Page[Item, Cursor]]],
    page_after: Callable[[Cursor], Call[Page[Item, Cursor]]],
    first: Cursor,
) -> Iterator[Item]:
    """Every item of a listing, page after page, until a page says there is no next.

    `page_after(after)` is the request for the page after `after` (`first`: the first page).
    """
    after = first
    while True:
        page = send(page_after(after)).value
        yield from page.items
        if page.next_after is None:
            return
        after = page.next_after


async def async_pages(
    send: Callable[[Call[Page[Item, Cursor]]], Awaitable[Success[Page[Item, Cursor]]]],
    page_after: Callable[[Cursor], Call[Page[Item, Cursor]]],
    first: Cursor,
) -> AsyncIterator[Item]:
    """The asyncio twin of `pages`."""
    after = first
    while True:
        page = (await send(page_after(after))).value
        for item in page.items:
            yield item
        if page.next_after is None:
            return
        after = page.next_after
