"""The explorer's reads of a SQLite database, outside every server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.explorer._checks import LeaseRow, Reader

__all__ = ["SQLiteReader"]


class SQLiteReader(Reader):
    """Committed rows, through a connection of its own."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def key(self, key: str) -> tuple[int, int] | None:
        row = self._conn.execute(
            "SELECT fencing_token, limit_count FROM locks WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def leases(self, key: str) -> list[LeaseRow]:
        rows = self._conn.execute(
            "SELECT fencing_token, owner_token, expires_at_us FROM leases WHERE key = ?"
            " ORDER BY fencing_token",
            (key,),
        ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def waiters(self, key: str) -> list[tuple[int, str, str, str]]:
        rows = self._conn.execute(
            "SELECT seq, owner_token, state, server_id FROM lock_waiters WHERE key = ?"
            " ORDER BY seq",
            (key,),
        ).fetchall()
        return [tuple(row) for row in rows]

    def alive_servers(self, now_us: int) -> set[str]:
        rows = self._conn.execute(
            "SELECT server_id FROM servers WHERE alive_until_us > ?", (now_us,)
        ).fetchall()
        return {row[0] for row in rows}

    def saved_version(self, key: str) -> int:
        row = self._conn.execute("SELECT version FROM locks WHERE key = ?", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def labels(self, key: str) -> dict[int, str | None]:
        rows = self._conn.execute(
            "SELECT fencing_token, label FROM leases WHERE key = ?", (key,)
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    def modes(self, key: str) -> dict[int, bool]:
        rows = self._conn.execute(
            "SELECT fencing_token, shared FROM leases WHERE key = ?", (key,)
        ).fetchall()
        return {row[0]: bool(row[1]) for row in rows}

    def close(self) -> None:
        self._conn.close()
