"""The explorer on PostgreSQL: real transactions in threads, stopped at each read of the clock.

The test database's `volcano_clock_us()` (the one function every statement of the server reads
time through) is replaced by one that reads the explorer's virtual clock from a table, then
stops until the explorer lets it go on: the explorer's own session holds an advisory lock per
backend (`_GATE`, pid), and the clock waits for a shared hold of it. So a transaction the
schedule starts runs until it has read the clock (and stops, paused), or is blocked on a row
lock, or is done; `quiesce` waits for exactly that, watching `pg_stat_activity`. The schedule can
then move time, run other transactions, and only later let the paused one go on, which is what
a server descheduled between two statements does to a real database.

The check a transaction makes of the clock just before its COMMIT (`WriteTx.commit_before`, in
the COMMIT's own message) stops at the gate *before* it reads the clock, never between its read
and the COMMIT: the explorer stalls a transaction before its commit, not inside PostgreSQL's
commit (that window, the commit's flush, is the one docs/safety.md leaves open).

NOTIFY still travels through PostgreSQL: one LISTEN connection of the explorer's collects the
announcements (hand-offs and changes of watched keys), and the schedule decides when each
reaches the servers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from tests.explorer._checks import LeaseRow, Reader
from tests.explorer._loop import VirtualLoop
from tests.explorer._world import LOSING, Pending, World, clock_of
from volcano_server.storage import Listener, Storage
from volcano_server.storage._postgres import (
    CHANGE_CHANNEL,
    HANDOFF_CHANNEL,
    PostgresStorage,
    heard,
)

__all__ = ["PostgresReader", "postgres_world"]

_GATE = 7919
_CLOCK = """
CREATE OR REPLACE FUNCTION volcano_clock_us() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_us bigint;
BEGIN
    SELECT c.now_us INTO now_us FROM volcano_explorer_clock c;
    -- The clock has been read; stop here while the explorer holds this backend's gate.
    PERFORM pg_advisory_lock_shared(7919, pg_backend_pid());
    PERFORM pg_advisory_unlock_shared(7919, pg_backend_pid());
    RETURN now_us;
END $$
"""
# The check just before COMMIT (`volcano_still_before`): the gate first, then the clock.
_STILL_BEFORE = """
CREATE OR REPLACE FUNCTION volcano_still_before(p_bound bigint) RETURNS void LANGUAGE plpgsql
VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_lock_shared(7919, pg_backend_pid());
    PERFORM pg_advisory_unlock_shared(7919, pg_backend_pid());
    IF (SELECT c.now_us FROM volcano_explorer_clock c) >= p_bound THEN
        RAISE EXCEPTION USING ERRCODE = 'VO001', MESSAGE = 'explorer: stale clock';
    END IF;
