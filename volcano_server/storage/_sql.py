"""What both backends share below the storage interface: SQL they run alike, and error mapping.

Statements are written once with `?` placeholders, as SQLite takes them; `for_postgres` turns
them into psycopg's `%s` (none of them holds a literal `?`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ._base import LockRow, StorageUnavailable

__all__ = [
    "FIND_WAITER",
    "QUEUED",
    "SAVE_LOCK",
    "TOUCH_SERVER",
    "for_postgres",
    "lock_params",
    "unavailable_when",
]

# Insert or update a key's row (`lock_params` gives its parameters).
SAVE_LOCK = (
    "INSERT INTO locks (project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (project_id, key) DO UPDATE SET"
    " fencing_token = excluded.fencing_token, owner_token = excluded.owner_token,"
    " expires_at_us = excluded.expires_at_us, ttl_seconds = excluded.ttl_seconds"
)

# A waiter's fields in `Waiter.from_row` order; the first parameter is now (is its server alive).
_WAITERS = (
    "SELECT w.seq, w.project_id, w.key, w.owner_token, w.ttl_seconds, w.server_id, w.state,"
    " w.until_us, coalesce(s.alive_until_us, 0) > ?"
    " FROM lock_waiters w LEFT JOIN servers s USING (server_id)"
)
# (now, project_id, key, limit): the key's waiters in line, first come first.
QUEUED = _WAITERS + (
    " WHERE w.project_id = ? AND w.key = ? AND w.state != 'away' ORDER BY w.seq LIMIT ?"
)
# (now, project_id, key, owner_token): the owner token's waiter row of the key.
FIND_WAITER = _WAITERS + " WHERE w.project_id = ? AND w.key = ? AND w.owner_token = ?"

# (server_id, alive_until_us): a server's heartbeat.
TOUCH_SERVER = (
    "INSERT INTO servers (server_id, alive_until_us) VALUES (?, ?)"
    " ON CONFLICT (server_id) DO UPDATE SET alive_until_us = excluded.alive_until_us"
)


def for_postgres(statement: str) -> str:
    """The statement with psycopg's placeholders."""
    return statement.replace("?", "%s")


def lock_params(row: LockRow) -> tuple[object, ...]:
    """The parameters of `SAVE_LOCK` for `row`."""
    return (
        row.project_id,
        row.key,
        row.fencing_token,
        row.owner_token,
        row.expires_at_us,
        row.ttl_seconds,
    )


@contextmanager
def unavailable_when(why: Callable[[Exception], str | None]) -> Iterator[None]:
    """Turn a driver's error into StorageUnavailable (answered 503) when `why` explains it.

    `why` returns the message for errors that mean "the database cannot serve right now", and
    None for the rest, which propagate unchanged (a bug, not an outage).
    """
    try:
        yield
    except Exception as exc:
        message = why(exc)
        if message is None:
            raise
        raise StorageUnavailable(message) from exc
