"""Lock storage backends behind one interface: SQLite (default) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from ._base import (
    ExpiredLease,
    KeyKind,
    KeyRecord,
    Lease,
    Listener,
    LockRow,
    LockSummary,
    OnLocked,
    ProjectKeys,
    ReadOnlyTx,
    ReadTx,
    StaleClock,
    Storage,
    StorageUnavailable,
    StoredOutcome,
    Synchronous,
    UnsafeDatabase,
    Waiter,
    WaiterState,
    WouldBlock,
    WriteTx,
)
from ._keys import KeyEvent, KeyInfo, UnknownProject, key_id
from ._urls import UnsupportedDatabaseURL, redact_url

__all__ = [
    "DEFAULT_DATABASE_URL",
    "ExpiredLease",
    "KeyEvent",
    "KeyInfo",
    "KeyKind",
    "KeyRecord",
    "Lease",
    "Listener",
    "LockRow",
    "LockSummary",
    "OnLocked",
    "ProjectKeys",
    "ReadOnlyTx",
    "ReadTx",
    "StaleClock",
    "Storage",
    "StorageUnavailable",
    "StoredOutcome",
    "Synchronous",
    "UnknownProject",
    "UnsafeDatabase",
    "UnsupportedDatabaseURL",
    "Waiter",
    "WaiterState",
    "WouldBlock",
    "WriteTx",
    "key_id",
    "open_storage",
    "redact_url",
]

DEFAULT_DATABASE_URL = "sqlite:///volcano.db"


def open_storage(url: str, *, sqlite_synchronous: Synchronous = "full") -> Storage:
    """Open (creating or migrating the schema as needed) the database at `url`.

    `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, or `postgresql://...`.
    `sqlite_synchronous` is checked where it is read (`ServerConfig`, the command line).
    """
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from ._sqlite import SQLiteStorage

        return SQLiteStorage(_sqlite_path(url), synchronous=sqlite_synchronous)
    if scheme in ("postgresql", "postgres"):
        try:
            from ._postgres import PostgresStorage  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:
            raise UnsupportedDatabaseURL(
                'PostgreSQL support is not installed: pip install "volcano[postgres]"'
            ) from exc
        storage: Storage = PostgresStorage(url)
        return storage
    raise UnsupportedDatabaseURL(
        f"unsupported database URL {redact_url(url)!r}: use sqlite:///PATH or postgresql://..."
    )


def _sqlite_path(url: str) -> Path:
    if not url.lower().startswith("sqlite:///"):
        raise UnsupportedDatabaseURL(f"SQLite URLs look like sqlite:///PATH, got {url!r}")
    path = unquote(url[len("sqlite:///") :])
    if not path or path == ":memory:" or path.startswith("file:"):
        raise UnsupportedDatabaseURL(f"SQLite needs a database file path, got {url!r}")
    return Path(path)
