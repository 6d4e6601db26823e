"""What SQLite adds to the group statements (`_groups`): its transactions lock the whole file.

`BEGIN IMMEDIATE` has taken the database's write lock before a write transaction reads
anything, and its clock is read then, so locking a group is reading its row. Several members
are read in one statement. Nobody records watches here: servers on one file poll instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ._groups import MEMBER_COLUMNS, GroupRow, GroupStatements, Member, member_of

__all__ = ["SQLiteGroups"]


class SQLiteGroups(GroupStatements):
    """Group reads and writes on an SQLite transaction (mixed into its `_Tx`)."""

    _conn: sqlite3.Connection
    durable: bool

    def _rows(self, statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        return self._conn.execute(statement, params).fetchall()

    def _write(self, statement: str, params: tuple[object, ...]) -> None:
        self.durable = True  # members and groups are what clients are told of
        self._conn.execute(statement, params)

    def lock_group(
        self, project_id: int, name: str, *, placeholder: bool = False
    ) -> GroupRow | None:
        """The group's row; the transaction holds the database's write lock already."""
        return self.load_group(project_id, name)

    def lock_groups(self, project_id: int, names: Sequence[str]) -> dict[str, GroupRow | None]:
        """The rows of several groups (the write lock covers them all)."""
        return {name: self.load_group(project_id, name) for name in names}

    def load_members(
        self, project_id: int, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Member]:
        """The rows of these (group, member)s that exist."""
        found: dict[tuple[str, str], Member] = {}
        for start in range(0, len(pairs), 400):  # well below SQLite's limit on parameters
            chunk = pairs[start : start + 400]
            where = " OR ".join(["(group_name = ? AND member = ?)"] * len(chunk))
            flat = [part for pair in chunk for part in pair]
            rows = self._conn.execute(
                f"SELECT group_name, {MEMBER_COLUMNS} FROM group_members"  # noqa: S608 - marks
                f" WHERE project_id = ? AND ({where})",
                (project_id, *flat),
            ).fetchall()
            for group, *fields in rows:
                member = member_of(fields)
                found[group, member.name] = member
        return found

    def group_watchers(self, project_id: int, name: str) -> tuple[str, ...]:
        """Nobody: other processes on this file poll the groups they watch."""
        return ()