END $$
"""
_QUIET_SECONDS = 30.0


class _Storage(PostgresStorage):
    """The server's storage, telling the explorer which backend each thread's transaction uses,
    and taking announcements from the explorer instead of a LISTEN of its own."""

    def __init__(self, url: str, gates: ClockGates, server: str) -> None:
        super().__init__(
            url,
            pool_size=16,
            min_connections=1,
            lock_timeout=600,
            statement_timeout=600,
            silence_timeout=600,
            pool_timeout=30,
            monotonic=gates.time,  # the servers' loop time: an answer's age is virtual too
        )
        self._gates = gates
        self._server = server

    def _checked_out(self) -> psycopg.Connection[Any]:
        conn = super()._checked_out()
        self._gates.checked_out(conn.info.backend_pid)
        return conn

    async def listen(self, listener: Listener) -> None:
        self._gates.listeners[self._server] = listener
        listener.connected()
        await self._gates.forever()


class ClockGates:
    """The explorer's session: the virtual clock, a gate per backend, the announcements."""

    def __init__(self, url: str, loop: VirtualLoop) -> None:
        self._loop = loop
        self._conn = psycopg.connect(url, autocommit=True)
        self._lock = threading.Lock()
        self._gated: set[int] = set()
        self._pids: dict[int, int] = {}  # thread ident -> backend pid
        self.listeners: dict[str, Listener] = {}
        self.announcements: list[tuple[str, str]] = []  # (channel, payload)
        self._sentinels = 0
        self._conn.execute("CREATE TABLE volcano_explorer_clock (now_us bigint NOT NULL)")
        self._conn.execute("INSERT INTO volcano_explorer_clock VALUES (%s)", (clock_of(loop)(),))
        self._conn.execute(_CLOCK)
        self._conn.execute(_STILL_BEFORE)
        self._listener = psycopg.connect(url, autocommit=True)
        self._listener.execute(f"LISTEN {HANDOFF_CHANNEL}")
        self._listener.execute(f"LISTEN {CHANGE_CHANNEL}")
        loop.on_time = lambda _now: self.set_clock(clock_of(loop)())

    def time(self) -> float:
        """The virtual loop's time (any thread may read it)."""
        return self._loop.time()

    async def forever(self) -> None:
        await self._loop.create_future()

    def set_clock(self, now_us: int) -> None:
        """Move the database's (virtual) clock; every thread is quiet when this is called."""
        with self._lock:
            self._conn.execute("UPDATE volcano_explorer_clock SET now_us = %s", (now_us,))

    def checked_out(self, pid: int) -> None:
        """A transaction's thread took a connection: its clock reads stop at the gate."""
        with self._lock:
            if pid not in self._gated:
                self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (_GATE, pid))
                self._gated.add(pid)
            self._pids[threading.get_ident()] = pid

    def start(self, pending: Pending) -> None:
        """Run `pending` in a thread of its own."""

        def run() -> None:
            LOSING.set(pending.lose_answer)
            try:
                pending.outcome = ("ok", pending.work(True))
            except BaseException as exc:
                pending.outcome = ("error", exc)

        pending.thread = threading.Thread(target=run, name=f"explorer {pending}", daemon=True)
        pending.thread.start()

    def resume(self, pending: Pending) -> None:
        """Let a paused transaction read past its clock; the gate closes behind it."""
        pid = self._pid(pending)
        with self._lock:
            self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_GATE, pid))
            # Queued behind the transaction's shared hold: granted once it has passed.
            self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (_GATE, pid))

    def paused(self, running: list[Pending]) -> list[Pending]:
        """The running transactions stopped at a clock read."""
        waits = self._waits(running)
        return [p for p in running if waits.get(self._pid(p, None)) == "advisory"]

    def quiesce(self, running: list[Pending]) -> None:
        """Wait until every running transaction is done, paused or blocked on a lock."""
        deadline = time.monotonic() + _QUIET_SECONDS
        quiet_polls = 0
        while quiet_polls < 2:
            if time.monotonic() > deadline:
                raise AssertionError(f"storage work never came to rest: {running}")
            waits = self._waits(running)
            if all(
                p.outcome is not None or waits.get(self._pid(p, None)) is not None for p in running
            ):
                quiet_polls += 1
            else:
                quiet_polls = 0
            time.sleep(0.002)
        for pending in running:
            if pending.outcome is not None and pending.thread is not None:
                pending.thread.join()
        self._collect_announcements()

    def _waits(self, running: list[Pending]) -> dict[int, str]:
        pids = [pid for p in running if (pid := self._pid(p, None)) is not None]
        if not pids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                "SELECT pid, wait_event FROM pg_stat_activity"
                " WHERE pid = ANY(%s) AND state = 'active' AND wait_event_type = 'Lock'"
                # Granted its lock, not yet run again (a loaded machine): not at rest.
                " AND cardinality(pg_blocking_pids(pid)) > 0",
                (pids,),
            ).fetchall()
        return dict(rows)

    def _pid(self, pending: Pending, default: Any = KeyError) -> Any:
        ident = pending.thread.ident if pending.thread is not None else None
        if ident in self._pids:
            return self._pids[ident]
        if default is KeyError:
            raise KeyError(f"{pending} has no connection yet")
        return default

    def _collect_announcements(self) -> None:
        """Every announcement committed so far, however slowly NOTIFY travels.

        A sentinel notified after the transactions came to rest arrives after all of theirs
        (a listener hears notifications in commit order), so the schedule's next choice never
        depends on how fast the machine is: a fixed wait here made Hypothesis's replays of a
        failing schedule draw differently under load (FlakyStrategyDefinition) and lose it.
        """
        self._sentinels += 1
        sentinel = f"explorer sentinel {self._sentinels}"
        with self._lock:
            self._conn.execute("SELECT pg_notify(%s, %s)", (HANDOFF_CHANNEL, sentinel))
        for notify in self._listener.notifies(timeout=_QUIET_SECONDS):
            if notify.payload == sentinel:
                return
            self.announcements.append((notify.channel, notify.payload))
        raise AssertionError(f"NOTIFY never brought back {sentinel!r}")

    def deliver(self, index: int) -> None:
        """One announcement reaches every server (each takes only what concerns it), on the
        servers' loop, as a real listener hears it (`PostgresStorage.listen`): the watches
        start their reads there."""
        channel, payload = self.announcements.pop(index)
        for listener in list(self.listeners.values()):
            self._loop.call_soon(heard, listener, channel, payload)

    def kill(self, server: str, running: list[Pending]) -> None:
        """A server died: its transactions' connections go with it."""
        self.listeners.pop(server, None)
        pids = [pid for p in running if (pid := self._pid(p, None)) is not None]
        with self._lock:
            for pid in pids:
                self._conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for pending in running:
            if pending.thread is not None:
                pending.thread.join(timeout=_QUIET_SECONDS)

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._listener.close()
        with contextlib.suppress(psycopg.Error):
            self._conn.close()


