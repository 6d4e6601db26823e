"""This server's side of the lock queues: the requests it holds open, and what wakes them.

The queue itself is in the database (storage `Waiter` rows, ordered by arrival), shared by every
server on it. A waiting acquire here is one `Entry`: an open request with its place (`seq`) in a
key's queue. Entries move through one state machine, `Phase` x `Move` -> `Phase` in `_MOVES`,
guarded by one lock, because the transaction that hands a key over may run in a worker thread
while the request's own coroutine decides to leave:

    QUEUED --grant--> GRANTING --commit--> GRANTED          the lease is its answer
              |                 --roll back--> QUEUED
              +--leave--> LEAVING                             wait ran out, client gone, shutdown
              +--supersede--> SUPERSEDED                      a newer request took its place

What wakes a key's queue, so a free key never waits for a poll:
- a release or force release hands the key over in its own transaction (`_service`);
- a timer per key with entries here, at the live lease's expiry (by the storage clock's
  reckoning of the time left), runs a hand-off when the lease expires unrenewed;
- another server that reserved the key for one of our entries tells us (PostgreSQL NOTIFY);
  on SQLite, servers sharing one file poll for that instead, only while another server beats;
- a heartbeat row per server lets the others skip waiters whose server has died.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ._errors import ApiError
from ._pulse import Pulse
from ._wire import Answer

if TYPE_CHECKING:
    from ._service import LockService
    from .storage import LockRow, Storage

__all__ = ["Entry", "Move", "Phase", "WaitingRoom", "WaitingSettings", "shutting_down"]

log = logging.getLogger("volcano_server")

_KeyRef = tuple[int, str]  # (project id, key)
_TokenRef = tuple[int, str, str]  # (project id, key, owner token)


class Phase(enum.Enum):
    """Where a waiting request stands."""

    QUEUED = "queued"
    GRANTING = "granting"
    GRANTED = "granted"
    LEAVING = "leaving"
    SUPERSEDED = "superseded"


class Move(enum.Enum):
    """What can happen to a waiting request."""

    GRANT = "grant"
    COMMIT = "commit"
    ROLL_BACK = "roll back"
    LEAVE = "leave"
    SUPERSEDE = "supersede"


_MOVES: dict[tuple[Phase, Move], Phase] = {
    (Phase.QUEUED, Move.GRANT): Phase.GRANTING,
    (Phase.GRANTING, Move.COMMIT): Phase.GRANTED,
    (Phase.GRANTING, Move.ROLL_BACK): Phase.QUEUED,
    (Phase.QUEUED, Move.LEAVE): Phase.LEAVING,
    (Phase.QUEUED, Move.SUPERSEDE): Phase.SUPERSEDED,
}


@attrs.frozen
class WaitingSettings:
    """How long places, reservations and heartbeats last; every field has a sane default."""

    # An away waiter (wait ran out, connection closed) may come back to its place this long.
    rejoin_seconds: float = 5.0
    # A key reserved for a waiter held by another server lapses if that server does not take it.
    reserve_seconds: float = 2.0
    # Each server writes its heartbeat this often; it counts as dead after `heartbeat_lifetime`.
    heartbeat_seconds: float = 1.0
    heartbeat_lifetime: float = 3.0
    # SQLite shared by several servers: how often one looks for keys reserved for its waiters.
    poll_seconds: float = 0.1
    # The longest one request waits, whatever it asks (at most the API's 60 s): below a load
    # balancer's idle timeout, so the balancer never cuts a quiet waiting request. A request
    # asking longer gets 409 lock_held after this and acquires again to wait on, in its place.
    max_wait_seconds: float = 60.0

    def __attrs_post_init__(self) -> None:
        if not 0 < self.max_wait_seconds <= 60:
            raise ValueError(
                f"the longest wait must be more than 0 and at most 60 seconds,"
                f" got {self.max_wait_seconds:g}"
            )


class Entry:
    """One waiting acquire held open by this server."""

    def __init__(
        self,
        *,
        project_id: int,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        request_id: str,
        fingerprint: bytes | None,
    ) -> None:
        self.project_id = project_id
        self.key = key
        self.owner_token = owner_token
        self.ttl_seconds = ttl_seconds
        self.request_id = request_id
        self.fingerprint = fingerprint  # the acquire's (None: not replayable)
        self.seq: int | None = None
        self.granted_row: LockRow | None = None  # the lease it was granted, once committed
        self.phase = Phase.QUEUED
        self.answer: Answer | None = None  # set with GRANTED and SUPERSEDED
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def replayable(self) -> bool:
        """Whether the client sent a request id, so the outcome is stored for replay."""
        return self.fingerprint is not None

    def __repr__(self) -> str:  # never the owner token
        return f"<Entry {self.key!r} seq={self.seq} {self.phase.value}>"

    @property
    def key_ref(self) -> _KeyRef:
        """The key's identity across projects."""
        return (self.project_id, self.key)

    @property
    def token_ref(self) -> _TokenRef:
        """The place's identity: one per owner token and key."""
        return (self.project_id, self.key, self.owner_token)

    def wake(self) -> None:
        """Wake the request's coroutine, from any thread."""
        if threading.get_ident() == self._loop_thread:
            self._signal()  # a hand-off on the loop itself: no self-pipe write, no extra turn
        else:
            self._loop.call_soon_threadsafe(self._signal)

    def _signal(self) -> None:
        self._woken = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def changed(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline kept across wake-ups
        gone: asyncio.Future[None] | None = None,
    ) -> None:
        """Wait for `wake()`, `gone` or `timeout` seconds, whichever comes first.

        A wake that came before this call counts, so none is ever missed.
        """
        if not self._woken:
            self._waiter = self._loop.create_future()
            waiting = (self._waiter,) if gone is None else (self._waiter, gone)
            try:
                await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._waiter.cancel()
                self._waiter = None
        self._woken = False


