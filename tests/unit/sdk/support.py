"""Helpers for the SDK's unit tests: a scripted Volcano API behind httpx.MockTransport, and a
fake clock that lets tests move time (and step the renewal thread) without sleeping."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

ANON_KEY = "anon-3b1f0c8e1e6a4d6b9a7f"
SERVICE_KEY = "service-9d2e7c4a0b5f4e1c8d3a"
API_URL = "https://volcano.test"
# Upper case on purpose: the SDK must keep caller-supplied spelling byte for byte.
TOKEN = "0F8FAD5B-D9CB-469F-A165-70867728950E"
REQUEST_ID = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
SERVER_REQUEST_ID = "11111111-2222-4333-8444-555555555555"
EXPIRES = datetime(2026, 11, 29, 21, 15, 30, 250000, tzinfo=UTC)

BATCH_PATH = "/v1/leases/renew"

Responder = Callable[[httpx.Request], Any]


class FakeApi:
    """A scripted Volcano API: answers queued responders first, then a well-behaved default.

    The default answers every operation as a correct server would for a single holder (it
    echoes the key, owner token and ttl, keeps fencing token 7, and moves expiry forward on
    each renew, one lease of a batch renewal at a time); tests queue failures in front of it
    with `then()`. `of` and `times_of` count a batch renewal as the renew of each lease it
    carries (`requests` holds what went over the wire).
    """

    anon_key = ANON_KEY
    service_key = SERVICE_KEY
    fencing_token = 7

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []
        self.clock: FakeClock | None = None
        self._script: collections.deque[Responder] = collections.deque()
        self._renewals = 0

    def __call__(self, request: httpx.Request) -> Any:
        self.requests.append(request)
        self.times.append(self.clock.now if self.clock else 0.0)
        responder = self._script.popleft() if self._script else self.default
        return responder(request)

    def then(self, *responders: Responder) -> FakeApi:
        """Answer the next requests with these responders, in order."""
        self._script.extend(responders)
        return self

    def of(self, operation: str) -> list[httpx.Request]:
        """The recorded requests of one operation (acquire, renew, release, get, force).

        A batch renewal is a renew request of each of its leases, on its key's path.
        """
        return [
            lease
            for r in self.requests
            for lease in per_lease(r)
            if operation_of(lease) == operation
        ]

    def times_of(self, operation: str) -> list[float]:
        """When (by the fake clock) each request of one operation arrived."""
        return [
            t
            for t, r in zip(self.times, self.requests, strict=True)
            for lease in per_lease(r)
            if operation_of(lease) == operation
        ]

    # -- the well-behaved default -------------------------------------------------------

    def default(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == BATCH_PATH:
            results = [
                {"key": lease.url.path.split("/")[3], "lease": self.default(lease).json()}
                for lease in per_lease(request)
            ]
            return httpx.Response(200, json={"results": results}, headers=echo(request))
        operation = operation_of(request)
        key = key_of(request)
        body = json.loads(request.content) if request.content else {}
        if operation == "acquire":
            return self.lease_response(request, key, body["owner_token"], body["ttl_seconds"])
        if operation == "renew":
            self._renewals += 1
            expires = EXPIRES + timedelta(seconds=self._renewals)
            return self.lease_response(
                request, key, body["owner_token"], body["ttl_seconds"], expires=expires
            )
        if operation == "release":
            return httpx.Response(204, headers=echo(request))
        if operation == "check":
            fence = int(request.url.path.rsplit("/", 1)[-1])
            live = fence == self.fencing_token
            check = {
                "key": key,
                "fencing_token": fence,
                "live": live,
                "expires_at": "2026-11-29T21:15:30.250000Z" if live else None,
            }
            return httpx.Response(200, json=check, headers=echo(request))
        if operation == "get":
            expires = "2026-11-29T21:15:30.250000Z"
            holder = {
                "fencing_token": self.fencing_token,
                "expires_at": expires,
                "label": None,
                "mode": "exclusive",
            }
            state = {
                "key": key,
                "held": True,
                "expires_at": expires,
                "fencing_token": self.fencing_token,
                "limit": 1,
                "holders": [holder],
                "waiters": 0,
                "version": 2 * self.fencing_token - 1,
            }
            return httpx.Response(200, json=state, headers=echo(request))
        result = {
            "key": key,
            "released": True,
            "fencing_token": self.fencing_token,
            "released_count": 1,
        }
        return httpx.Response(200, json=result, headers=echo(request))

    def lease_response(
        self,
        request: httpx.Request,
        key: str,
        owner_token: str,
        ttl: float,
        *,
        expires: datetime = EXPIRES,
    ) -> httpx.Response:
        lease = {
            "key": key,
            "owner_token": owner_token,
            "fencing_token": self.fencing_token,
            "expires_at": expires.isoformat().replace("+00:00", "Z"),
            "ttl_seconds": ttl,
        }
        return httpx.Response(200, json=lease, headers=echo(request))


def per_lease(request: httpx.Request) -> list[httpx.Request]:
    """`request`, or for a batch renewal the renew request of each of its leases (the batch's
    headers and timeouts, each lease's key in the path and the rest in the body)."""
    if request.url.path != BATCH_PATH:
        return [request]
    return [
        httpx.Request(
            "POST",
            request.url.copy_with(path=f"/v1/locks/{entry.pop('key')}/renew"),
            json=entry,
            headers=request.headers,
            extensions=request.extensions,
        )
        for entry in json.loads(request.content)["leases"]
    ]


def operation_of(request: httpx.Request) -> str:
    path = request.url.path
    if request.method == "DELETE":
        return "force"
    if request.method == "GET":
        return "check" if "/leases/" in path else "get"
    return path.rsplit("/", 1)[-1]


def key_of(request: httpx.Request) -> str:
    parts = request.url.path.split("/")  # [..., 'v1', 'locks', key, operation?]
    return parts[parts.index("locks") + 1]


def echo(request: httpx.Request) -> dict[str, str]:
    return {"X-Request-Id": request.headers.get("X-Request-Id", SERVER_REQUEST_ID)}


def error(
    status: int,
    code: str | None = None,
    *,
    message: str = "explained",
    request_id: str = SERVER_REQUEST_ID,
    retry_after: str | None = None,
    **extra: object,
) -> Responder:
    """A responder answering with a Volcano error body (or, with code None, `{}`); `extra`
    fields join the error object (`limit=4` for a limit_mismatch)."""

    def respond(request: httpx.Request) -> httpx.Response:
        headers = {"X-Request-Id": request_id}
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        body: dict[str, Any] = {}
        if code is not None:
            detail = {"code": code, "message": message, "request_id": request_id, **extra}
            body = {"error": detail}
        return httpx.Response(status, json=body, headers=headers)

    return respond


def raw(status: int, content: bytes, headers: dict[str, str] | None = None) -> Responder:
    """A responder answering with exactly these bytes (a proxy's page, say)."""
    return lambda request: httpx.Response(status, content=content, headers=headers or {})


def body(status: int, payload: Any) -> Responder:
    """A responder answering with this JSON payload."""
    return lambda request: httpx.Response(status, json=payload)


def fail(exc: Exception) -> Responder:
    """A responder raising `exc` as the transport would."""

    def respond(request: httpx.Request) -> httpx.Response:
        raise exc

    return respond


class FakeClock:
    """A clock that moves only when told; it also steps the clients' renewal loops.

    Both loops wait through the clock, until woken by their client (an answer came back) or by
    the test: a Client's thread in `wait()`, an AsyncClient's task in `async_wait()`, neither for
    a real time. `advance()` (`async_advance()` for an AsyncClient, from its event loop) moves
    the time, wakes the loop, and returns once every loop that `follow()` was given is asleep
    again with no renewal under way, so a test knows exactly which renewals ran. `sleep()` and
    `async_sleep()` (a retry's pause, a watch's backoff) move the time by what they were asked.
    """

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.waits = 0
        self._condition: threading.Condition | None = None
        self._event: asyncio.Event | None = None
        self._renewer_waiting = threading.Event()
        self._settled: list[Callable[[], bool]] = []

    def follow(self, settled: Callable[[], bool]) -> None:
        """Count a renewal loop as caught up only when `settled()` says so."""
        self._settled.append(settled)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def wait(self, condition: threading.Condition, timeout: float | None) -> None:
        self._condition = condition
        self.waits += 1
        self._renewer_waiting.set()
        condition.notify_all()
        condition.wait()

    async def async_wait(self, event: asyncio.Event, seconds: float | None) -> None:
        self._event = event
        self.waits += 1
        await event.wait()

    def settled(self) -> bool:
        return all(settled() for settled in self._settled)

    def advance(self, seconds: float) -> None:
        """Move time on, and return once the renewal thread has caught up with it."""
        condition = self._renewer_condition()
        with condition:
            self.now += seconds
            seen = self.waits
            condition.notify_all()
            for _ in range(400):  # a guard against hanging, not a timing assertion
                if self.waits != seen and self.settled():
                    return
                condition.wait(0.05)
        raise AssertionError("the renewal thread did not go back to waiting")

    async def async_advance(self, seconds: float) -> None:
        """Move time on, and return once the renewal task has caught up with it."""
        await self._async_settle()
        self.now += seconds
        seen = self.waits
        if self._event is not None:
            self._event.set()
        await self._async_settle(seen)

    async def async_nudge(self, seconds: float) -> None:
        """Move time on and wake the renewal task, without waiting for it to settle."""
        await self._async_settle()
        self.now += seconds
        if self._event is not None:
            self._event.set()
        await asyncio.sleep(0)

    async def _async_settle(self, seen: int | None = None) -> None:
        """Yield until every loop followed is settled (and, after `seen` waits, has waited
        again: a task that was woken has stepped); a task that ended never waits again."""
        for turn in range(1000):  # a guard against hanging, not a timing assertion
            if self.settled() and (seen is None or self.waits != seen or turn > 20):
                return
            await asyncio.sleep(0)
        raise AssertionError("the renewal task did not go back to waiting")

    def nudge(self, seconds: float) -> None:
        """Move time on and wake the renewal thread, without waiting for it."""
        condition = self._renewer_condition()
        with condition:
            self.now += seconds
            condition.notify_all()

    def _renewer_condition(self) -> threading.Condition:
        assert self._renewer_waiting.wait(20), "the renewal thread never started waiting"
        assert self._condition is not None
        return self._condition


class Gate:
    """A responder that holds a request until opened, then answers it with the default.

    For a Client: it blocks the renewal thread that sends, not the test.
    """

    def __init__(self, fake_api: FakeApi) -> None:
        self.fake_api = fake_api
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.done = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        assert self.opened.wait(20), "the gate was never opened"
        response = self.fake_api.default(request)
        self.done.set()
        return response

    async def arrival(self) -> None:
        assert self.entered.wait(20), "no request reached the gate"

    def open(self) -> None:
        self.opened.set()


class AsyncGate:
    """The asyncio twin of `Gate`, for an AsyncClient: it suspends only the request's task."""

    def __init__(self, fake_api: FakeApi) -> None:
        self.fake_api = fake_api
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.entered.set()
        await self.opened.wait()
        return self.fake_api.default(request)

    async def arrival(self) -> None:
        await self.entered.wait()

    def open(self) -> None:
        self.opened.set()


class Guards:
    """with_lock guards of a Client or an AsyncClient behind one awaitable interface, with the
    FakeClock that steps their renewals: one test body covers both (the `guards` fixture).

    A test is a coroutine either way; the Client's calls block (its renewal thread does not need
    the test's event loop), the AsyncClient's are awaited on it.
    """

    def __init__(self, client: Any, clock: FakeClock, fake_api: FakeApi) -> None:
        self.client = client
        self.clock = clock
        self.fake_api = fake_api
        self.asynchronous = not hasattr(client, "__enter__")

    def __repr__(self) -> str:
        return f"<Guards {'async' if self.asynchronous else 'sync'}>"

    def with_lock(self, key: str = "k", **kwargs: Any) -> Any:
        """`client.locks.with_lock(key, ...)`: the guard, not entered."""
        return self.client.locks.with_lock(key, **kwargs)

    async def enter(self, guard: Any) -> Any:
        return (await guard.__aenter__()) if self.asynchronous else guard.__enter__()

    async def exit(self, guard: Any, exc: BaseException | None = None) -> None:
        args = (None, None, None) if exc is None else (type(exc), exc, exc.__traceback__)
        if self.asynchronous:
            await guard.__aexit__(*args)
        else:
            guard.__exit__(*args)

    @contextlib.asynccontextmanager
    async def entered(self, guard: Any) -> AsyncIterator[Any]:
        """`with guard` / `async with guard`: an exception from the block reaches its exit."""
        await self.enter(guard)
        try:
            yield guard
        except BaseException as exc:
            await self.exit(guard, exc)
            raise
        await self.exit(guard)

    def lock(self, key: str = "k", **kwargs: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """`with client.locks.with_lock(key, ...) as guard:` for either client."""
        return self.entered(self.with_lock(key, **kwargs))

    async def advance(self, seconds: float) -> None:
        """Move the clock on; return once the renewal loop has done everything due by then."""
        if self.asynchronous:
            await self.clock.async_advance(seconds)
        else:
            self.clock.advance(seconds)

    async def nudge(self, seconds: float) -> None:
        """Move the clock on and wake the renewal loop, without waiting for what it sends."""
        if self.asynchronous:
            await self.clock.async_nudge(seconds)
        else:
            self.clock.nudge(seconds)

    def gate(self) -> Gate | AsyncGate:
        """A responder that holds a request until opened (`then()` it)."""
        return AsyncGate(self.fake_api) if self.asynchronous else Gate(self.fake_api)

    async def wait_lost(self, guard: Any, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        result = guard.wait_lost(timeout)
        return bool(await result) if self.asynchronous else bool(result)

    def waiting(self, guard: Any) -> Callable[[], Awaitable[bool]]:
        """Start `guard.wait_lost()` in a thread (a task), and give what awaits its result."""
        if self.asynchronous:
            task = asyncio.get_running_loop().create_task(guard.wait_lost())

            async def awaited() -> bool:
                return bool(await task)

            return awaited
        results: list[bool] = []
        waiter = threading.Thread(target=lambda: results.append(guard.wait_lost()))
        waiter.start()

        async def joined() -> bool:
            waiter.join(20)
            (result,) = results
            return result

        return joined

    async def close(self) -> None:
        """`client.close()`, awaited for an AsyncClient."""
        if self.asynchronous:
            await self.client.close()
        else:
            self.client.close()
