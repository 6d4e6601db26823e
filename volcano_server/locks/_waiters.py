"""The life of waiting requests on this server, and what wakes the keys they wait for.

A waiting acquire joins its key's queue in its transaction (`Transactions.acquire` with an
`Entry`) and then waits on the event loop, costing no thread, until `next_turn` says what to do:
deliver the lease it was granted, end that lease if its client left before the answer
(`Transactions.undeliver`), leave the line (client gone, server shutting down), or give up when
its wait runs out. `next_turn` is a pure decision; `Waits.acquire` is the thin shell that acts.

What wakes a key's queue, so a free key never waits for a poll:
- a release or force release hands the key over in its own transaction;
- a timer per key with entries here, at the live lease's expiry (by the storage clock's
  reckoning of the time left), runs a hand-off when the lease expires unrenewed;
- another server that reserved the key for one of our entries tells us (PostgreSQL NOTIFY);
  on SQLite, servers sharing one file poll for that instead, only while another server beats;
- a heartbeat row per server lets the others skip waiters whose server has died; a server
  whose heartbeat lapsed looks at each of its keys once it beats again, and puts back in line
  any of its requests that others stepped over meanwhile (`Transactions._back_in_line`).

The same heartbeat and listener serve this server's watches (`_watching`): announced changes
wake them, a reconnected listener makes them read again, and each beat forgets watch records
that have lingered unused (and, on SQLite shared by several servers, polls their keys).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

import anyio

from .._config import WaitingSettings
from ..storage import OnLocked, Storage
from ..telemetry._lockmetrics import LockMetrics, Waited
from ..telemetry._tracing import Tracing
from ..wire._errors import ApiError
from ..wire._wire import Answer
from ._admission import Job
from ._offload import Runner
from ._pulse import Pulse
from ._registry import Entry, KeyRef, Move, Phase, Registry
from ._revocations import Revocations
from ._transactions import Caller, Transactions, shutting_down
from ._watching import Watches

__all__ = ["HandoffTimers", "Turn", "Waits", "next_turn", "wait_outcome"]

log = logging.getLogger("volcano_server")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _EntryStep(Protocol[T_co]):
    """A transaction on a waiting request's entry (`Transactions.leave`, `give_up`, ...)."""

    def __call__(self, entry: Entry, *, may_block: bool, on_locked: OnLocked | None) -> T_co: ...


class Turn(enum.Enum):
    """What a waiting request does next."""

    DELIVER = "deliver"  # answer with what it was given (a lease, or 409 superseded)
    REVOKED = "revoked"  # its service key was revoked: out of line, 401
    UNDELIVER = "undeliver"  # granted, but its client left: end that lease
    LEAVE = "leave"  # its client left, or the server shuts down: out of line
    GIVE_UP = "give up"  # its wait ran out: a last hand-off, then 409
    AWAIT_COMMIT = "await commit"  # a grant of it is being committed
    WAIT = "wait"  # for a hand-off, its client leaving, or its wait running out


_SETTLED = {
    Phase.SUPERSEDED: Turn.DELIVER,
    Phase.REVOKED: Turn.REVOKED,
    Phase.GRANTING: Turn.AWAIT_COMMIT,
}


def next_turn(phase: Phase, *, gone: bool, closing: bool, timed_out: bool) -> Turn:
    """What a waiting request in `phase` does next."""
    if phase is Phase.GRANTED:
        return Turn.UNDELIVER if gone else Turn.DELIVER
    if phase in _SETTLED:
        return _SETTLED[phase]
    if phase is Phase.QUEUED and (gone or closing):
        return Turn.LEAVE
    if phase is Phase.QUEUED and timed_out:
        return Turn.GIVE_UP
    return Turn.WAIT


_ENDED = {
    Phase.SUPERSEDED: Waited.SUPERSEDED,
    Phase.REVOKED: Waited.REVOKED,
}


def wait_outcome(phase: Phase, answer: Answer | None) -> Waited:
    """How a waiting request ended, from its phase and its answer (None: its client left)."""
    if phase is Phase.GRANTED:
        return Waited.GRANTED if answer is not None else Waited.UNDELIVERED
    if phase is Phase.LEAVING:
        if answer is None:
            return Waited.CLIENT_LEFT
        return Waited.SHUTDOWN if answer.status == 503 else Waited.TIMED_OUT
    return _ENDED.get(phase, Waited.ERROR)


