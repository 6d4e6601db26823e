"""The explorer's world: real servers on a virtual loop, clients, and the storage work they wait on.

Each server is the real application (`create_app`: routing, credentials, validation,
fingerprints, the lock service, its waiting room, the storage) on one `VirtualLoop`, driven
through ASGI as uvicorn drives it. Nothing runs by itself: every piece of storage work any server
wants done (a request's transaction, an expiry timer's hand-off, a heartbeat) waits in `pending`
until the schedule runs it, fails it, or loses its answer after it committed; time moves only when
the schedule moves it; a client's connection closes only when the schedule closes it. On
PostgreSQL the work runs in threads on real connections, and a transaction also stops at each
read of the database clock (`_postgres.ClockGates`) until the schedule lets it go on, so the
schedule can slip anything between a clock read and the statements after it.

What the clients were told is the history that `_checks` judges after every step.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import json
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import attrs

from tests.explorer._loop import VirtualLoop
from volcano_server import ServerConfig, create_app
from volcano_server._config import WaitingSettings
from volcano_server.http._auth import make_project_keys
from volcano_server.http._spec import Spec, load_spec
from volcano_server.locks._admission import Job
from volcano_server.storage import Storage, StorageUnavailable, WouldBlock

__all__ = ["EPOCH_US", "RUNNING_PER_SERVER", "Pending", "Request", "SimServer", "World"]

RUNNING_PER_SERVER = 8
"""PostgreSQL: transactions of one server started and not done (its pool holds more)."""

EPOCH_US = 1_800_000_000_000_000
"""Virtual time 0 on the storage clock (microseconds since the Unix epoch)."""

# The service operations a piece of storage work calls, to name it in a schedule.
_OPERATIONS = (
    "authenticate",
    "acquire",
    "renew",
    "renew_many",
    "release",
    "force_release",
    "get",
    "settle",
    "give_up",
    "leave",
    "undeliver",
    "beat",
    "read_key",
    "watch_key",
    "unwatch",
)


@functools.cache
def _spec() -> Spec:
    return load_spec()


def _name_of(work: Callable[[bool], Any]) -> str:
    code = getattr(work, "__code__", None)
    names = code.co_names if code is not None else ()
    called = [name for name in names if name in _OPERATIONS]
    return called[-1] if called else getattr(work, "__qualname__", repr(work))


@attrs.define(eq=False)
class Pending:
    """Storage work a server waits on, until the schedule decides its fate."""

    id: int
    server: str
    label: str
    work: Callable[[bool], Any]
    future: asyncio.Future[Any]
    thread: threading.Thread | None = None  # PostgreSQL: the thread running it
    outcome: tuple[str, Any] | None = None  # set by the thread: ("ok", result) / ("error", exc)
    lose_answer: bool = False
    request: Request | None = None  # the request it is for, if any

    def __repr__(self) -> str:
        return f"<tx{self.id} {self.server}:{self.label}>"


@attrs.define(eq=False)
class Request:
    """One HTTP request a client sent, and what it heard."""

    id: int
    client: str
    server: str
    op: str
    key: str
    body: dict[str, Any] | None
    request_id: str | None
    sent_us: int  # storage clock when it was sent
    first_sent_us: int  # when a request with this request id was first sent
    closed: asyncio.Future[None]
    task: asyncio.Task[None] | None = None
    status: int | None = None
    payload: Any = None
    replayed: bool = False
    answered_us: int | None = None
    gone: bool = False  # the client closed its connection before an answer came
    stale: bool = False  # renew/release naming a token older than one its owner got since
    stale_entries: tuple[int, ...] = ()  # the same, for the entries of a batch renewal
    retry: bool = False  # sent before with this request id

    @property
    def in_flight(self) -> bool:
        """Sent, not answered, connection still open."""
        return self.status is None and not self.gone

    def describe(self) -> str:
        """One line for a schedule's printout."""
        body = {k: v for k, v in (self.body or {}).items() if k != "owner_token"}
        if "leases" in body:  # a batch: each entry's token and ttl
            body = {"leases": [(e["fencing_token"], e["ttl_seconds"]) for e in body["leases"]]}
        rid = f" rid={self.request_id[-4:]}" if self.request_id else ""
        return f"r{self.id} {self.client}->{self.server} {self.op} {self.key} {body}{rid}"