class WaitingRoom:
    """Every waiting acquire this server holds open, and the tasks that wake them."""

    def __init__(self, settings: WaitingSettings | None = None) -> None:
        self.settings = settings or WaitingSettings()
        self.server_id = uuid.uuid4().hex
        self.pulse = Pulse(self.settings.heartbeat_lifetime)  # can others' heartbeats be judged
        self._lock = threading.Lock()
        self._by_seq: dict[int, Entry] = {}
        self._by_key: dict[_KeyRef, set[Entry]] = {}
        self._by_token: dict[_TokenRef, Entry] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timers: dict[_KeyRef, asyncio.TimerHandle] = {}
        self._settling: dict[_KeyRef, bool] = {}  # key -> settle again when the current ends
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._service: LockService | None = None
        self._run_storage: Callable[[Callable[[bool], Any]], Awaitable[Any]] | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_seq)

    @property
    def closing(self) -> bool:
        """Whether the server is shutting down: new waits are refused, queued ones released."""
        return self._closing

    # -- the state machine ------------------------------------------------------------------

    def move(self, entry: Entry, move: Move, answer: Answer | None = None) -> bool:
        """Apply `move` to `entry` if its phase allows it; return whether it did.

        The one place an entry's phase changes. Moves that settle its fate (commit,
        supersede) record the answer and wake its request; a rolled-back grant wakes it too,
        so a request that wanted to leave meanwhile tries again.
        """
        with self._lock:
            target = _MOVES.get((entry.phase, move))
            if target is None:
                return False
            entry.phase = target
            if answer is not None:
                entry.answer = answer
            if target is not Phase.QUEUED and target is not Phase.GRANTING:
                self._drop(entry)
        log.debug("waiter %s: %s -> %s", entry.key, move.value, target.value)
        if move is not Move.GRANT and move is not Move.LEAVE:
            entry.wake()
        return True

    def join(self, entry: Entry, seq: int) -> None:
        """Record `entry` at place `seq`; an older entry with the same token is superseded.

        Called inside the transaction that queued it, so a hand-off in another transaction
        never sees its row without its entry.
        """
        older = self._older(entry.token_ref, entry)
        with self._lock:
            entry.seq = seq
            self._by_seq[seq] = entry
            self._by_key.setdefault(entry.key_ref, set()).add(entry)
            self._by_token[entry.token_ref] = entry
        if older is not None:
            self._supersede(older)

    def supersede(self, project_id: int, key: str, owner_token: str) -> None:
        """The owner token now holds the key through another request: end its wait here."""
        older = self._older((project_id, key, owner_token), None)
        if older is not None:
            self._supersede(older)

    def _older(self, token_ref: _TokenRef, newer: Entry | None) -> Entry | None:
        with self._lock:
            older = self._by_token.get(token_ref)
        return None if older is newer else older

    def _supersede(self, older: Entry) -> None:
        message = "a newer acquire with the same owner token took this request's place"
        self.move(older, Move.SUPERSEDE, ApiError.lock_held(message, 1).answer(older.request_id))

    def forget(self, entry: Entry) -> None:
        """Drop `entry` without a move (its queueing transaction rolled back)."""
        with self._lock:
            self._drop(entry)

    def claim(self, seq: int) -> Entry | None:
        """The entry at `seq`, moved to GRANTING; None if it is not here or cannot be granted."""
        with self._lock:
            entry = self._by_seq.get(seq)
        if entry is None or not self.move(entry, Move.GRANT):
            return None
        return entry

    def entries_of(self, key_ref: _KeyRef) -> int:
        """How many requests this server holds open for the key."""
        with self._lock:
            return len(self._by_key.get(key_ref, ()))

    def _drop(self, entry: Entry) -> None:
        # With self._lock held.
        if entry.seq is not None and self._by_seq.get(entry.seq) is entry:
            del self._by_seq[entry.seq]
        if self._by_token.get(entry.token_ref) is entry:
            del self._by_token[entry.token_ref]
        waiting = self._by_key.get(entry.key_ref)
        if waiting is not None:
            waiting.discard(entry)
            if not waiting:
                del self._by_key[entry.key_ref]

    # -- waking keys ------------------------------------------------------------------------

    def watch(self, key_ref: _KeyRef, seconds: float | None) -> None:
        """Hand the key over after `seconds` (when its live lease ends), from any thread.

        None: the key is not held, so nothing to time; a key with no entries here is dropped.
        """
        loop = self._loop
        if loop is None:
            return
        loop.call_soon_threadsafe(self._arm, key_ref, seconds)

    def _arm(self, key_ref: _KeyRef, seconds: float | None) -> None:
        old = self._timers.pop(key_ref, None)
        if old is not None:
            old.cancel()
        if seconds is None or not self.entries_of(key_ref) or self._loop is None:
            return
        # A millisecond past the expiry, so the storage clock agrees the lease has ended.
        self._timers[key_ref] = self._loop.call_later(
            max(0.0, seconds) + 0.001, self.settle_soon, key_ref
        )

    def settle_soon(self, key_ref: _KeyRef) -> None:
        """Run a hand-off for the key in a task of its own (coalescing repeated calls)."""
        if key_ref in self._settling:
            self._settling[key_ref] = True
            return
        self._settling[key_ref] = False
        self._spawn(self._settle(key_ref))

    async def _settle(self, key_ref: _KeyRef) -> None:
        service, run = self._service, self._run_storage
        assert service is not None  # noqa: S101 - set by run()
        assert run is not None  # noqa: S101 - set by run()
        try:
            again = True
            while again:
                await run(lambda wait: service.settle(key_ref, may_wait=wait))
                again = self._settling.get(key_ref, False)
                self._settling[key_ref] = False
        except Exception as exc:  # noqa: BLE001 - a timer must survive a failing database
            log.warning("handing over %s failed, will retry: %s", key_ref[1], exc)
            self._arm(key_ref, self.settings.heartbeat_seconds)
        finally:
            self._settling.pop(key_ref, None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None  # noqa: S101 - only called while running
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- running ----------------------------------------------------------------------------

    async def run(
        self,
        service: LockService,
        storage: Storage,
        run_storage: Callable[[Callable[[bool], Any]], Awaitable[Any]],
    ) -> None:
        """Beat, listen for hand-offs from other servers (or poll for them), until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._service = service
        self._run_storage = run_storage
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._beat, storage, run_storage)
                tasks.start_soon(storage.listen, self._announced, self._reconnected)
        finally:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()

    async def _beat(
        self, storage: Storage, run_storage: Callable[[Callable[[bool], Any]], Awaitable[Any]]
    ) -> None:
        settings = self.settings
        service = self._service
        assert service is not None  # noqa: S101 - set by run()
        lifetime_us = round(settings.heartbeat_lifetime * 1_000_000)
        next_beat = 0.0
        others = False
        while True:
            loop_now = asyncio.get_running_loop().time()
            if loop_now >= next_beat:
                try:
                    with self.pulse.beating():
                        others = await run_storage(
                            lambda wait: service.beat(self.server_id, lifetime_us, may_wait=wait)
                        )
                except Exception as exc:  # noqa: BLE001 - keep beating through outages
                    log.warning("server heartbeat failed, will retry: %s", exc)
                next_beat = loop_now + settings.heartbeat_seconds
            if others and not storage.pushes_handoffs:
                for key_ref in self._keys():
                    self.settle_soon(key_ref)
                await anyio.sleep(settings.poll_seconds)
            else:
                await anyio.sleep(max(0.0, next_beat - loop_now))

    def _keys(self) -> list[_KeyRef]:
        with self._lock:
            return list(self._by_key)

    def _announced(self, server_id: str, seq: int) -> None:
        if server_id != self.server_id:
            return
        with self._lock:
            entry = self._by_seq.get(seq)
        if entry is not None:
            self.settle_soon(entry.key_ref)

    def _reconnected(self) -> None:
        # Announcements made while the listener was down are lost: look at every key we wait on.
        for key_ref in self._keys():
            self.settle_soon(key_ref)

    async def wait_turn(
        self, entry: Entry, wait_seconds: float, gone: asyncio.Future[None]
    ) -> Answer | None:
        """Hold a queued request open until its turn, its wait runs out, or its client leaves.

        Returns its answer: the lease, 409 lock_held when the wait ran out, 503 when the server
        shuts down; None when the client left (nobody to answer). A lease granted to a client
        that left before it was answered is released at once.
        """
        service, run = self._service, self._run_storage
        if service is None or run is None:
            raise RuntimeError("the waiting room is not running")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait_seconds, self.settings.max_wait_seconds)
        while True:
            phase = entry.phase
            if phase is Phase.GRANTED and gone.done():
                await run(lambda wait: service.release_undelivered(entry, may_wait=wait))
                return None
            if phase is Phase.GRANTED or phase is Phase.SUPERSEDED:
                assert entry.answer is not None  # noqa: S101 - set with these phases
                return entry.answer
            if phase is Phase.QUEUED and (gone.done() or self._closing):
                if self.move(entry, Move.LEAVE):
                    await run(lambda wait: service.leave(entry, may_wait=wait))
                    return None if gone.done() else shutting_down(entry.request_id)
            elif phase is Phase.QUEUED and loop.time() >= deadline:
                try:
                    answer: Answer | None = await run(
                        lambda wait: service.give_up(entry, may_wait=wait)
                    )
                except BaseException:
                    # The database is out of reach and the request is answered so (503): out
                    # of line here too, or a hand-off once the database is back would grant it
                    # a lease nobody receives. Its row there is stepped over at the next
                    # hand-off, as the row of any request that left.
                    self.move(entry, Move.LEAVE)
                    raise
                if answer is not None:
                    return answer
            if entry.phase is Phase.GRANTING:
                await entry.changed()  # its commit (or roll back) is on its way: wait for that
            else:
                await entry.changed(max(0.0, deadline - loop.time()), gone)

    def close(self) -> None:
        """Refuse new waits and send every queued request away (the server is shutting down)."""
        self._closing = True
        with self._lock:
            entries = list(self._by_seq.values())
        for entry in entries:
            entry.wake()


def shutting_down(request_id: str) -> Answer:
    """503 for a waiting acquire that the server will not see through: it is shutting down."""
    message = "the server is shutting down; retry (a queued caller keeps its place a few seconds)"
    return ApiError.unavailable(message).answer(request_id)
