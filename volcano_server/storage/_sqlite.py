"""SQLite storage: the default, one database file shared by any number of server processes.

- WAL journal, so readers never wait for the writer.
- Durable by default ("full"): a commit that a client will be told about (a lease, a stored
  outcome, keys) is on disk before the answer is sent: the WAL is fsynced after it, as
  SQLite's `synchronous=FULL` does after every commit, so an acknowledged lease survives
  `kill -9` and also power loss or an OS crash. Fencing tokens must never be issued twice, and a
  lost commit after a power cut would reissue one. The fsync is a group commit (`_syncer`): a
  writer commits, releases the write lock and waits while one syncer thread fdatasyncs the WAL
  for every commit made meanwhile, so concurrent writers share one fsync. On the event loop
  (`may_block=False`) nothing waits: the server awaits `synced()` before it answers. Commits of
  queue and heartbeat rows skip the fsync (their requests die with the server anyway); the
  next durable commit's fsync carries them to the disk too. The connections themselves run
  `synchronous=NORMAL`, which keeps the database consistent through a power cut and syncs at
  checkpoints. "normal" (what `--sqlite-synchronous normal` selects) never fsyncs after a
  commit: that survives `kill -9` of the server, since the WAL is in the OS page cache, but not
  a power cut.
- Writes are `BEGIN IMMEDIATE` transactions: the write lock is taken first, so two processes never
  decide on stale reads. Within a process the writer is shared behind a lock (SQLite allows one
  writer anyway, and its busy handler polls); other processes wait up to `busy_timeout`, after
  which the request gets 503 rather than hanging.
- `runs_inline`: the server runs operations on its event loop (no thread hop) with
  `may_block=False`.
  Then nothing waits: a busy process lock, a busy file (another process writing) or no free
  reader raises WouldBlock before anything changed, and the server repeats the transaction in a
  worker thread, where the waits above apply.
- No push between processes: a server polls for the hand-offs other processes on the same file
  make to its waiters (`listen` returns at once).
- The clock is this machine's (every process on one file shares it), read after the write lock
  is taken.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ._base import (
    ExpiredLease,
    KeyRecord,
    Lease,
    Listener,
    LockRow,
    LockSummary,
    OnLocked,
    StaleClock,
    StorageUnavailable,
    StoredOutcome,
    Synchronous,
    Waiter,
    WaiterState,
    WouldBlock,
)
from ._keys import KeyAdmin, Sql
from ._sql import (
    EXPIRED_LEASES,
    EXPIRED_MEMBERS,
    FIND_WAITER,
    HOLDERS_PAGE,
    IDLE_KEYS,
    LEASE_COLUMNS,
    LEASE_COUNTS,
    LEASES,
    QUEUED,
    SOONEST_LEASES,
    TOUCH_SERVER,
    WAITING_COUNT,
    bump_groups,
    bump_versions,
    delete_expired,
    delete_expired_members,
    delete_idle,
    ended_of,
    leases_of,
    listed_keys,
    listed_params,
    lock_writes,
    raise_floors,
    unavailable_when,
)
from ._sqlite_groups import SQLiteGroups
from ._syncer import Syncer

__all__ = ["SQLiteStorage"]

log = logging.getLogger("volcano_server")

# Schema changes, by the version they bring the database to; each runs once, in order, so a
# database of any earlier version is upgraded in place.
_MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE IF NOT EXISTS projects (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_hash BLOB PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects (id),
    kind TEXT NOT NULL CHECK (kind IN ('anon', 'service')),
    created_at_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS locks (
    project_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    owner_token TEXT,
    expires_at_us INTEGER,
    ttl_seconds REAL,
    PRIMARY KEY (project_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS request_outcomes (
    project_id INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    status INTEGER NOT NULL,
    body BLOB NOT NULL,
    retry_after INTEGER,
    expires_at_us INTEGER NOT NULL,
    PRIMARY KEY (project_id, request_id)
);
CREATE INDEX IF NOT EXISTS request_outcomes_by_expiry ON request_outcomes (expires_at_us);
""",
    # Key lifecycle: public ids, revocation, last use, and an audit trail of key changes.
    2: """
ALTER TABLE api_keys ADD COLUMN key_id TEXT;
UPDATE api_keys SET key_id = 'key_' || lower(hex(substr(key_hash, 1, 8)));
CREATE UNIQUE INDEX api_keys_by_id ON api_keys (key_id);
ALTER TABLE api_keys ADD COLUMN last_used_at_us INTEGER;
ALTER TABLE api_keys ADD COLUMN revoked_at_us INTEGER;
CREATE TABLE key_events (
    id INTEGER PRIMARY KEY,
    at_us INTEGER NOT NULL,
    action TEXT NOT NULL,
    key_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    project_id INTEGER NOT NULL REFERENCES projects (id),
    actor TEXT NOT NULL
);
INSERT INTO key_events (at_us, action, key_id, kind, project_id, actor)
    SELECT created_at_us, 'created', key_id, kind, project_id, 'before the audit trail'
    FROM api_keys ORDER BY created_at_us;
""",
    # Waiting for a lock: the queue of each key, and the servers holding its requests.
    3: """
CREATE TABLE lock_waiters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    owner_token TEXT NOT NULL,
    ttl_seconds REAL NOT NULL,
    server_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'reserved', 'away')),
    until_us INTEGER,
    UNIQUE (project_id, key, owner_token)
);
CREATE INDEX lock_waiters_in_line ON lock_waiters (project_id, key, seq);
CREATE TABLE servers (
    server_id TEXT PRIMARY KEY,
    alive_until_us INTEGER NOT NULL
) WITHOUT ROWID;
""",
    # Issue 19: a lease handed to a waiting request is "undelivered" until its client has it.
    # Issue 21: a key has a limit and any number of leases up to it (semaphores), in a table
    # of their own; a key's live lease moves there.
    4: """
ALTER TABLE request_outcomes ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE locks ADD COLUMN limit_count INTEGER NOT NULL DEFAULT 1;
CREATE TABLE leases (
    project_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    owner_token TEXT NOT NULL,
    expires_at_us INTEGER NOT NULL,
    ttl_seconds REAL NOT NULL,
    label TEXT,
    PRIMARY KEY (project_id, key, fencing_token)
) WITHOUT ROWID;
INSERT INTO leases (project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds)
    SELECT project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds FROM locks
    WHERE owner_token IS NOT NULL AND expires_at_us IS NOT NULL AND ttl_seconds IS NOT NULL;
ALTER TABLE locks DROP COLUMN owner_token;
ALTER TABLE locks DROP COLUMN expires_at_us;
ALTER TABLE locks DROP COLUMN ttl_seconds;
""",
    # Issue 25: when each lease was granted, so that whichever server ends it can tell how long
    # it was held (a metric). NULL only for a slot reserved for a waiter, not yet taken; a lease
    # granted before is dated from its last renewal (the latest it can have been granted).
    5: """
ALTER TABLE leases ADD COLUMN granted_at_us INTEGER;
UPDATE leases SET granted_at_us = expires_at_us - CAST(round(ttl_seconds * 1000000) AS INTEGER);
""",
    # Issue 22: a key's version (changes of its holders; it starts at the last fencing token,
    # which no reader has seen as a version), and a waiter's label for the lease it is given.
    6: """
ALTER TABLE locks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
UPDATE locks SET version = fencing_token;
ALTER TABLE lock_waiters ADD COLUMN label TEXT;
""",
    # Issue 33: storage bounded. Expired leases and keys unused for long are purged; a key's
    # row remembers when it last changed, and a project the highest version any purged key of
    # it had, where a key used again after its row was purged starts.
    7: """
ALTER TABLE projects ADD COLUMN key_floor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE locks ADD COLUMN updated_at_us INTEGER NOT NULL DEFAULT 0;
""",
    # Issue 37: groups (kept once deleted, so their versions and fencing tokens never go back)
    # and their members, each a lease on its group with public capabilities.
    8: """
CREATE TABLE groups (
    project_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    version INTEGER NOT NULL,
    live INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
) WITHOUT ROWID;
CREATE TABLE group_members (
    project_id INTEGER NOT NULL,
    group_name TEXT NOT NULL,
    member TEXT NOT NULL,
    owner_token TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    expires_at_us INTEGER NOT NULL,
    ttl_seconds REAL NOT NULL,
    capabilities_kind TEXT CHECK (capabilities_kind IN ('json', 'bytes')),
    capabilities BLOB,
    capabilities_size INTEGER NOT NULL,
    granted_at_us INTEGER NOT NULL,
    PRIMARY KEY (project_id, group_name, member)
);
CREATE INDEX group_members_by_expiry ON group_members (project_id, group_name, expires_at_us);
""",
    # Issue 37: shared locks. Each lease is held shared or exclusive (every lease before was
    # exclusive), and a waiter asks for one or the other.
    9: """
ALTER TABLE leases ADD COLUMN shared INTEGER NOT NULL DEFAULT 0 CHECK (shared IN (0, 1));
ALTER TABLE lock_waiters ADD COLUMN shared INTEGER NOT NULL DEFAULT 0 CHECK (shared IN (0, 1));
""",
}
_SCHEMA_VERSION = max(_MIGRATIONS)

