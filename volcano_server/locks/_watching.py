"""Watching keys: long polls held open until a key's version moves, costing no thread.

A watch (`GET /v1/locks/{key}?after_version=V&wait_seconds=W`) waits on the event loop until
the key's version differs from V, its wait runs out, or its client leaves. Watches of one key
on this server share one `KeyWatch`: one read of the key at a time, whose state goes to every
watcher it differs for, so a change heard by a thousand watchers costs one read. A read is
started when:

- a transaction of this server moved the key's version (`changed`, from any thread);
- another server did and said so (PostgreSQL: a NOTIFY, sent only for keys that some other
  server has recorded a watch of, so servers without watchers pay nothing; SQLite shared by
  several servers: every watched key is read each poll while another server beats);
- its soonest live lease expires (a timer: an expiry moves the version with no write);
- the listener reconnected (announcements made meanwhile are lost);
- a watcher's wait runs out (it is answered with a fresh state either way);
- a watcher joins that the last read cannot answer: the key has no read yet, or the client
  knows of another version than the last read saw.

A watcher takes only the states of reads started after it asked (`Watcher.since`): a read
already on its way may predate a change the client heard of through another server, and
would tell it of an older version. Except for a state newer than the watcher's own version,
which can tell it of nothing older: a watcher that polls again after a change (the version
it sends is the one the last read delivered) waits for the next change without a read of its
own, so a change heard by a thousand watchers costs one read, not a thousand. Answers to many
watchers go out paced (`_pacing`), so that health probes and other requests are served
between them.

On PostgreSQL a key's first watcher records the watch (`Storage.watch`) in a transaction that
locks the key's row, so every change is either committed before the read that follows or sees
the record and announces itself. The record lingers `linger_seconds` after the last watcher
leaves (a watcher polls again at once), then goes (`tidy`, each heartbeat).

Other things watched by version share all of this under keys of their own, which no lock key
can be (a group's: `/` and its name): `Watches` is given how to read and record them by the
prefix of their keys (`readers`), and reads lock keys itself.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import attrs

from ..storage import LockSummary, Storage
from ..wire._errors import ApiError
from ..wire._wire import Answer, dumps
from ._admission import Job
from ._offload import Runner
from ._registry import KeyRef
from ._rules import HOLDERS_INLINE, lock_state
from ._transactions import Caller

__all__ = ["KeyView", "Read", "Record", "Watches", "delivers"]

log = logging.getLogger("volcano_server")

# A watch record outlives the key's last watcher this long (seconds): a watcher polls again.
LINGER_SECONDS = 10.0


@attrs.frozen
class KeyView:
    """A key's state as one read found it: its version, its answer, when it next expires."""

    version: int
    answer: Answer
    expires_in: float | None  # seconds (storage clock) until the soonest live lease ends


def key_view(summary: LockSummary | None, now: int, key: str) -> KeyView:
    """The view of a key read at `now`: one answer, rendered once for every watcher."""
    state = lock_state(summary, key)
    soonest = summary.soonest_expiry() if summary is not None else None
    expires_in = None if soonest is None else (soonest - now) / 1_000_000
    return KeyView(state["version"], Answer(200, dumps(state)), expires_in)


def delivers(view_version: int, after_version: int, *, fresh: bool) -> bool:
    """Whether a read's state answers a watcher: it differs, or the watcher wants any state."""
    return fresh or view_version != after_version


def read_key(storage: Storage, key_ref: KeyRef, *, may_block: bool) -> KeyView:
    """Read the key's state."""
    project_id, key = key_ref
    with storage.read(may_block=may_block) as tx:
        now = tx.now_us()
        summary = tx.summarize(project_id, key, holders=HOLDERS_INLINE)
    return key_view(summary, now, key)


def watch_key(
    storage: Storage,
    key_ref: KeyRef,
    *,
    server_id: str,
    generation: int,
    lifetime_us: int,
    may_block: bool,
) -> KeyView:
    """Record this server's watch of the key under its row lock, and read the key's state."""
    project_id, key = key_ref
    with storage.write(may_block=may_block, key=key_ref) as tx:
        now = tx.now_us()
        tx.load_lock(project_id, key)  # locks the key's row: see the module's docstring
        tx.watch(project_id, key, server_id, generation)
        tx.touch_server(server_id, now + lifetime_us)  # never purged as a dead server's
        summary = tx.summarize(project_id, key, holders=HOLDERS_INLINE)
    return key_view(summary, now, key)


