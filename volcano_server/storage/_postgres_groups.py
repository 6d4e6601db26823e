"""What PostgreSQL adds to the group statements (`_groups`): row locks, and watchers.

A write transaction locks a group's row `FOR UPDATE` and reads the clock and the servers that
watch the group in the same round trip, after the lock is granted: every decision about the
group's members is then made with a clock read while nobody else can change them, as a lock
transaction's is (`_postgres.volcano_open`). A create locks the row it may make: the INSERT
either places the group's row, holding its lock, or (ON CONFLICT) locks the row a concurrent
transaction committed, so two creates of one group queue on one row. Several groups (a batch
renewal) are locked in name order, so two batches never wait for each other in a circle.

Writes are queued to go with the next round trip (`_WriteTx._send`), reads answer at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._groups import MEMBER_COLUMNS, GroupRow, GroupStatements, Member, member_of, watch_key
from ._sql import for_postgres

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresGroupReads", "PostgresGroups"]

_CLOCK = "SELECT volcano_clock_us()"
_LOCK = (
    "SELECT fencing_token, version, live FROM groups WHERE project_id = %s AND name = %s FOR UPDATE"
)
# A create's lock: the row it may make is placed (an empty, never-created group) or locked.
_PLACE = (
    "INSERT INTO groups AS g (project_id, name, fencing_token, version, live)"
    " VALUES (%s, %s, 0, 0, false) ON CONFLICT (project_id, name) DO UPDATE SET live = g.live"
    " RETURNING fencing_token, version, live"
)
_LOCK_SEVERAL = (
    "SELECT name, fencing_token, version, live FROM groups WHERE project_id = %s"
    " AND name = ANY(%s) ORDER BY name FOR UPDATE"
)
_WATCHERS = "SELECT server_id FROM lock_watches WHERE project_id = %s AND key = %s"
_MEMBERS = (
    f"SELECT m.group_name, {MEMBER_COLUMNS} FROM group_members m"  # noqa: S608 - constants
    " JOIN unnest(%s::text[], %s::text[]) AS p (g, n) ON m.group_name = p.g AND m.member = p.n"
    " WHERE m.project_id = %s"
)


class PostgresGroups(GroupStatements):
    """Group reads and writes on a PostgreSQL write transaction (mixed into its `_WriteTx`)."""

    if TYPE_CHECKING:
        durable: bool
        _now: int | None
        _offset: Callable[[], int]

        def _send(self, query: str, params: tuple[object, ...]) -> None: ...

        def _ask(self, query: str, params: tuple[object, ...]) -> psycopg.ClientCursor[Any]: ...

        def _ask_sets(
            self, query: str, params: tuple[object, ...], count: int
        ) -> list[list[tuple[Any, ...]]]: ...

    def _rows(self, statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        return self._ask(for_postgres(statement), params).fetchall()

    def _write(self, statement: str, params: tuple[object, ...]) -> None:
        self.durable = True  # members and groups are what clients are told of
        self._send(for_postgres(statement), params)

    def lock_group(
        self, project_id: int, name: str, *, placeholder: bool = False
    ) -> GroupRow | None:
        """Lock the group's row, then read the clock and its watchers: one round trip.

        `placeholder`: place an empty row (a group never created) when there is none, so that
        the transaction holds a lock on the row it may create.
        """
        self._send(_PLACE if placeholder else _LOCK, (project_id, name))
        self._send(_CLOCK, ())
        locked, (clock,), watching = self._ask_sets(_WATCHERS, (project_id, watch_key(name)), 3)
        self._now = clock[0] + self._offset()  # after the lock: see the module's docstring
        self._watchers_of()[project_id, name] = tuple(server for (server,) in watching)
        if not locked:
            return None
        token, version, live = locked[0]
        return GroupRow(project_id, name, int(token), int(version), bool(live))

    def lock_groups(self, project_id: int, names: Sequence[str]) -> dict[str, GroupRow | None]:
        """Lock the rows of several groups in name order (`names` sorted), then read the clock."""
        self._send(_LOCK_SEVERAL, (project_id, list(names)))
        locked, (clock,) = self._ask_sets(_CLOCK, (), 2)
        self._now = clock[0] + self._offset()
        found: dict[str, GroupRow | None] = dict.fromkeys(names)
        for name, token, version, live in locked:
            found[name] = GroupRow(project_id, name, int(token), int(version), bool(live))
        return found

    def load_members(
        self, project_id: int, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Member]:
        """The rows of these (group, member)s that exist, in one statement."""
        groups = [group for group, _ in pairs]
        members = [member for _, member in pairs]
        found: dict[tuple[str, str], Member] = {}
        for group, *fields in self._ask(_MEMBERS, (groups, members, project_id)).fetchall():
            member = member_of(fields)
            found[group, member.name] = member
        return found

    def group_watchers(self, project_id: int, name: str) -> tuple[str, ...]:
        """The servers watching the group, as read once its row was locked."""
        watchers = self._watchers_of()
        if (project_id, name) not in watchers:
            rows = self._ask(_WATCHERS, (project_id, watch_key(name))).fetchall()
            watchers[project_id, name] = tuple(server for (server,) in rows)
        return watchers[project_id, name]

    def _watchers_of(self) -> dict[tuple[int, str], tuple[str, ...]]:
        """The watchers read so far, by group (made on first use: the host's own __init__ runs)."""
        watchers: dict[tuple[int, str], tuple[str, ...]] = vars(self).setdefault(
            "_group_watchers", {}
        )
        return watchers


class PostgresGroupReads(GroupStatements):
    """Group reads on a PostgreSQL connection outside any transaction (its `_ReadTx`)."""

    _conn: psycopg.Connection[Any]

    def _rows(self, statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        return self._conn.execute(for_postgres(statement), params).fetchall()

    def _write(self, statement: str, params: tuple[object, ...]) -> None:
        raise TypeError("a read transaction writes nothing")