# Error codes that mean "the database cannot serve right now", answered with 503.
_UNAVAILABLE = frozenset(
    {
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "SQLITE_IOERR",
        "SQLITE_FULL",
        "SQLITE_CANTOPEN",
        "SQLITE_PROTOCOL",
        "SQLITE_READONLY",
    }
)


def _now_us() -> int:
    return time.time_ns() // 1000


class _Tx(SQLiteGroups):
    """A transaction on one connection (read-only or read-write, by how it was begun)."""

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], int]) -> None:
        self._conn = conn
        self._now = clock()
        # Whether the commit must reach the disk before it returns: anything a client may be
        # told about (a lease, a stored outcome, keys). Queue and heartbeat rows need not be:
        # their requests die with a crash anyway.
        self.durable = False
        self.committed_us: int | None = None
        self.committed_at: float | None = None
        self.before_us: int | None = None  # `commit_before`'s bound

    def commit_before(self, bound_us: int) -> None:
        if self.before_us is None or bound_us < self.before_us:
            self.before_us = bound_us

    def check_clock(self, now_us: int) -> None:
        """StaleClock if `now_us`, read just before COMMIT, is past `commit_before`'s bound."""
        if self.before_us is not None and now_us >= self.before_us:
            raise StaleClock("a lease this transaction kept live expired since its clock read")

    def now_us(self) -> int:
        return self._now

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        self.durable = True
        return self._conn.execute(sql, params)

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        row = self._conn.execute(
            "SELECT fencing_token, limit_count, version FROM locks"
            " WHERE project_id = ? AND key = ?",
            (project_id, key),
        ).fetchone()
        if row is None:
            floor = self.key_floor(project_id)
            return LockRow.purged(project_id, key, floor) if floor else None
        leases = leases_of(self._conn.execute(LEASES, (project_id, key)))
        return LockRow(project_id, key, row[0], row[1], leases, row[2])

    def key_floor(self, project_id: int) -> int:
        """The highest version a purged key of the project had (0: none was purged)."""
        found = self._conn.execute(
            "SELECT key_floor FROM projects WHERE id = ?", (project_id,)
        ).fetchone()
        return int(found[0]) if found is not None else 0

    def key_count(self, project_id: int) -> int:
        (count,) = self._conn.execute(
            "SELECT count(*) FROM locks WHERE project_id = ?", (project_id,)
        ).fetchone()
        return int(count)

    def load_locks(
        self,
        project_id: int,
        keys: Sequence[str],
        *,
        owners: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, LockRow | None]:
        # BEGIN IMMEDIATE has locked every row already; the clock was read after it.
        marks = ", ".join("?" * len(keys))
        rows = self._conn.execute(
            "SELECT key, fencing_token, limit_count, version FROM locks"  # noqa: S608 - marks
            f" WHERE project_id = ? AND key IN ({marks})",
            (project_id, *keys),
        ).fetchall()
        owners = owners or {}
        whole = [key for key in keys if key not in owners]
        pairs = [(key, owner) for key in keys if key in owners for owner in sorted(owners[key])]
        leases: dict[str, list[Sequence[Any]]] = {}
        reads: list[Iterable[Sequence[Any]]] = []
        if whole:
            reads.append(
                self._conn.execute(
                    f"SELECT key, {LEASE_COLUMNS} FROM leases"  # noqa: S608 - constants, marks
                    f" WHERE project_id = ? AND key IN ({', '.join('?' * len(whole))})",
                    (project_id, *whole),
                )
            )
        if pairs:
            reads.append(
                self._conn.execute(
                    f"SELECT key, {LEASE_COLUMNS} FROM leases"  # noqa: S608 - constants, marks
                    " WHERE project_id = ? AND (key, owner_token) IN"
                    f" (VALUES {', '.join(['(?, ?)'] * len(pairs))})",
                    (project_id, *(value for pair in pairs for value in pair)),
                )
            )
        for read in reads:
            for key, *lease in read:
                leases.setdefault(key, []).append(lease)
        for listed in leases.values():
            listed.sort(key=lambda lease: lease[0])  # by fencing token, as LEASES reads them
        found: dict[str, LockRow | None] = dict.fromkeys(keys)
        for key, token, limit, version in rows:
            found[key] = LockRow(
                project_id, key, token, limit, leases_of(leases.get(key, ())), version
            )
        return found

    def waiting_count(self, project_id: int, key: str) -> int:
        (count,) = self._conn.execute(WAITING_COUNT, (project_id, key)).fetchone()
        return int(count)

    def live_counts(self, project_id: int, key: str) -> tuple[int, int | None]:
        now = self._now
        live, _, highest = self._conn.execute(
            LEASE_COUNTS, (now, now, now, project_id, key)
        ).fetchone()
        return int(live), highest

    def summarize(self, project_id: int, key: str, *, holders: int) -> LockSummary | None:
        # Four local reads, none of which grows with the leases past `holders`.
        fields = self._conn.execute(
            "SELECT fencing_token, limit_count, version FROM locks"
            " WHERE project_id = ? AND key = ?",
            (project_id, key),
        ).fetchone()
        if fields is None:
            floor = self.key_floor(project_id)
            return LockSummary.purged(project_id, key, floor) if floor else None
        now = self._now
        live, expired, highest = self._conn.execute(
            LEASE_COUNTS, (now, now, now, project_id, key)
        ).fetchone()
        soonest = leases_of(self._conn.execute(SOONEST_LEASES, (project_id, key, now, holders)))
        token, limit, version = fields
        waiting = self.waiting_count(project_id, key)
        return LockSummary(
            project_id, key, token, limit, version + expired, soonest, live, highest, waiting
        )

    def list_locks(
        self, project_id: int, *, prefix: str, after: str, limit: int, holders: int
    ) -> list[LockSummary]:
        params = listed_params(project_id, self._now, prefix=prefix, after=after, limit=limit)
        keys = [key for (key,) in self._conn.execute(listed_keys(bounded=bool(prefix)), params)]
        listed = []
        for key in keys:  # local reads: no round trip to save
            summary = self.summarize(project_id, key, holders=holders)
            if summary is not None:
                listed.append(summary)
        return listed

    def list_holders(self, project_id: int, key: str, *, after: int, limit: int) -> list[Lease]:
        params = (project_id, key, after, self._now, limit)
        return list(leases_of(self._conn.execute(HOLDERS_PAGE, params)))

    def save_lock(self, row: LockRow, loaded: LockRow | None) -> None:
        self.durable = True
        for statement, params in lock_writes(row, loaded, self._now):
            self._conn.execute(statement, params)

    def save_locks(self, changes: Sequence[tuple[LockRow, LockRow | None]]) -> None:
        # Statements of one kind go to SQLite together; rows of different keys never conflict.
        self.durable = True
        grouped: dict[str, list[tuple[object, ...]]] = {}
        for row, loaded in changes:
            for statement, params in lock_writes(row, loaded, self._now):
                grouped.setdefault(statement, []).append(params)
        for statement, rows in grouped.items():
            self._conn.executemany(statement, rows)

    def claim_request(self, project_id: int, request_id: str) -> StoredOutcome | None:
        # BEGIN IMMEDIATE already serialises every writer on this file: nothing to reserve.
        row = self._conn.execute(
            "SELECT fingerprint, status, body, retry_after, expires_at_us, undelivered"
            " FROM request_outcomes WHERE project_id = ? AND request_id = ? AND expires_at_us > ?",
            (project_id, request_id, self._now),
        ).fetchone()
        if row is None:
            return None
        fingerprint, status, body, retry_after, expires_at_us, undelivered = row
        return StoredOutcome(
            fingerprint, status, body, retry_after, expires_at_us, bool(undelivered)
        )

    def save_outcome(self, project_id: int, request_id: str, outcome: StoredOutcome) -> None:
        self.durable = True
        self._conn.execute(
            "INSERT OR REPLACE INTO request_outcomes (project_id, request_id, fingerprint,"
            " status, body, retry_after, expires_at_us, undelivered)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                project_id,
                request_id,
                outcome.fingerprint,
                outcome.status,
                outcome.body,
                outcome.retry_after,
                outcome.expires_at_us,
                outcome.undelivered,
            ),
        )

    def queued(self, project_id: int, key: str, limit: int) -> list[Waiter]:
        rows = self._conn.execute(QUEUED, (self._now, project_id, key, limit)).fetchall()
        return [Waiter.from_row(row) for row in rows]

    def find_waiter(self, project_id: int, key: str, owner_token: str) -> Waiter | None:
        row = self._conn.execute(FIND_WAITER, (self._now, project_id, key, owner_token)).fetchone()
        return None if row is None else Waiter.from_row(row)

    def add_waiter(
        self,
        project_id: int,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        server_id: str,
        *,
        label: str | None = None,
        shared: bool = False,
        seq: int | None = None,
    ) -> int:
        cursor = self._conn.execute(
            "INSERT INTO lock_waiters (seq, project_id, key, owner_token, ttl_seconds, server_id,"
            " state, until_us, label, shared) VALUES (?, ?, ?, ?, ?, ?, 'waiting', NULL, ?, ?)",
            (seq, project_id, key, owner_token, ttl_seconds, server_id, label, shared),
        )
        assert cursor.lastrowid is not None  # noqa: S101 - an INSERT always has one
        return cursor.lastrowid

    def update_waiter(
        self,
        seq: int,
        *,
        state: WaiterState,
        until_us: int | None,
        server_id: str,
        ttl_seconds: float,
        label: str | None = None,
        shared: bool = False,
    ) -> None:
        self._conn.execute(
            "UPDATE lock_waiters SET state = ?, until_us = ?, server_id = ?, ttl_seconds = ?,"
            " label = ?, shared = ? WHERE seq = ?",
            (state, until_us, server_id, ttl_seconds, label, shared, seq),
        )

    def delete_waiter(self, project_id: int, key: str, owner_token: str) -> None:
        self._conn.execute(
            "DELETE FROM lock_waiters WHERE project_id = ? AND key = ? AND owner_token = ?",
            (project_id, key, owner_token),
        )

    def touch_server(self, server_id: str, alive_until_us: int) -> None:
        self._conn.execute(TOUCH_SERVER, (server_id, alive_until_us))

    def others_alive(self, server_id: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM servers WHERE server_id != ? AND alive_until_us > ? LIMIT 1",
            (server_id, self._now),
        ).fetchone()
        return row is not None

    def announce(self, server_id: str, seq: int) -> None:
        """Nothing to send: other processes on this file poll for their reservations."""

    def watched_by(self, project_id: int, key: str) -> tuple[str, ...]:
        """Nobody: other processes on this file poll the keys they watch."""
        return ()

    def watch(self, project_id: int, key: str, server_id: str, generation: int) -> None:
        """Nothing to record: other processes on this file poll the keys they watch."""

    def announce_change(self, project_id: int, key: str) -> None:
        """Nothing to send: other processes on this file poll the keys they watch."""