class HandoffTimers:
    """A timer per key that requests wait for here, at its live lease's expiry.

    Made before the lock transactions, which re-time a key through it (`time_handoff`) after
    each commit; started by `Waits.run` with what runs a hand-off when a timer fires.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._timers: dict[KeyRef, asyncio.TimerHandle] = {}
        self._running: tuple[asyncio.AbstractEventLoop, Callable[[KeyRef], None]] | None = None

    def time_handoff(self, key_ref: KeyRef, seconds: float | None) -> None:
        """Hand the key over after `seconds` (when its live lease ends), from any thread.

        None: the key is not held, so nothing to time; a key with no entries here is dropped.
        Nothing is timed before `start`.
        """
        if self._running is not None:
            self._running[0].call_soon_threadsafe(self.arm, key_ref, seconds)

    def arm(self, key_ref: KeyRef, seconds: float | None) -> None:
        """`time_handoff`, on the loop."""
        old = self._timers.pop(key_ref, None)
        if old is not None:
            old.cancel()
        if seconds is None or not self._registry.entries_of(key_ref) or self._running is None:
            return
        loop, due = self._running
        # A millisecond past the expiry, so the storage clock agrees the lease has ended.
        self._timers[key_ref] = loop.call_later(max(0.0, seconds) + 0.001, due, key_ref)

    def start(self, due: Callable[[KeyRef], None]) -> None:
        """Time hand-offs on the running loop from now on: `due(key_ref)` runs one."""
        self._running = (asyncio.get_running_loop(), due)

    def stop(self) -> None:
        """Cancel every timer."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class Waits:
    """Every waiting request this server holds open, the timers and heartbeat that serve them.

    Built with everything it needs: the storage, the lock transactions and the hand-off timers
    they re-time keys through, its settings, how storage work runs (`run`, which answers an
    outage with 503), and this server's watches (told of each change).
    """

    def __init__(
        self,
        storage: Storage,
        registry: Registry,
        transactions: Transactions,
        timers: HandoffTimers,
        *,
        settings: WaitingSettings,
        run: Runner,
        pulse: Pulse,
        revocations: Revocations,
        watches: Watches,
        metrics: LockMetrics,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self._metrics = metrics
        self._tracing = tracing
        self._storage = storage
        self._registry = registry
        self._run = run
        self._pulse = pulse
        self._revocations = revocations
        self._watches = watches
        self._transactions = transactions
        self._timers = timers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._settling: dict[KeyRef, bool] = {}  # key -> settle again when the current ends
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        """How many waiting requests hold a place here."""
        return len(self._registry)

    def close(self) -> None:
        """Refuse new waits and send every queued request away (the server is shutting down).

        Watches are answered at once, with the key's state.
        """
        self._registry.close()
        self._watches.close()

    # -- one waiting request ----------------------------------------------------------------

    async def acquire(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        *,
        limit: int,
        label: str | None,
        shared: bool = False,
        wait_seconds: float,
        gone: asyncio.Future[None],
    ) -> Answer | None:
        """An acquire that waits in line: its answer, or None when its client left."""
        entry = Entry(
            project_id=caller.project_id,
            key=key,
            owner_token=owner_token,
            ttl_seconds=ttl_seconds,
            request_id=caller.request_id,
            fingerprint=caller.fingerprint,
            credential=caller.credential,
            label=label,
            shared=shared,
        )
        tx = self._transactions
        result = await self._run.in_lane(
            entry.key_ref,
            lambda may_block, on_locked: tx.acquire(
                caller,
                key,
                owner_token,
                ttl_seconds,
                limit=limit,
                label=label,
                shared=shared,
                entry=entry,
                may_block=may_block,
                on_locked=on_locked,
            ),
            job=Job(caller.project_id),
            traced_as="acquire",
        )
        if isinstance(result, Answer):
            return result
        loop = asyncio.get_running_loop()
        joined = loop.time()
        outcome = Waited.ERROR
        try:
            with self._run.parked():  # it needs the loop only when its turn comes
                if self._tracing is None:
                    answer = await self._turns(entry, wait_seconds, gone)
                    outcome = wait_outcome(entry.phase, answer)
                    return answer
                with self._tracing.wait() as span:
                    answer = await self._turns(entry, wait_seconds, gone)
                    outcome = wait_outcome(entry.phase, answer)
                    self._tracing.waited(span, outcome)
                    return answer
        finally:
            entry.delivered()
            self._metrics.waited(key, outcome, loop.time() - joined)

    async def _turns(
        self, entry: Entry, wait_seconds: float, gone: asyncio.Future[None]
    ) -> Answer | None:
        """Hold a queued request open until its turn, its wait runs out, or its client leaves."""
        tx = self._transactions
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait_seconds, self.settings.max_wait_seconds)
        while True:
            turn = next_turn(
                entry.phase,
                gone=gone.done(),
                closing=self._registry.closing,
                timed_out=loop.time() >= deadline,
            )
            if turn is Turn.DELIVER:
                assert entry.answer is not None  # noqa: S101 - set with GRANTED and SUPERSEDED
                return entry.answer
            if turn is Turn.UNDELIVER:
                entry.delivered()  # nobody to answer: whoever granted it need not wait
                await self._on_entry(entry, tx.undeliver, "undeliver")
                return None
            if turn is Turn.REVOKED:
                await self._on_entry(entry, tx.leave, "leave")
                return None if gone.done() else entry.answer
            if turn is Turn.LEAVE and self._registry.move(entry, Move.LEAVE):
                await self._on_entry(entry, tx.leave, "leave")
                return None if gone.done() else shutting_down(entry.request_id)
            if turn is Turn.GIVE_UP:
                answer = await self._give_up(entry)
                if answer is not None:
                    return answer
            elif turn is Turn.AWAIT_COMMIT:
                await entry.changed()  # its commit (or roll back) is on its way: wait for that
            elif turn is Turn.WAIT and entry.unconfirmed is not None and await self._confirm(entry):
                continue  # judged: granted now, or it waits on
            elif turn is Turn.WAIT:
                await entry.changed(max(0.0, deadline - loop.time()), gone)

    async def _confirm(self, entry: Entry) -> bool:
        """Deliver a grant whose commit was not confirmed, if it committed after all.

        False if the database could not be asked: the request waits on (its wait's end, or
        the next change, asks again; `give_up` asks too).
        """
        try:
            await self._on_entry(entry, self._transactions.confirm, "confirm")
        except ApiError:  # the database is out of reach (503)
            return False
        return True

    async def _give_up(self, entry: Entry) -> Answer | None:
        """The last hand-off and 409; None if the entry was granted the key meanwhile.

        A grant made by another transaction while this one is on its way is delivered at once,
        not after it: a slow database must not hold a lease's answer past its ttl.
        """
        giving_up = asyncio.ensure_future(
            self._on_entry(entry, self._transactions.give_up, "give_up")
        )
        try:
            while not giving_up.done():
                if entry.phase is Phase.GRANTED:
                    giving_up.add_done_callback(_quietly)  # it finds the entry granted: None
                    return None
                await entry.changed(None, giving_up)
            return giving_up.result()
        except BaseException:
            # The database is out of reach and the request is answered so (503): out of line
            # here too, or a hand-off once the database is back would grant it a lease nobody
            # receives. Its row there is stepped over at the next hand-off, as the row of any
            # request that left.
            self._registry.move(entry, Move.LEAVE)
            raise

    async def _on_entry(self, entry: Entry, step: _EntryStep[T], traced_as: str) -> T:
        """Run a transaction on a waiting request's entry, in its key's lane, as lease-keeping."""
        return await self._run.in_lane(
            entry.key_ref,
            lambda may_block, on_locked: step(entry, may_block=may_block, on_locked=on_locked),
            job=Job(entry.project_id, keeps=True, request=False),
            traced_as=traced_as,
        )

    # -- waking keys ------------------------------------------------------------------------

    def settle_soon(self, key_ref: KeyRef) -> None:
        """Run a hand-off for the key in a task of its own (coalescing repeated calls)."""
        if key_ref in self._settling:
            self._settling[key_ref] = True
            return
        self._settling[key_ref] = False
        self._spawn(self._settle(key_ref))

    async def _settle(self, key_ref: KeyRef) -> None:
        tx = self._transactions
        try:
            again = True
            while again:
                # Not in the key's lane: a hand-off puts nobody in line, and one held there
                # behind transactions stalled on a lost database link was late (the failover
                # fault test's queue-expiring waiter timed out).
                await self._run(
                    lambda may_block: tx.settle(key_ref, may_block=may_block),
                    job=Job(key_ref[0], keeps=True, request=False),
                )
                again = self._settling.get(key_ref, False)
                self._settling[key_ref] = False
        except Exception as exc:  # noqa: BLE001 - a timer must survive a failing database
            log.warning("handing over %s failed, will retry: %s", key_ref[1], exc)
            self._timers.arm(key_ref, self.settings.heartbeat_seconds)
        finally:
            self._settling.pop(key_ref, None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None  # noqa: S101 - only called while running
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Beat, listen for hand-offs from other servers (or poll for them), until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._timers.start(self.settle_soon)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._beat)
                tasks.start_soon(self._storage.listen, _Listener(self, self._watches))
        finally:
            self._timers.stop()
            for task in self._tasks:
                task.cancel()
            self._watches.stop()

    async def _beat(self) -> None:
        settings, tx, server_id = self.settings, self._transactions, self._registry.server_id
        lifetime_us = round(settings.heartbeat_lifetime * 1_000_000)

        def beat(may_block: bool) -> tuple[bool, int]:
            return tx.beat(server_id, lifetime_us, may_block=may_block)

        next_beat = 0.0
        others = False
        while True:
            loop_now = asyncio.get_running_loop().time()
            if loop_now >= next_beat:
                try:
                    others, dated = await self._run(beat)
                except Exception as exc:  # noqa: BLE001 - keep beating through outages
                    self._pulse.lapsed()
                    log.warning("server heartbeat failed, will retry: %s", exc)
                else:
                    if self._pulse.beat(dated):
                        # Others may have judged this server dead meanwhile and stepped over
                        # its requests: each key's hand-off puts them back (`_back_in_line`).
                        self.look_again()
                await self._send_revoked_away()
                await self._watches.tidy()
                next_beat = loop_now + settings.heartbeat_seconds
            if others and not self._storage.pushes_handoffs:
                for key_ref in self._registry.waited_keys():
                    self.settle_soon(key_ref)
                self._watches.poll()
                await anyio.sleep(settings.poll_seconds)
            else:
                await anyio.sleep(max(0.0, next_beat - loop_now))

    async def _send_revoked_away(self) -> None:
        """Answer 401 to every waiter whose service key has been revoked since it joined.

        Each distinct key is looked up at most once a heartbeat (the cache keeps it for its
        lifetime), so a revocation reaches the waiters within the cache's lifetime and a beat.
        """
        entries = [e for e in self._registry.entries() if e.phase is Phase.QUEUED]
        revocations = self._revocations
        for digest in {entry.credential for entry in entries}:

            def check(may_block: bool, digest: bytes = digest) -> bool:
                return revocations.revoked(digest, may_block=may_block)

            try:
                revoked = await self._run(check)
            except Exception as exc:  # noqa: BLE001 - the database is away: ask again next beat
                log.warning("checking waiters' keys failed, will retry: %s", exc)
                return
            if revoked:
                for entry in entries:
                    if entry.credential == digest:
                        self._registry.revoke(entry)

    def reserved(self, server_id: str, seq: int) -> None:
        """Another server reserved a slot for waiter `seq` of `server_id` (maybe ours)."""
        if server_id != self._registry.server_id:
            return
        entry = self._registry.entry_at(seq)
        if entry is not None:
            self.settle_soon(entry.key_ref)

    def look_again(self) -> None:
        """Run a hand-off for every key this server holds requests for."""
        for key_ref in self._registry.waited_keys():
            self.settle_soon(key_ref)


class _Listener:
    """What this server does with other servers' announcements (`Storage.listen`)."""

    def __init__(self, waits: Waits, watches: Watches) -> None:
        self._waits = waits
        self._watches = watches

    def reserved(self, server_id: str, seq: int) -> None:
        self._waits.reserved(server_id, seq)

    def changed(self, project_id: int, key: str) -> None:
        self._watches.changed_elsewhere(project_id, key)

    def connected(self) -> None:
        # Announcements made while the listener was down are lost.
        self._waits.look_again()
        self._watches.reconnected()


def _quietly(done: asyncio.Future[Any]) -> None:
    """Retrieve a background give-up's outcome; a failure there changes nothing."""
    if not done.cancelled() and done.exception() is not None:
        log.debug("a give-up overtaken by a grant failed: %s", done.exception())