LOSING: contextvars.ContextVar[bool] = contextvars.ContextVar("losing", default=False)
"""Set while running work whose commit is to be lost on the way back (`FaultyStorage`)."""


class FaultyStorage:
    """A server's storage whose commit can succeed and still fail, as when the connection drops
    during COMMIT: the change is made, and the server is told the database is unavailable."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextlib.contextmanager
    def write(self, **options: Any) -> Iterator[Any]:
        with self._inner.write(**options) as tx:
            yield tx
        if LOSING.get():
            raise StorageUnavailable("explorer: the connection dropped during COMMIT")


class SimServer:
    """One server process: the real app, its storage, its loop tasks."""

    def __init__(self, world: World, name: str, storage: Storage) -> None:
        self.world = world
        self.name = name
        self.storage = storage
        config = ServerConfig(
            database_url=world.database_url,
            access_log=False,
            sqlite_synchronous="normal",
            purge_interval_seconds=10**9,  # the purge runs in a thread of its own: not here
            key_use_flush_seconds=10**9,
            auth_cache_seconds=10**9,
            waiting=world.settings,
        )
        faulty: Any = FaultyStorage(storage)
        self.app = create_app(config, storage=faulty, spec=_spec(), offload=self._offload)
        self.alive = True
        self._stop = asyncio.Event()
        self.requests: set[asyncio.Task[None]] = set()
        self.life = world.loop.create_task(self._live(), name=f"{name} life")

    async def _live(self) -> None:
        async with self.app.router.lifespan_context(self.app):
            await self._stop.wait()

    async def _offload(self, work: Callable[[bool], Any], _job: Job) -> Any:
        world = self.world
        task = asyncio.current_task()
        where = task.get_name() if task is not None else "?"
        name = _name_of(work)
        if not self.alive:  # its process is gone: nothing it asks for will ever run
            raise asyncio.CancelledError
        if name == "authenticate":
            return work(True)  # a key lookup (cached afterwards): nothing to interleave
        pending = Pending(
            next(world.ids), self.name, f"{where}: {name}", work, world.loop.create_future()
        )
        pending.request = next((r for r in world.requests if r.task is task), None)
        world.pending.append(pending)
        return await pending.future

    def kill(self) -> None:
        """Die like kill -9: no request is answered, no pending work runs, its tasks stop."""
        self.alive = False
        for task in [*self.requests, self.life]:
            task.cancel()
        self.world.drop_pending(self.name)


class World:
    """Servers on one database, the clients' requests, the pending storage work, the clock."""

    def __init__(
        self,
        backend: str,
        database_url: str,
        *,
        settings: WaitingSettings | None = None,
        loop: VirtualLoop,
        open_storage: Callable[[str, str | None], Storage],
        gates: Any = None,
    ) -> None:
        self.backend = backend
        self.database_url = database_url
        self.settings = settings or WaitingSettings()
        self.loop = loop
        asyncio.set_event_loop(self.loop)
        self.ids = itertools.count(1)
        self.pending: list[Pending] = []
        self.running: list[Pending] = []  # PostgreSQL: started, stopped at a clock gate or a lock
        self.requests: list[Request] = []
        self.servers: dict[str, SimServer] = {}
        self.steps: list[str] = []
        # Called as each request leaves its client, and as each answer reaches it.
        self.send_hooks: list[Callable[[Request], None]] = []
        self.answer_hooks: list[Callable[[Request], None]] = []
        self.commit_hooks: list[Callable[[Pending], None]] = []  # after each transaction ran
        self.gates = gates
        # The servers judge a batch's body in a worker thread (`Api._judged`): here on the
        # loop, so that what a schedule draws never depends on how fast a thread ran
        # (Hypothesis reported FlakyStrategyDefinition on `--explore` runs with batches).
        self._to_thread = anyio.to_thread.run_sync
        anyio.to_thread.run_sync = _on_the_loop  # type: ignore[assignment]
        self._open_storage = open_storage
        self._storages: list[Storage] = []
        admin = open_storage(database_url, None)
        self._storages.append(admin)
        self.admin = admin
        keys = make_project_keys(admin, "sim")
        self.headers = [
            (b"apikey", keys.anon_key.encode()),
            (b"authorization", f"Bearer {keys.service_key}".encode()),
        ]

    # -- time -----------------------------------------------------------------------------

    def now_us(self) -> int:
        """The storage clock: virtual loop time on the explorer's epoch."""
        return clock_of(self.loop)()

    def advance(self, seconds: float) -> None:
        """Move time forward; timers fire at their own times."""
        self.steps.append(f"advance {seconds:g}s")
        self.loop.advance(seconds)

    # -- servers ----------------------------------------------------------------------------

    def start_server(self, name: str) -> SimServer:
        """A new server process on the shared database (a restart under the same name)."""
        storage = self._open_storage(self.database_url, name)
        self._storages.append(storage)
        server = SimServer(self, name, storage)
        self.servers[name] = server
        self.settle()
        return server

    def kill_server(self, name: str) -> None:
        """kill -9 of a server: its requests' clients see their connections close."""
        self.steps.append(f"kill {name}")
        server = self.servers[name]
        server.kill()
        for request in self.requests:
            if request.server == name and request.in_flight:
                request.gone = True
        self.settle()

    def drop_pending(self, server: str) -> None:
        """Forget a dead server's pending work (its running transactions die with it)."""
        self.pending = [p for p in self.pending if p.server != server]
        if self.gates is not None:
            self.gates.kill(server, [p for p in self.running if p.server == server])
        self.running = [p for p in self.running if p.server != server]

    # -- clients ----------------------------------------------------------------------------

    def send(
        self,
        client: str,
        server: str,
        op: str,
        key: str,
        body: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> Request:
        """A client sends a request; the server starts handling it at once."""
        earlier = next(
            (r for r in self.requests if request_id and r.request_id == request_id), None
        )
        first = self.now_us() if earlier is None else earlier.first_sent_us
        request = Request(
            next(self.ids),
            client,
            server,
            op,
            key,
            body,
            request_id,
            self.now_us(),
            first,
            self.loop.create_future(),
        )
        request.retry = earlier is not None
        self.requests.append(request)
        self.steps.append(f"send {request.describe()}")
        for hook in self.send_hooks:
            hook(request)
        target = self.servers[server]
        if not target.alive:
            request.gone = True  # connection refused
            return request
        request.task = self.loop.create_task(
            self._exchange(target, request), name=f"r{request.id} {client} {op}"
        )
        target.requests.add(request.task)
        request.task.add_done_callback(target.requests.discard)
        self.settle()
        return request

    def close(self, request: Request) -> None:
        """The client closes its connection (a timeout, a crash, Ctrl-C); the server hears of
        it at its next turn, not before: work the schedule runs first still sees it open."""
        self.steps.append(f"close r{request.id}")
        request.gone = True
        if not request.closed.done():
            request.closed.set_result(None)

    async def _exchange(self, server: SimServer, request: Request) -> None:
        method, path = _route(request.op, request.key)
        headers = list(self.headers)
        raw = b""
        query = b""
        if request.op == "watch":  # its "body" is its query string
            query = urllib.parse.urlencode(request.body or {}).encode()
        elif request.body is not None:
            raw = json.dumps(request.body).encode()
            headers.append((b"content-type", b"application/json"))
        if request.request_id is not None:
            headers.append((b"x-request-id", request.request_id.encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": ("10.0.0.1", request.id),
            "server": ("sim", 80),
            "state": {},
        }
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await request.closed
            return {"type": "http.disconnect"}

        start: dict[str, Any] = {}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif not message.get("more_body", False) and not request.gone:
                self._answered(request, start, message.get("body", b""))

        await server.app(scope, receive, send)

    def _answered(self, request: Request, start: dict[str, Any], body: bytes) -> None:
        request.status = start["status"]
        headers = dict(start["headers"])
        request.replayed = headers.get(b"idempotent-replayed") == b"true"
        request.payload = json.loads(body) if body else None
        request.answered_us = self.now_us()
        self.steps.append(f"    r{request.id} heard {request.status}{_summary(request)}")
        for hook in self.answer_hooks:
            hook(request)

    # -- storage work -----------------------------------------------------------------------

    def settle(self) -> None:
        """Let every server run all it can without new storage work being done."""
        self.loop.settle()

    def work_of(self, request: Request) -> Pending:
        """The pending storage work of `request` (there must be exactly one)."""
        (found,) = [p for p in self.pending if p.request is request]
        return found

    def can_run(self, pending: Pending) -> bool:
        """Whether `pending` can start now: PostgreSQL runs a few at a time per server."""
        running = sum(p.server == pending.server for p in self.running)
        return self.gates is None or running < RUNNING_PER_SERVER

    def run(self, pending: Pending, fault: str = "none", *, settle: bool = True) -> None:
        """Do one piece of pending work: "none", "fail" (the database was out of reach, nothing
        changed) or "lost" (it committed, but the connection dropped during COMMIT, so the
        server is told the database is unavailable).

        `settle=False` leaves the servers' loop alone afterwards: what the work woke has not
        run yet, so a client can close its connection "just as" the work committed.
        """
        self.pending.remove(pending)
        self.steps.append(f"run {pending}" + ("" if fault == "none" else f" ({fault})"))
        if fault == "fail":
            if not pending.future.done():
                pending.future.set_exception(StorageUnavailable("explorer: the database is away"))
        elif self.gates is None:
            self._run_inline(pending, lose=fault == "lost")
        else:
            pending.lose_answer = fault == "lost"
            self.gates.start(pending)
            self.running.append(pending)
            self.collect()
        if settle:
            self.settle()

    def _run_inline(self, pending: Pending, *, lose: bool) -> None:
        losing = LOSING.set(lose)
        try:
            try:
                result = pending.work(False)  # as the server runs SQLite: on the loop
            except WouldBlock:
                result = pending.work(True)
        except BaseException as exc:
            if not pending.future.done():  # its request may have been cancelled meanwhile
                pending.future.set_exception(exc)
        else:
            if not pending.future.done():
                pending.future.set_result(result)
        finally:
            LOSING.reset(losing)
            self._committed(pending)

    def _committed(self, pending: Pending) -> None:
        for hook in self.commit_hooks:
            hook(pending)

    def resume(self, pending: Pending) -> None:
        """PostgreSQL: let a transaction stopped at a clock read go on."""
        self.steps.append(f"resume {pending}")
        self.gates.resume(pending)
        self.collect()
        self.settle()

    def collect(self) -> None:
        """PostgreSQL: wait until no thread can move, then hand finished work its results."""
        self.gates.quiesce(self.running)
        for pending in [p for p in self.running if p.outcome is not None]:
            self.running.remove(pending)
            kind, value = pending.outcome
            self._committed(pending)
            if pending.future.done():
                continue
            if kind == "error":
                pending.future.set_exception(value)
            else:
                pending.future.set_result(value)

    def paused(self) -> list[Pending]:
        """PostgreSQL: running transactions stopped at a clock read."""
        return [] if self.gates is None else self.gates.paused(self.running)

    def drain(self) -> None:
        """Run every piece of work that is or becomes pending, and let paused ones go, until
        nothing is left (time does not move)."""
        for _ in range(1000):
            runnable = [p for p in self.pending if self.can_run(p)]
            if self.paused():
                self.resume(self.paused()[0])
            elif runnable:
                self.run(runnable[0])
            elif self.announcements():
                self.deliver(0)
            else:
                return
        raise AssertionError("storage work kept coming for 1000 rounds")

    def announcements(self) -> list[tuple[str, str]]:
        """PostgreSQL: announcements (hand-offs, changes) sent, not yet delivered."""
        return [] if self.gates is None else self.gates.announcements

    def deliver(self, index: int) -> None:
        """PostgreSQL: one announcement reaches the servers (NOTIFY is not instant)."""
        self.steps.append(f"deliver announcement {self.announcements()[index]}")
        self.gates.deliver(index)
        self.settle()

    def shutdown(self) -> None:
        """Stop every server and close every storage."""
        for server in self.servers.values():
            if server.alive:
                server.kill()
        with contextlib.suppress(Exception):
            self.settle()
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        with contextlib.suppress(Exception):
            self.settle()
        if self.gates is not None:
            self.gates.close()
        for storage in self._storages:
            with contextlib.suppress(Exception):
                storage.close()
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()
        asyncio.set_event_loop(None)
        anyio.to_thread.run_sync = self._to_thread


async def _on_the_loop(func: Callable[..., Any], *args: Any, **_options: Any) -> Any:
    """`anyio.to_thread.run_sync`, run on the calling loop instead."""
    return func(*args)


def _summary(request: Request) -> str:
    payload = request.payload if isinstance(request.payload, dict) else {}
    replayed = " (replayed)" if request.replayed else ""
    if "error" in payload:
        return f" {payload['error']['code']}{replayed}"
    if request.op == "watch" and "version" in payload:
        labels = [(h["fencing_token"], h["label"]) for h in payload["holders"]]
        return f" version {payload['version']} holders {labels}"
    if "results" in payload:
        told = [
            f"token {r['lease']['fencing_token']}" if "lease" in r else r["error"]["code"]
            for r in payload["results"]
        ]
        return f" [{', '.join(told)}]{replayed}"
    if "fencing_token" in payload and "expires_at" in payload and request.op != "get":
        until = (micros(payload["expires_at"]) - EPOCH_US) / 1_000_000
        return f" token {payload['fencing_token']} until t={until:g}{replayed}"
    return f" {payload}{replayed}" if payload else replayed


def _route(op: str, key: str) -> tuple[str, str]:
    if op == "renew_many":
        return "POST", "/v1/leases/renew"
    if op in ("get", "watch"):
        return "GET", f"/v1/locks/{key}"
    if op == "force_release":
        return "DELETE", f"/v1/locks/{key}"
    return "POST", f"/v1/locks/{key}/{op}"


def micros(timestamp: str) -> int:
    """An RFC 3339 timestamp of the API as microseconds since the epoch."""
    instant = datetime.fromisoformat(timestamp)
    return round(instant.timestamp() * 1_000_000)


def new_id() -> str:
    """A request id or owner token."""
    return str(uuid.uuid4())


def clock_of(loop: VirtualLoop) -> Callable[[], int]:
    """The storage clock that follows `loop`'s virtual time."""
    return lambda: EPOCH_US + round(loop.time() * 1_000_000)


@contextlib.contextmanager
def sqlite_world(path: Path, **options: Any) -> Iterator[World]:
    """A world on one SQLite file, each server with its own connections, as processes have."""
    from volcano_server.storage._sqlite import SQLiteStorage

    loop = VirtualLoop()
    clock = clock_of(loop)

    def open_sqlite(_url: str, _server: str | None) -> Storage:
        return SQLiteStorage(path, synchronous="normal", clock=clock, monotonic=loop.time)

    world = World("sqlite", f"sqlite:///{path}", loop=loop, open_storage=open_sqlite, **options)
    try:
        yield world
    finally:
        world.shutdown()