Read = Callable[..., KeyView]
"""How a watched key is read: `(storage, key_ref, *, may_block)` (`read_key`)."""
Record = Callable[..., KeyView]
"""How a watch is recorded and its key read: as `watch_key` is called."""


class Watcher:
    """One watching request: what it last saw, and the state (or error) that answers it."""

    def __init__(self, after_version: int, since: int) -> None:
        self.after_version = after_version
        self.since = since  # only reads numbered above this answer it
        self.fresh = False  # its wait ran out: any state answers it
        self.answer: asyncio.Future[KeyView] = asyncio.get_running_loop().create_future()


class KeyWatch:
    """The watchers of one key on this server, and its one read at a time."""

    def __init__(self, key_ref: KeyRef) -> None:
        self.key_ref = key_ref
        self.watchers: set[Watcher] = set()
        self.reads = 0  # reads started so far
        self.reading = False
        self.again = False  # read again when the current read ends
        self.timer: asyncio.TimerHandle | None = None
        self.generation: int | None = None  # its watch record in the storage (None: none)
        self.last: KeyView | None = None  # the state the last completed read found
        self.last_until = 0.0  # loop time when `last` goes stale: its soonest lease expires
        self.signals = 0  # changes heard of so far (here, from elsewhere, a poll, an expiry)
        self.last_signals = -1  # `signals` when the read of `last` started
        self.epoch = 0  # moved when records may have been lost: one made before is no proof
        self.idle_since: float | None = None

    def __repr__(self) -> str:
        return f"<KeyWatch {self.key_ref[1]!r} watchers={len(self.watchers)}>"


