"""SQLite storage: the default, one database file shared by any number of server processes.

- WAL journal, so readers never wait for the writer.
- `synchronous=FULL` by default: a commit is on disk (WAL fsync) before the answer is sent, so an
  acknowledged lease survives `kill -9` and also power loss or an OS crash. Fencing tokens must
  never be issued twice, and a lost commit after a power cut would reissue one. `NORMAL` (what
  `--sqlite-synchronous normal` selects) survives `kill -9` of the server, since the WAL is in
  the OS page cache, but not a power cut.
- Writes are `BEGIN IMMEDIATE` transactions: the write lock is taken first, so two processes never
  decide on stale reads. Within a process the writer is shared behind a lock (SQLite allows one
  writer anyway, and its busy handler polls); other processes wait up to `busy_timeout`, after
  which the request gets 503 rather than hanging.
- `runs_inline`: the server runs operations on its event loop (no thread hop) while NONBLOCKING
  is set. Then nothing waits: a busy process lock, a busy file (another process writing) or no
  free reader raises WouldBlock before anything changed, and the server repeats the work in a
  worker thread, where the waits above apply.
- The clock is this machine's (every process on one file shares it), read after the write lock
  is taken.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from ._base import (
    NONBLOCKING,
    KeyRecord,
    LockRow,
    StorageUnavailable,
    StoredOutcome,
    WouldBlock,
)
from ._keys import KeyAdmin, Sql

__all__ = ["SQLiteStorage"]

Synchronous = Literal["full", "normal"]

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


class _Tx:
    """A transaction on one connection (read-only or read-write, by how it was begun)."""

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], int]) -> None:
        self._conn = conn
        self._now = clock()

    def now_us(self) -> int:
        return self._now

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        row = self._conn.execute(
            "SELECT fencing_token, owner_token, expires_at_us, ttl_seconds FROM locks"
            " WHERE project_id = ? AND key = ?",
            (project_id, key),
        ).fetchone()
        return None if row is None else LockRow(project_id, key, *row)

    def save_lock(self, row: LockRow) -> None:
        self._conn.execute(
            "INSERT INTO locks"
            " (project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (project_id, key) DO UPDATE SET"
            " fencing_token = excluded.fencing_token, owner_token = excluded.owner_token,"
            " expires_at_us = excluded.expires_at_us, ttl_seconds = excluded.ttl_seconds",
            (
                row.project_id,
                row.key,
                row.fencing_token,
                row.owner_token,
                row.expires_at_us,
                row.ttl_seconds,
            ),
        )

    def claim_request(self, project_id: int, request_id: str) -> StoredOutcome | None:
        # BEGIN IMMEDIATE already serialises every writer on this file: nothing to reserve.
        row = self._conn.execute(
            "SELECT fingerprint, status, body, retry_after, expires_at_us FROM request_outcomes"
            " WHERE project_id = ? AND request_id = ? AND expires_at_us > ?",
            (project_id, request_id, self._now),
        ).fetchone()
        return None if row is None else StoredOutcome(*row)

    def save_outcome(self, project_id: int, request_id: str, outcome: StoredOutcome) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO request_outcomes"
            " (project_id, request_id, fingerprint, status, body, retry_after, expires_at_us)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                project_id,
                request_id,
                outcome.fingerprint,
                outcome.status,
                outcome.body,
                outcome.retry_after,
                outcome.expires_at_us,
            ),
        )


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
    ) -> None:
        self._path = str(path)
        self._clock = clock  # microseconds since the epoch; tests shift it to skip ahead
        self._synchronous = synchronous
        self._busy_ms = round(busy_timeout * 1000)
        self.url_for_display = f"sqlite:///{self._path}"
        self.runs_inline = True
        self._write_lock = threading.Lock()
        self._readers: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        with _mapped_errors():
            self._writer = self._connect()
            self._writer_now = self._connect(busy_ms=0)  # for NONBLOCKING: fail rather than wait
            self._migrate()
            for _ in range(readers):
                self._readers.put(self._connect())

    def _connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        busy_ms = self._busy_ms if busy_ms is None else busy_ms
        conn = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, timeout=busy_ms / 1000
        )
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")
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
    def write(self) -> Iterator[_Tx]:
        """One BEGIN IMMEDIATE transaction on the shared writer connection."""
        nonblocking = NONBLOCKING.get()
        if not self._write_lock.acquire(blocking=not nonblocking):
            raise WouldBlock
        try:
            with _mapped_errors():
                self._check_open()
                conn = self._writer_now if nonblocking else self._writer
                _begin_immediate(conn, nonblocking)
                try:
                    yield _Tx(conn, self._clock)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        finally:
            self._write_lock.release()

    @contextmanager
    def read(self) -> Iterator[_Tx]:
        """A read snapshot on a pooled reader connection."""
        self._check_open()
        try:
            conn = self._readers.get_nowait() if NONBLOCKING.get() else self._readers.get()
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

    def find_key(self, key_hash: bytes) -> KeyRecord | None:
        """The key with this hash, if any."""
        with self.read() as tx:
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

    def close(self) -> None:
        """Close every connection."""
        with self._write_lock:
            self._closed = True
            for conn in self._all:
                conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailable("the server is shutting down")


def _begin_immediate(conn: sqlite3.Connection, nonblocking: bool) -> None:
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


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        primary = "_".join(
            getattr(exc, "sqlite_errorname", "").split("_")[:2]
        )  # SQLITE_IOERR_FSYNC -> SQLITE_IOERR
        if primary in _UNAVAILABLE:
            raise StorageUnavailable(f"sqlite: {exc}") from exc
        raise