class SQLiteStorage(KeyAdmin):
    """Lock storage in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = 5.0,
        readers: int = 4,
        clock: Callable[[], int] = _now_us,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = str(path)
        self.monotonic = monotonic
        self._clock = clock  # microseconds since the epoch; tests shift it to skip ahead
        self._synchronous = synchronous
        self._busy_ms = round(busy_timeout * 1000)
        self.url_for_display = f"sqlite:///{self._path}"
        self.runs_inline = True
        self.pushes_handoffs = False
        # Storage work in threads at once (`_admission`): SQLite has one writer, and Python
        # threads beyond two only take the GIL from each other and from the event loop.
        self.connections = min(readers, 2)
        self._write_lock = threading.Lock()
        self._readers: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        with _mapped_errors():
            _create_private(self._path)
            self._writer = self._connect()
            self._writer_now = self._connect(busy_ms=0)  # may_block=False: fail rather than wait
            self._migrate()
            self._wal = _open_wal(self._path) if synchronous == "full" else None
            self._syncer = Syncer(self._wal) if self._wal is not None else None
            for _ in range(readers):
                self._readers.put(self._connect())

    def _connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        busy_ms = self._busy_ms if busy_ms is None else busy_ms
        conn = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, timeout=busy_ms / 1000
        )
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable commits fsync the WAL themselves
        self._all.append(conn)
        return conn

    def _migrate(self) -> None:
        with self._write_lock:
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")  # several servers starting at once migrate in turn
            try:
                _upgrade(conn, self._path)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @contextmanager
    def write(
        self,
        *,
        may_block: bool = True,
        key: tuple[int, str] | None = None,
        on_locked: OnLocked | None = None,
    ) -> Iterator[_Tx]:
        """One BEGIN IMMEDIATE transaction on the shared writer connection.

        `key` and `on_locked` are moot: the write lock, held to the end, is the only lock.

        A durable commit is on disk when this returns if `may_block`; else once `synced()`
        returns.
        """
        if not self._write_lock.acquire(blocking=may_block):
            raise WouldBlock
        try:
            with _mapped_errors():
                self._check_open()
                conn = self._writer if may_block else self._writer_now
                _begin_immediate(conn, nonblocking=not may_block)
                try:
                    tx = _Tx(conn, self._clock)
                    yield tx
                    tx.check_clock(self._clock())
                    conn.execute("COMMIT")
                    tx.committed_at = self.monotonic()
                    tx.committed_us = self._clock()
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                syncer = self._syncer if tx.durable else None
                # Taken before the write lock is released: the next writer's ticket is later.
                ticket = syncer.committed() if syncer is not None else 0
        finally:
            self._write_lock.release()
        if syncer is not None and may_block:
            # Outside the write lock: other writers join this fsync.
            syncer.block_until_synced(ticket)

    async def synced(self, *, here: bool = False) -> None:
        """Return once every durable commit so far is on disk (the syncer's group fsync).

        `here`: fsync on the calling thread if no fsync is under way (see `_syncer`).
        """
        if self._syncer is not None:
            await self._syncer.synced(self._syncer.last(), here=here)

    @contextmanager
    def read(self, *, may_block: bool = True) -> Iterator[_Tx]:
        """A read snapshot on a pooled reader connection."""
        self._check_open()
        try:
            conn = self._readers.get() if may_block else self._readers.get_nowait()
        except queue.Empty:
            raise WouldBlock from None
        try:
            with _mapped_errors():
                conn.execute("BEGIN")
                try:
                    yield _Tx(conn, self._clock)
                finally:
                    conn.execute("COMMIT")
        finally:
            self._readers.put(conn)

    def find_key(self, key_hash: bytes, *, may_block: bool = True) -> KeyRecord | None:
        """The key with this hash, if any."""
        with self.read(may_block=may_block) as tx:
            row = tx.execute(
                "SELECT project_id, kind, revoked_at_us IS NOT NULL FROM api_keys"
                " WHERE key_hash = ?",
                (key_hash,),
            ).fetchone()
        return KeyRecord.from_row(key_hash, row)

    def check(self) -> None:
        """Raise StorageUnavailable unless the database file answers a query."""
        with self.read() as tx:
            tx.execute("SELECT count(*) FROM projects WHERE id = 0").fetchone()

    @contextmanager
    def _admin(self) -> Iterator[tuple[Sql, int]]:
        with self.write() as tx:
            yield (lambda sql, params: tx.execute(sql, params).fetchall()), tx.now_us()

    def purge_outcomes(self, limit: int) -> int:
        """Delete up to `limit` outcomes whose retention has ended."""
        with self.write() as tx:
            cursor = tx.execute(
                "DELETE FROM request_outcomes WHERE rowid IN"
                " (SELECT rowid FROM request_outcomes WHERE expires_at_us <= ? LIMIT ?)",
                (tx.now_us(), limit),
            )
            return cursor.rowcount

    def purge_leases(self, limit: int) -> list[ExpiredLease]:
        """Delete up to `limit` expired leases, moving their keys' versions past them."""
        with self.write() as tx:
            expired = tx.execute(EXPIRED_LEASES, (tx.now_us(), limit)).fetchall()
            for statement, params in delete_expired(expired) + bump_versions(expired):
                tx.execute(statement, params)
            return ended_of(expired)

    def purge_members(self, limit: int) -> int:
        """Delete up to `limit` expired group members, moving their groups' versions past them."""
        with self.write() as tx:
            expired = tx.execute(EXPIRED_MEMBERS, (tx.now_us(), limit)).fetchall()
            for statement, params in delete_expired_members(expired) + bump_groups(expired):
                tx.execute(statement, params)
            return len(expired)

    def purge_keys(self, idle_us: int, limit: int) -> int:
        """Delete up to `limit` keys unused for `idle_us`, raising their projects' floors."""
        with self.write() as tx:
            idle = tx.execute(IDLE_KEYS, (tx.now_us() - idle_us, limit)).fetchall()
            for statement, params in delete_idle(idle) + raise_floors(idle):
                tx.execute(statement, params)
            return len(idle)

    def purge_waiters(self, grace_us: int, limit: int, *, judges: Callable[[int], bool]) -> int:
        """Delete up to `limit` waiters gone for good, and the heartbeats of dead servers."""
        with self.write() as tx:
            now = tx.now_us()
            if not judges(now):
                return 0
            gone = tx.execute(
                "DELETE FROM lock_waiters WHERE seq IN (SELECT w.seq FROM lock_waiters w"
                " LEFT JOIN servers s USING (server_id) WHERE (w.state = 'away' AND w.until_us < ?)"
                " OR coalesce(s.alive_until_us, 0) + ? < ? LIMIT ?)",
                (now, grace_us, now, limit),
            ).rowcount
            tx.execute(
                "DELETE FROM servers WHERE alive_until_us + ? < ? AND server_id NOT IN"
                " (SELECT server_id FROM lock_waiters)",
                (grace_us, now),
            )
            return gone

    def unwatch(self, server_id: str, watches: Sequence[tuple[int, str, int]]) -> None:
        """Nothing was recorded (see `watch`)."""

    async def listen(self, listener: Listener) -> None:
        """SQLite cannot push: servers on one file poll for their waiters and watches instead."""

    def close(self) -> None:
        """Close every connection."""
        with self._write_lock:
            self._closed = True
            if self._syncer is not None:
                self._syncer.close()
            for conn in self._all:
                conn.close()
            if self._wal is not None:
                os.close(self._wal)
                self._wal = None

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailable("the server is shutting down")


def _open_wal(path: str) -> int:
    """A descriptor of the database's WAL file, to fsync after durable commits.

    The WAL exists while any connection is open (and this storage keeps its own open), and
    fsync acts on the file, whichever descriptor wrote it. Its directory entry is synced once
    here, so the file itself survives a power cut too.
    """
    wal = os.open(f"{path}-wal", os.O_RDONLY)
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return wal


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only, whatever the umask.

    SQLite creates the WAL and shared-memory files with the database file's own permissions, so
    all three hold every tenant's owner tokens and labels for the owner's eyes only. A file that
    exists keeps the mode its owner gave it; one that others can read is warned about.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o007:
            log.warning(
                "the database %s can be read by every local user (mode %04o): it holds owner"
                " tokens; chmod 600 it (and its -wal and -shm files)",
                path,
                mode,
            )
    except OSError:
        pass  # sqlite3.connect says why, in its own words


def _begin_immediate(conn: sqlite3.Connection, *, nonblocking: bool) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if nonblocking and getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY"):
            raise WouldBlock from exc  # another process is writing: wait in a worker thread
        raise


def _upgrade(conn: sqlite3.Connection, path: str, target: int = _SCHEMA_VERSION) -> None:
    """Run the migrations from the database's version up to `target`, in order."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > _SCHEMA_VERSION:
        raise RuntimeError(
            f"{path} has schema version {version}; this server knows {_SCHEMA_VERSION}"
        )
    for step in range(version + 1, target + 1):
        for statement in _MIGRATIONS[step].split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {step}")


def _unavailable(exc: Exception) -> str | None:
    """Why `exc` means the database cannot serve now, or None if it means something else."""
    if not isinstance(exc, sqlite3.Error):
        return None
    # SQLITE_IOERR_FSYNC -> SQLITE_IOERR
    primary = "_".join(getattr(exc, "sqlite_errorname", "").split("_")[:2])
    return f"sqlite: {exc}" if primary in _UNAVAILABLE else None


def _mapped_errors() -> AbstractContextManager[None]:
    return unavailable_when(_unavailable)