class PostgresReader(Reader):
    """Committed rows, through a connection of its own (it never reads the clock)."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)

    def key(self, key: str) -> tuple[int, int] | None:
        row = self._conn.execute(
            "SELECT fencing_token, limit_count FROM locks WHERE key = %s AND fencing_token > 0",
            (key,),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def leases(self, key: str) -> list[LeaseRow]:
        rows = self._conn.execute(
            "SELECT fencing_token, owner_token, expires_at_us FROM leases WHERE key = %s"
            " ORDER BY fencing_token",
            (key,),
        ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def waiters(self, key: str) -> list[tuple[int, str, str, str]]:
        rows = self._conn.execute(
            "SELECT seq, owner_token, state, server_id FROM lock_waiters WHERE key = %s"
            " ORDER BY seq",
            (key,),
        ).fetchall()
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    def alive_servers(self, now_us: int) -> set[str]:
        rows = self._conn.execute(
            "SELECT server_id FROM servers WHERE alive_until_us > %s", (now_us,)
        ).fetchall()
        return {row[0] for row in rows}

    def saved_version(self, key: str) -> int:
        row = self._conn.execute(
            "SELECT version FROM locks WHERE key = %s AND fencing_token > 0", (key,)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def labels(self, key: str) -> dict[int, str | None]:
        rows = self._conn.execute(
            "SELECT fencing_token, label FROM leases WHERE key = %s", (key,)
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    def modes(self, key: str) -> dict[int, bool]:
        rows = self._conn.execute(
            "SELECT fencing_token, shared FROM leases WHERE key = %s", (key,)
        ).fetchall()
        return {row[0]: bool(row[1]) for row in rows}

    def close(self) -> None:
        self._conn.close()


@contextlib.contextmanager
def postgres_world(url: str, **options: Any) -> Iterator[tuple[World, PostgresReader]]:
    """A world on a fresh PostgreSQL database at `url` (already migrated by the caller)."""
    loop = VirtualLoop()
    PostgresStorage(url).close()  # migrate, so the clock function can be replaced
    gates = ClockGates(url, loop)

    def open_postgres(database_url: str, server: str | None) -> Storage:
        if server is None:  # the world's own, for keys: never gated
            return PostgresStorage(database_url)
        return _Storage(database_url, gates, server)

    world = World("postgres", url, loop=loop, open_storage=open_postgres, gates=gates, **options)
    reader = PostgresReader(url)
    try:
        yield world, reader
    finally:
        reader.close()
        world.shutdown()
