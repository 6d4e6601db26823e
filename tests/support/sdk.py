"""One blocking interface over `volcano.Client` and `volcano.AsyncClient`, so that one test body
covers both clients (the `client_kind` fixture in tests/conftest.py runs a test with each).

The AsyncClient lives on an event loop of its own in a background thread, and everything touching
it runs there. httpx event hooks note in `sdk.log` when each request left the client and when its
answer arrived, by this process's monotonic clock, so a test can tell when the request behind a
lease was sent without reading the SDK's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, Literal, TypeVar

import attrs
import httpx
import pytest

import volcano
from tests.support.conformance import check_response
from tests.support.raw import operation

__all__ = [
    "PATIENCE",
    "SYNC_ONLY",
    "TLS",
    "Candidate",
    "Heard",
    "Kind",
    "LostSamples",
    "Sdk",
    "SdkTarget",
    "SendLog",
    "Sent",
    "Stream",
]

T = TypeVar("T")
Kind = Literal["sync", "async"]

PATIENCE = 10.0
"""Upper bound (seconds) on waiting for something that a working system does far sooner."""

SYNC_ONLY = pytest.mark.parametrize("client_kind", ["sync"])
"""Runs a test that takes `sdk` with the sync client alone: for what only it has, or what both
clients share by construction, where a second run would add time and no coverage."""

TLS = ssl.create_default_context()
"""One TLS context for every HTTP client of the tests: loading the CA bundle takes ~40 ms each
time (the servers are plain http, so it is never used)."""


# --------------------------------------------------------------------------------------------
# What the client sent and heard, by its own clock


@attrs.frozen
class Sent:
    """A request handed to the network (httpx's request hook runs just before it is written)."""

    operation: str
    request_id: str
    at: float


@attrs.frozen
class Heard:
    """An answer that reached the client."""

    operation: str
    request_id: str
    status: int
    replayed: bool
    at: float


class SendLog:
    """Every request a client sent and every answer it heard, with monotonic times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[Sent] = []
        self._heard: list[Heard] = []

    @property
    def sent(self) -> list[Sent]:
        with self._lock:
            return list(self._sent)

    @property
    def heard(self) -> list[Heard]:
        with self._lock:
            return list(self._heard)

    def on_request(self, request: httpx.Request) -> None:
        record = Sent(operation(request), request.headers["X-Request-Id"], time.monotonic())
        with self._lock:
            self._sent.append(record)

    def on_response(self, response: httpx.Response) -> None:
        request = response.request
        record = Heard(
            operation(request),
            request.headers["X-Request-Id"],
            response.status_code,
            response.headers.get("Idempotent-Replayed") == "true",
            time.monotonic(),
        )
        with self._lock:
            self._heard.append(record)

    async def aon_request(self, request: httpx.Request) -> None:
        self.on_request(request)

    async def aon_response(self, response: httpx.Response) -> None:
        self.on_response(response)

    def successes(self, name: str) -> list[Heard]:
        """The 200 answers to `name` requests, in the order heard."""
        return [h for h in self.heard if h.operation == name and h.status == 200]

    def lease_deadline(self, ttl: float) -> float:
        """When the latest lease the client heard of may have expired, by its monotonic clock.

        That lease came from the last 200 answer to an acquire or renew; the server made it no
        earlier than the *first* time a request with that request id was sent (a retry's
        replayed answer describes the lease the first attempt created), so it lives at least
        until that send plus `ttl`, and possibly no longer.
        """
        granting = [
            h for h in self.heard if h.operation in ("acquire", "renew") and h.status == 200
        ]
        assert granting, "no lease was ever granted"
        request_id = granting[-1].request_id
        return min(s.at for s in self.sent if s.request_id == request_id) + ttl


# --------------------------------------------------------------------------------------------
# guard.lost, sampled in a tight loop


@attrs.define
class LostSamples:
    """What a tight loop saw of `guard.lost`; each sample's time is read just before the read.

    A sample False taken at `at` means the read began at or after `at` and still said held, so
    `last_false` is a lower bound on the last instant the guard claimed the lease.
    """

    count: int = 0
    first_true: float | None = None
    last_false: float | None = None
    last_at: float | None = None
    flips_back: int = 0
    """Samples that said held after an earlier sample said lost."""

    def add(self, at: float, lost: bool) -> None:
        self.count += 1
        self.last_at = at
        if lost:
            if self.first_true is None:
                self.first_true = at
        else:
            self.last_false = at
            if self.first_true is not None:
                self.flips_back += 1


# --------------------------------------------------------------------------------------------
# Where a suite's clients send


def _no_transport(kind: Kind) -> None:
    return None


@attrs.frozen
class SdkTarget:
    """Where the clients of the `make_sdk` fixture (tests/conftest.py) send, and how.

    Each suite says it in a fixture `sdk_target`: the live server straight (the default), or
    through a recording wire, or a fault proxy.
    """

    arguments: Mapping[str, Any]
    """The clients' keyword arguments (keys, api_url, timeout); `make_sdk` overrides them."""
    transport: Callable[[Kind], httpx.BaseTransport | httpx.AsyncBaseTransport | None] = (
        _no_transport
    )
    """A fresh transport for a client of that kind (None: httpx's own)."""
    check: bool = False
    """Check every answer against openapi.yaml."""
    own: bool = False
    """No `http_client`: each client sends through the one it makes for itself."""


# --------------------------------------------------------------------------------------------
# One blocking interface over Client and AsyncClient


class _LoopThread:
    """An asyncio event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="sdk-async-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = PATIENCE) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def call(self, fn: Callable[[], T]) -> T:
        async def on_loop() -> T:
            return fn()

        return self.run(on_loop())

    def close(self) -> None:
        self.run(self.loop.shutdown_asyncgens())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(PATIENCE)
        self.loop.close()


class Sdk:
    """A `volcano.Client` or `volcano.AsyncClient` behind the same blocking calls.

    Args:
        kind: which client.
        arguments: the client's keyword arguments (keys, api_url, timeout...).
        transport: the httpx transport under the client, of the kind's flavour (sync or
            async); httpx's own by default.
        check: check every answer against openapi.yaml.
        own: no `http_client`: the client sends through the one it makes for itself (then
            `log` stays empty, and `transport` and `check` must not be given).
    """

    def __init__(
        self,
        kind: Kind,
        arguments: Mapping[str, Any],
        *,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        check: bool = False,
        own: bool = False,
    ) -> None:
        self.kind = kind
        self.log = SendLog()
        self._loop: _LoopThread | None = None
        self._http: Any = None
        if own:
            assert transport is None
            assert not check
            if kind == "sync":
                self.client: Any = volcano.Client(**arguments)
            else:
                self._loop = _LoopThread()
                self.client = self._loop.run(self._make_own(arguments))
        elif kind == "sync":
            assert transport is None or isinstance(transport, httpx.BaseTransport)
            hooks: dict[str, list[Callable[..., Any]]] = {
                "request": [self.log.on_request],
                "response": [self.log.on_response] + ([check_response] if check else []),
            }
            self._http = httpx.Client(transport=transport, event_hooks=hooks, verify=TLS)
            self.client = volcano.Client(**arguments, http_client=self._http)
        else:
            assert transport is None or isinstance(transport, httpx.AsyncBaseTransport)
            self._loop = _LoopThread()
            self.client = self._loop.run(self._make_async(arguments, transport, check))

    async def _make_own(self, arguments: Mapping[str, Any]) -> volcano.AsyncClient:
        return volcano.AsyncClient(**arguments)

    async def _make_async(
        self,
        arguments: Mapping[str, Any],
        transport: httpx.AsyncBaseTransport | None,
        check: bool,
    ) -> volcano.AsyncClient:
        hooks: dict[str, list[Callable[..., Any]]] = {
            "request": [self.log.aon_request],
            "response": [self.log.aon_response] + ([_acheck_response] if check else []),
        }
        self._http = httpx.AsyncClient(transport=transport, event_hooks=hooks, verify=TLS)
        return volcano.AsyncClient(**arguments, http_client=self._http)

    def __repr__(self) -> str:
        return f"<Sdk {self.kind}>"

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.client.locks, name)
        if self._loop is None:
            return method(*args, **kwargs)
        return self._loop.run(method(*args, **kwargs))

    def acquire(self, key: str, **kwargs: Any) -> volcano.LockLease:
        return self._call("acquire", key, **kwargs)  # type: ignore[no-any-return]

    def renew(self, key: str, lease: volcano.LockLease, **kwargs: Any) -> volcano.LockLease:
        return self._call("renew", key, lease, **kwargs)  # type: ignore[no-any-return]

    def release(self, key: str, lease: volcano.LockLease, **kwargs: Any) -> None:
        self._call("release", key, lease, **kwargs)

    def get(self, key: str, **kwargs: Any) -> volcano.LockState:
        return self._call("get", key, **kwargs)  # type: ignore[no-any-return]

    def force_release(self, key: str, **kwargs: Any) -> volcano.ForceReleaseResult:
        return self._call("force_release", key, **kwargs)  # type: ignore[no-any-return]

    def check(self, key: str, fencing_token: int, **kwargs: Any) -> bool:
        return self._call("check", key, fencing_token, **kwargs)  # type: ignore[no-any-return]

    def with_lock(self, key: str, **kwargs: Any) -> Any:
        """A guard, not yet entered (enter it with `enter`)."""
        return self.client.locks.with_lock(key, **kwargs)

    def watch(self, key: str, **kwargs: Any) -> Stream:
        """`client.locks.watch(key)`, its states read one at a time."""
        return Stream(self.client.locks.watch(key, **kwargs), self._loop)

    def listed(self, prefix: str = "", **kwargs: Any) -> list[volcano.LockState]:
        """Every state `client.locks.list(prefix)` iterates over."""
        states = self.client.locks.list(prefix, **kwargs)
        if self._loop is None:
            return list(states)

        async def collect() -> list[volcano.LockState]:
            return [state async for state in states]

        return self._loop.run(collect())

    def groups(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """`client.groups.<name>(...)`, awaited for the async client."""
        found = getattr(self.client.groups, name)(*args, **kwargs)
        return found if self._loop is None else self._loop.run(found)

    def members(self, group: str, **kwargs: Any) -> list[volcano.GroupMember]:
        """Every member `client.groups.members(group)` iterates over."""
        return self._collected(self.client.groups.members(group, **kwargs))

    def listed_groups(self, prefix: str = "", **kwargs: Any) -> list[volcano.GroupState]:
        """Every group `client.groups.list(prefix)` iterates over."""
        return self._collected(self.client.groups.list(prefix, **kwargs))

    def membership(
        self, group: str, member: str, **kwargs: Any
    ) -> contextlib.AbstractContextManager[Any]:
        """`with client.groups.membership(group, member, ...) as held:` for either client."""
        return self.entered(self.client.groups.membership(group, member, **kwargs))

    def watch_group(self, group: str, **kwargs: Any) -> Stream:
        """`client.groups.watch(group)`, its states read one at a time."""
        return Stream(self.client.groups.watch(group, **kwargs), self._loop)

    def holders(self, key: str, **kwargs: Any) -> list[volcano.LockHolder]:
        """Every holder `client.locks.holders(key)` iterates over."""
        return self._collected(self.client.locks.holders(key, **kwargs))

    def _collected(self, items: Any) -> list[Any]:
        if self._loop is None:
            return list(items)

        async def collect() -> list[Any]:
            return [item async for item in items]

        return self._loop.run(collect())

    def campaign(self, name: str, **kwargs: Any) -> contextlib.AbstractContextManager[Any]:
        """`with client.elections.campaign(name, ...) as leadership:` for either client."""
        return self.entered(self.client.elections.campaign(name, **kwargs))

    def leader(self, name: str) -> Any:
        """`client.elections.leader(name)`."""
        found = self.client.elections.leader(name)
        return found if self._loop is None else self._loop.run(found)

    def observe(self, name: str) -> Stream:
        """`client.elections.observe(name)`, its leaders read one at a time."""
        return Stream(self.client.elections.observe(name), self._loop)

    def update(self, held: Any, capabilities: Any) -> None:
        """`held.update(capabilities)` of a membership guard, awaited for the async client."""
        result = held.update(capabilities)
        if self._loop is not None:
            self._loop.run(result)

    def proclaim(self, leadership: Any, label: str | None) -> None:
        """`leadership.proclaim(label)`, awaited for the async client."""
        result = leadership.proclaim(label)
        if self._loop is not None:
            self._loop.run(result)

    @contextlib.contextmanager
    def entered(self, guard: Any) -> Iterator[Any]:
        """`with guard as x:` or `async with guard as x:`, whichever the client's objects (a
        guard, the client itself) take; an exception from the block reaches the exit as it
        would in a with statement."""
        value = self.enter(guard)
        try:
            yield value
        except BaseException as exc:
            if self._loop is None:
                swallowed = guard.__exit__(type(exc), exc, exc.__traceback__)
            else:
                swallowed = self._loop.run(guard.__aexit__(type(exc), exc, exc.__traceback__))
            if not swallowed:
                raise
        else:
            self.exit(guard)

    def lock(self, key: str, **kwargs: Any) -> contextlib.AbstractContextManager[Any]:
        """`with client.locks.with_lock(key, ...) as guard:` for either client."""
        return self.entered(self.with_lock(key, **kwargs))

    def enter(self, guard: Any) -> Any:
        if self._loop is None:
            return guard.__enter__()
        return self._loop.run(guard.__aenter__())

    def exit(self, guard: Any) -> None:
        if self._loop is None:
            guard.__exit__(None, None, None)
        else:
            self._loop.run(guard.__aexit__(None, None, None))

    def wait_lost(self, guard: Any, timeout: float) -> bool:
        if self._loop is None:
            return bool(guard.wait_lost(timeout))
        return bool(self._loop.run(guard.wait_lost(timeout), timeout + PATIENCE))

    def read(self, fn: Callable[[], T]) -> T:
        """Run `fn` where the client lives (an async guard's state belongs to its loop)."""
        return fn() if self._loop is None else self._loop.call(fn)

    @contextlib.contextmanager
    def sampling(self, guard: Any) -> Iterator[LostSamples]:
        """Sample `guard.lost` in a tight loop for the duration of the block.

        The sync guard is read from a thread of its own; the async guard from a task on its
        loop, yielding to the renewal task between samples.
        """
        samples = LostSamples()
        stop = threading.Event()
        if self._loop is None:

            def sample() -> None:
                while not stop.is_set():
                    at = time.monotonic()
                    samples.add(at, guard.lost)
                    time.sleep(0)  # let the renewer, proxy and server threads have the GIL

            thread = threading.Thread(target=sample, name="faults-sampler")
            thread.start()
            try:
                yield samples
            finally:
                stop.set()
                thread.join(PATIENCE)
            return

        async def asample() -> None:
            while not stop.is_set():
                at = time.monotonic()
                samples.add(at, guard.lost)
                await asyncio.sleep(0)

        future = asyncio.run_coroutine_threadsafe(asample(), self._loop.loop)
        try:
            yield samples
        finally:
            stop.set()
            future.result(PATIENCE)

    def close_client(self) -> None:
        """`client.close()` (the test's own resources stay open until close())."""
        if self._loop is None:
            self.client.close()
        else:
            self._loop.run(self.client.close())

    def close(self) -> None:
        if self._loop is None:
            self.client.close()
            if self._http is not None:
                self._http.close()
            return
        self._loop.run(self._aclose())
        self._loop.close()

    async def _aclose(self) -> None:
        await self.client.close()
        if self._http is not None:
            await self._http.aclose()


class Stream:
    """An SDK iterator (a watch, an observer) read one item at a time, whichever the client.

    Each `next` waits at most `timeout` seconds, so a change that never comes fails the test
    instead of hanging it; the sync iterator is read in a daemon thread of its own for that.
    """

    def __init__(self, iterator: Any, loop: _LoopThread | None) -> None:
        self.iterator = iterator
        self._loop = loop

    def next(self, timeout: float = PATIENCE) -> Any:
        """The next item (StopIteration/StopAsyncIteration when the iterator ended)."""
        if self._loop is not None:
            return self._loop.run(self.iterator.__anext__(), timeout)
        outcome: dict[str, Any] = {}

        def read() -> None:
            try:
                outcome["item"] = next(self.iterator)
            except BaseException as exc:  # handed to the test thread
                outcome["error"] = exc

        reader = threading.Thread(target=read, name="stream-reader", daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            raise TimeoutError(f"no item within {timeout}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["item"]

    def close(self) -> None:
        """`close()` or `aclose()`."""
        if self._loop is not None:
            self._loop.run(self.iterator.aclose())
        else:
            self.iterator.close()


class Candidate:
    """A client campaigning for `name` in a thread of its own until it resigns."""

    def __init__(self, sdk: Sdk, name: str, label: str, *, ttl: float = 10) -> None:
        self.sdk = sdk
        self.label = label
        self.leadership: Any = None
        self.elected_at: float | None = None  # monotonic, when the campaign returned
        self.elected = threading.Event()
        self.resign = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(name, ttl), name=f"candidate-{label}", daemon=True
        )
        self._thread.start()

    def _run(self, name: str, ttl: float) -> None:
        try:
            with self.sdk.campaign(name, label=self.label, ttl=ttl) as leadership:
                self.elected_at = time.monotonic()
                self.leadership = leadership
                self.elected.set()
                self.resign.wait(30)
        except BaseException as exc:  # handed to the test's thread
            self.error = exc
            self.elected.set()

    def lead(self) -> Any:
        """The leadership, once elected."""
        assert self.elected.wait(20), f"{self.label} was never elected"
        assert self.error is None, self.error
        return self.leadership

    def step_down(self) -> None:
        """Leave the campaign's block (resign), and wait until it has."""
        self.resign.set()
        self._thread.join(20)
        assert not self._thread.is_alive()


async def _acheck_response(response: httpx.Response) -> None:
    await response.aread()
    check_response(response)