class Watches:
    """Every watching request this server holds open, by key.

    Built with the storage, how storage work runs (`run`: an outage becomes 503), this
    server's id (its watch records) and heartbeat lifetime, the longest wait allowed, and how
    to read the keys of other things watched (`readers`: by the prefix of their keys), and
    `pace`, which runs answers a few per turn of the event loop when one read answers many.
    """

    def __init__(
        self,
        storage: Storage,
        run: Runner,
        *,
        server_id: str,
        max_wait_seconds: float,
        heartbeat_lifetime_us: int,
        linger_seconds: float = LINGER_SECONDS,
        readers: Mapping[str, tuple[Read, Record]] | None = None,
        pace: Callable[[Callable[[], None]], None],
    ) -> None:
        self._storage = storage
        self._readers = dict(readers or {})
        self._run = run
        self._server_id = server_id
        self._max_wait = max_wait_seconds
        self._lifetime_us = heartbeat_lifetime_us
        self._linger = linger_seconds
        self._records = storage.pushes_handoffs  # others are told of changes through records
        self._keys: dict[KeyRef, KeyWatch] = {}
        self._generations = itertools.count(1)
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # known once a watch arrives
        self._held = 0
        self._pace = pace  # answers per turn of the loop, when one read answers many

    def __len__(self) -> int:
        """How many watching requests are held open here."""
        return self._held

    # -- one watching request ---------------------------------------------------------------

    async def watch(
        self,
        caller: Caller,
        key: str,
        *,
        after_version: int,
        wait_seconds: float,
        gone: asyncio.Future[None],
    ) -> Answer | None:
        """Wait until the key's version differs from `after_version` or the wait runs out.

        The key's state either way; None when the client left first.
        """
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        keyed = self._keys.get((caller.project_id, key))
        if keyed is None:
            keyed = self._keys[caller.project_id, key] = KeyWatch((caller.project_id, key))
        watcher = Watcher(after_version, keyed.reads)
        watcher.fresh = self._closing
        keyed.watchers.add(watcher)
        keyed.idle_since = None
        self._held += 1
        try:
            with self._run.parked():  # it needs the loop only when its key changes
                self._join(keyed, watcher)
                deadline = loop.time() + min(wait_seconds, self._max_wait)
                while True:
                    left = None if watcher.fresh else max(0.0, deadline - loop.time())
                    await asyncio.wait(
                        (watcher.answer, gone), timeout=left, return_when="FIRST_COMPLETED"
                    )
                    if watcher.answer.done():
                        return watcher.answer.result().answer
                    if gone.done():
                        return None
                    self._refresh(keyed, watcher)  # the wait ran out: answer with a fresh state
        finally:
            self._held -= 1
            self._leave(keyed, watcher)

    def _join(self, keyed: KeyWatch, watcher: Watcher) -> None:
        """Answer a new watcher from the last read if it can, else read the key for it.

        A state newer than the watcher's version answers it at once. The very version the
        watcher knows needs no read: the key is read again on its next change, for every
        watcher (a change here, an announcement or a poll from elsewhere, an expiry's timer),
        provided the watch is recorded where other servers look (PostgreSQL).
        """
        last = keyed.last
        now = asyncio.get_running_loop().time()
        stale = now >= keyed.last_until or keyed.signals != keyed.last_signals
        if watcher.fresh or last is None or stale or (self._records and keyed.generation is None):
            self._read_soon(keyed)
        elif last.version > watcher.after_version:
            watcher.answer.set_result(last)
        elif last.version != watcher.after_version:
            self._read_soon(keyed)
        elif keyed.timer is None and keyed.last_until != math.inf:
            self._time(keyed, keyed.last_until - now)  # its expiry's read: the timer stopped

    def _refresh(self, keyed: KeyWatch, watcher: Watcher) -> None:
        watcher.fresh = True
        watcher.since = keyed.reads
        self._read_soon(keyed)

    def _leave(self, keyed: KeyWatch, watcher: Watcher) -> None:
        keyed.watchers.discard(watcher)
        if not watcher.answer.done():
            watcher.answer.cancel()
        elif not watcher.answer.cancelled():
            watcher.answer.exception()  # retrieved: a read's error nobody awaited is no news
        if keyed.watchers:
            return
        if keyed.timer is not None:
            keyed.timer.cancel()
            keyed.timer = None
        # It lingers (`tidy`): a watcher polls again at once, and finds the last read and the
        # watch record still there.
        keyed.idle_since = asyncio.get_running_loop().time()

    # -- reading a key ----------------------------------------------------------------------

    def _read_soon(self, keyed: KeyWatch) -> None:
        """Read the key in a task of its own, after the read under way if there is one."""
        if keyed.reading:
            keyed.again = True
            return
        keyed.reading = True
        self._spawn(self._read(keyed))

    async def _read(self, keyed: KeyWatch) -> None:
        try:
            again = True
            while again and keyed.watchers:
                keyed.again = False
                keyed.reads += 1
                number, epoch, signals = keyed.reads, keyed.epoch, keyed.signals
                generation, work = self._reader(keyed)
                try:
                    view = await self._run(work, job=Job(keyed.key_ref[0], request=False))
                except Exception as exc:  # noqa: BLE001 - the watchers answer it (503, 500)
                    self._fail(keyed, number, exc)
                else:
                    if generation is not None and keyed.epoch == epoch:
                        keyed.generation = generation
                    keyed.last_signals = signals
                    self._deliver(keyed, number, view)
                again = keyed.again
        finally:
            keyed.reading = False
            if not keyed.watchers and keyed.idle_since is None:
                keyed.idle_since = asyncio.get_running_loop().time()  # it lingers (`tidy`)

    def _reader(self, keyed: KeyWatch) -> tuple[int | None, Callable[[bool], KeyView]]:
        """The storage work of the key's next read, recording the watch first if it has none.

        With the generation of the record it makes (None: it makes none).
        """
        storage, key_ref = self._storage, keyed.key_ref
        read, record_watch = next(
            (readers for prefix, readers in self._readers.items() if key_ref[1].startswith(prefix)),
            (read_key, watch_key),
        )
        if not self._records or keyed.generation is not None:
            return None, lambda may_block: read(storage, key_ref, may_block=may_block)
        generation = next(self._generations)
        server_id, lifetime_us = self._server_id, self._lifetime_us

        def record(may_block: bool) -> KeyView:
            return record_watch(
                storage,
                key_ref,
                server_id=server_id,
                generation=generation,
                lifetime_us=lifetime_us,
                may_block=may_block,
            )

        return generation, record

    def _deliver(self, keyed: KeyWatch, number: int, view: KeyView) -> None:
        keyed.last = view
        left = math.inf if view.expires_in is None else view.expires_in
        keyed.last_until = asyncio.get_running_loop().time() + left
        for watcher in keyed.watchers:
            if (
                number > watcher.since
                and not watcher.answer.done()
                and delivers(view.version, watcher.after_version, fresh=watcher.fresh)
            ):
                self._pace(functools.partial(_answer, watcher, view))
        self._time(keyed, view.expires_in)

    def _fail(self, keyed: KeyWatch, number: int, error: Exception) -> None:
        """The read failed: its watchers are answered with the error (503 for an outage)."""
        if not isinstance(error, ApiError):
            log.error("reading %s for its watchers failed", keyed.key_ref[1], exc_info=error)
            error = ApiError.internal()
        for watcher in keyed.watchers:
            if number > watcher.since and not watcher.answer.done():
                watcher.answer.set_exception(error)

    def _time(self, keyed: KeyWatch, expires_in: float | None) -> None:
        """Read the key again when its soonest lease expires (a millisecond after)."""
        if keyed.timer is not None:
            keyed.timer.cancel()
            keyed.timer = None
        if expires_in is not None and keyed.watchers:
            loop = asyncio.get_running_loop()
            keyed.timer = loop.call_later(max(0.0, expires_in) + 0.001, self._expired, keyed)

    def _expired(self, keyed: KeyWatch) -> None:
        """The key's soonest lease has expired: its version moved, with no write to say so."""
        keyed.timer = None
        keyed.signals += 1
        self._read_soon(keyed)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what wakes keys --------------------------------------------------------------------

    def changed(self, key_ref: KeyRef) -> None:
        """A transaction of this server moved the key's version (called from any thread)."""
        if self._loop is None or key_ref not in self._keys:
            return
        self._on_loop(self._wake, key_ref)

    def _on_loop(self, callback: Callable[..., None], *args: Any) -> None:
        """Call `callback` now if on the running loop, else as soon as the loop runs it."""
        loop = self._loop
        assert loop is not None  # noqa: S101 - set by the first watch
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            callback(*args)
        else:
            loop.call_soon_threadsafe(callback, *args)

    def changed_elsewhere(self, project_id: int, key: str) -> None:
        """Another server moved the key's version and said so (on the loop)."""
        self._wake((project_id, key))

    def _wake(self, key_ref: KeyRef) -> None:
        keyed = self._keys.get(key_ref)
        if keyed is None:
            return
        keyed.signals += 1  # the last read is no proof of the key's state any more
        if keyed.watchers:
            self._read_soon(keyed)

    def poll(self) -> None:
        """Read every watched key (SQLite shared by several servers: nobody tells us)."""
        for keyed in list(self._keys.values()):
            keyed.signals += 1  # another server may have changed it
            if keyed.watchers:
                self._read_soon(keyed)

    def reconnected(self) -> None:
        """The listener came back: record every watched key again and read it.

        Announcements made meanwhile are lost, and the records themselves may have been
        purged as a dead server's while this one could not beat.
        """
        for keyed in list(self._keys.values()):
            keyed.epoch += 1
            keyed.signals += 1  # a change may have gone unannounced meanwhile
            if keyed.watchers:
                keyed.generation = None
                self._read_soon(keyed)

    def close(self) -> None:
        """The server is shutting down: answer every watcher now, with a fresh state.

        Callable from any thread.
        """
        self._closing = True
        if self._loop is not None:  # else no watch ever came
            self._on_loop(self._answer_all)

    def _answer_all(self) -> None:
        for keyed in list(self._keys.values()):
            for watcher in keyed.watchers:
                watcher.fresh = True
                watcher.since = keyed.reads
            if keyed.watchers:
                self._read_soon(keyed)

    async def tidy(self) -> None:
        """Forget the watch records of keys nobody has watched here for `linger_seconds`."""
        if not self._keys:
            return
        now = asyncio.get_running_loop().time()
        done: list[tuple[int, str, int]] = []
        for key_ref, keyed in list(self._keys.items()):
            idle = keyed.idle_since
            if keyed.watchers or keyed.reading or idle is None or now - idle < self._linger:
                continue
            del self._keys[key_ref]  # a watcher that comes now records the key again
            if keyed.generation is not None:
                done.append((*key_ref, keyed.generation))
        if not done:
            return
        storage, server_id = self._storage, self._server_id
        try:
            await self._run(lambda _may_block: storage.unwatch(server_id, done))
        except Exception as exc:  # noqa: BLE001 - a stale record costs others a NOTIFY
            log.warning("forgetting %d watch records failed: %s", len(done), exc)

    def stop(self) -> None:
        """Cancel every timer and read: the server's loop is ending.

        A watcher still waiting for a read is answered 503, never left hanging.
        """
        gone = ApiError.unavailable("the server is shutting down; watch again")
        for keyed in self._keys.values():
            if keyed.timer is not None:
                keyed.timer.cancel()
            for watcher in keyed.watchers:
                if not watcher.answer.done():
                    watcher.answer.set_exception(gone)
        for task in self._tasks:
            task.cancel()


def _answer(watcher: Watcher, view: KeyView) -> None:
    """Answer `watcher` with `view`, unless it has left (or been answered) meanwhile."""
    if not watcher.answer.done():
        watcher.answer.set_result(view)
