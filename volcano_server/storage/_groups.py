"""Groups in storage: their records, the SQL both backends share, and what each adds.

A group is a row of `groups` (its last fencing token, its version, whether it exists now) and
its members are rows of `group_members` (a lease each, with the member's capabilities). A
deleted group keeps its row (`live` false), so that its version and fencing tokens go on from
where they were if it is created again; its members go with it.

Every group transaction locks the group's row first (`lock_group`, `lock_groups`) and reads the
clock once it holds the lock, as lock transactions do with a key's row: on SQLite `BEGIN
IMMEDIATE` has locked the database already; on PostgreSQL the row is locked `FOR UPDATE` and
the clock read in the same round trip. A group with any number of members costs each
transaction the same few statements: members are read one at a time or a page at a time, and
counted by the database (`group_counts`), never loaded whole.

A group's watchers on other servers are recorded in `lock_watches` under the group's watch key
(`watch_key`), a name no lock key can have, so the machinery that tells servers of a key's
changes (NOTIFY on PostgreSQL) tells them of a group's too.

Statements are written once with `?` placeholders (`for_postgres` turns them into `%s`); each
backend's transaction classes mix in `SQLiteGroups` or `PostgresGroups`, which run them through
`_rows` (a statement that answers rows) and `_write` (one that changes them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

import attrs

__all__ = [
    "GROUP_WATCH_PREFIX",
    "CapabilityBytes",
    "GroupCounts",
    "GroupReads",
    "GroupRow",
    "GroupStatements",
    "GroupWrites",
    "Member",
    "group_of_watch_key",
    "watch_key",
]

# A group's watch key: `/` and the group's name. No lock key has a `/`.
GROUP_WATCH_PREFIX = "/"


def watch_key(group: str) -> str:
    """The key under which a group's watchers are recorded and told of its changes."""
    return GROUP_WATCH_PREFIX + group


def group_of_watch_key(key: str) -> str | None:
    """The group a watch key names, or None for a lock's key."""
    return key[len(GROUP_WATCH_PREFIX) :] if key.startswith(GROUP_WATCH_PREFIX) else None


@attrs.frozen
class GroupRow:
    """A group as stored: its last fencing token (0: none yet), its version, whether it exists.

    `version` counts the changes of its membership saved so far; the group's version at a
    moment also counts its stored members expired by then (`GroupCounts.expired`), so an expiry
    moves it without a write.
    """

    project_id: int
    name: str
    fencing_token: int = 0
    version: int = 0
    live: bool = False


@attrs.frozen
class CapabilityBytes:
    """A member's capabilities as stored: what kind they are, and their bytes.

    `json`: the value written compactly in UTF-8; `bytes`: the bytes as given.
    """

    kind: Literal["json", "bytes"]
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


@attrs.frozen
class Member:
    """One member of a group as stored: a lease on the group, with its capabilities."""

    name: str
    owner_token: str = attrs.field(repr=False)
    fencing_token: int
    expires_at_us: int
    ttl_seconds: float
    capabilities: CapabilityBytes | None
    granted_at_us: int

    def live(self, now_us: int) -> bool:
        """Whether the membership has not expired at `now_us`."""
        return now_us < self.expires_at_us


@attrs.frozen
class GroupCounts:
    """A group's members as the database counts them at a moment (no member is loaded)."""

    live: int = 0
    expired: int = 0  # stored, and past their expiry
    soonest_us: int | None = None  # the soonest live expiry


class GroupReads(Protocol):
    """The group reads of every transaction, read-only or not (`GroupStatements`)."""

    def load_group(self, project_id: int, name: str) -> GroupRow | None:
        """The group's row (not locked), if it was ever created."""
        ...

    def group_counts(self, project_id: int, name: str, now_us: int) -> GroupCounts:
        """How many members are live and how many stored ones have expired, at `now_us`."""
        ...

    def load_member(self, project_id: int, group: str, member: str) -> Member | None:
        """The member's row, live or not."""
        ...

    def counts_of(
        self, project_id: int, names: Sequence[str], now_us: int
    ) -> dict[str, GroupCounts]:
        """`group_counts` of several groups, in one statement (a page of a listing)."""
        ...

    def list_groups(
        self, project_id: int, *, prefix: str, after: str, limit: int
    ) -> list[GroupRow]:
        """Up to `limit` existing groups after `after`, starting with `prefix`, in name order."""
        ...

    def member_sizes(
        self, project_id: int, group: str, *, after: str, now_us: int, limit: int
    ) -> list[tuple[str, int]]:
        """Up to `limit` live members after `after`, in order, with their capabilities' size."""
        ...

    def members_named(self, project_id: int, group: str, names: Sequence[str]) -> list[Member]:
        """The rows of these members of one group, in name order."""
        ...


class GroupWrites(GroupReads, Protocol):
    """The group work of a write transaction: locking groups first, then reads and writes."""

    def lock_group(
        self, project_id: int, name: str, *, placeholder: bool = False
    ) -> GroupRow | None:
        """Lock the group's row before anything else, and read the clock once it is held.

        `placeholder`: hold a lock even if the group has no row yet (a create makes it).
        """
        ...

    def lock_groups(self, project_id: int, names: Sequence[str]) -> dict[str, GroupRow | None]:
        """Lock several groups' rows (`names` sorted), then read the clock."""
        ...

    def load_members(
        self, project_id: int, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Member]:
        """The rows of these (group, member)s that exist."""
        ...

    def group_watchers(self, project_id: int, name: str) -> tuple[str, ...]:
        """The servers recorded as watching the group (read under its row lock)."""
        ...

    def save_group(self, row: GroupRow) -> None:
        """Write the group's row as `row` says."""
        ...

    def save_member(self, project_id: int, group: str, member: Member) -> None:
        """Write the member's row (a new member, or one joined again or updated)."""
        ...

    def renew_member(self, project_id: int, group: str, member: Member) -> None:
        """Write a renewed member's expiry and ttl."""
        ...

    def delete_member(self, project_id: int, group: str, member: str) -> None:
        """Delete the member's row."""
        ...

    def delete_members(self, project_id: int, group: str) -> None:
        """Delete every member row of the group."""
        ...

    def drop_expired(self, project_id: int, group: str, now_us: int, limit: int) -> int:
        """Delete up to `limit` expired members of the group; return how many."""
        ...


# -- the statements both backends run alike ----------------------------------------------------

_GROUP = "SELECT fencing_token, version, live FROM groups WHERE project_id = ? AND name = ?"
_SAVE_GROUP = (
    "INSERT INTO groups (project_id, name, fencing_token, version, live) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (project_id, name) DO UPDATE SET fencing_token = excluded.fencing_token,"
    " version = excluded.version, live = excluded.live"
)
# (now, now, now, project_id, name)
_COUNTS = (
    "SELECT coalesce(sum(CASE WHEN expires_at_us > ? THEN 1 ELSE 0 END), 0),"
    " coalesce(sum(CASE WHEN expires_at_us <= ? THEN 1 ELSE 0 END), 0),"
    " min(CASE WHEN expires_at_us > ? THEN expires_at_us END)"
    " FROM group_members WHERE project_id = ? AND group_name = ?"
)


def _counts_of(groups: int) -> str:
    """`_COUNTS` of `groups` groups, by group: (now, now, now, project_id, *names)."""
    marks = ", ".join("?" * groups)
    return (
        "SELECT group_name,"  # noqa: S608 - constants and marks
        " coalesce(sum(CASE WHEN expires_at_us > ? THEN 1 ELSE 0 END), 0),"
        " coalesce(sum(CASE WHEN expires_at_us <= ? THEN 1 ELSE 0 END), 0),"
        " min(CASE WHEN expires_at_us > ? THEN expires_at_us END)"
        f" FROM group_members WHERE project_id = ? AND group_name IN ({marks})"
        " GROUP BY group_name"
    )


MEMBER_COLUMNS = (
    "member, owner_token, fencing_token, expires_at_us, ttl_seconds, capabilities_kind,"
    " capabilities, granted_at_us"
)
_MEMBER = (
    f"SELECT {MEMBER_COLUMNS} FROM group_members"  # noqa: S608 - constants only
    " WHERE project_id = ? AND group_name = ? AND member = ?"
)
_SAVE_MEMBER = (
    "INSERT INTO group_members (project_id, group_name, member, owner_token, fencing_token,"
    " expires_at_us, ttl_seconds, capabilities_kind, capabilities, capabilities_size,"
    " granted_at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (project_id, group_name, member) DO UPDATE SET"
    " owner_token = excluded.owner_token, fencing_token = excluded.fencing_token,"
    " expires_at_us = excluded.expires_at_us, ttl_seconds = excluded.ttl_seconds,"
    " capabilities_kind = excluded.capabilities_kind, capabilities = excluded.capabilities,"
    " capabilities_size = excluded.capabilities_size, granted_at_us = excluded.granted_at_us"
)
_RENEW_MEMBER = (
    "UPDATE group_members SET expires_at_us = ?, ttl_seconds = ?"
    " WHERE project_id = ? AND group_name = ? AND member = ?"
)
_DELETE_MEMBER = "DELETE FROM group_members WHERE project_id = ? AND group_name = ? AND member = ?"
_DELETE_MEMBERS = "DELETE FROM group_members WHERE project_id = ? AND group_name = ?"
# (project_id, name, now, limit): up to `limit` expired members of a group.
_EXPIRED = (
    "SELECT member FROM group_members WHERE project_id = ? AND group_name = ?"
    " AND expires_at_us <= ? ORDER BY expires_at_us LIMIT ?"
)
# (project_id, name, after, now, limit): the live members after `after`, each with the size of
# its capabilities, so a page is chosen by its byte budget before any capabilities are read.
_SIZES = (
    "SELECT member, capabilities_size FROM group_members WHERE project_id = ?"
    " AND group_name = ? AND member > ? AND expires_at_us > ? ORDER BY member LIMIT ?"
)


def _listed_groups(*, bounded: bool) -> str:
    """One page of group names (and their rows): (project_id, after, prefix[, bound], limit)."""
    bound = " AND name < ?" if bounded else ""
    return (
        "SELECT name, fencing_token, version, live FROM groups"  # noqa: S608 - constants only
        f" WHERE project_id = ? AND live AND name > ? AND name >= ?{bound} ORDER BY name LIMIT ?"
    )


def member_of(row: Sequence[Any]) -> Member:
    """A member from a row of `MEMBER_COLUMNS`."""
    name, owner, token, until, ttl, kind, data, granted = row
    capabilities = None if kind is None else CapabilityBytes(kind, bytes(data))
    return Member(name, owner, token, until, float(ttl), capabilities, granted)


def member_params(project_id: int, group: str, member: Member) -> tuple[object, ...]:
    """The parameters of `_SAVE_MEMBER`."""
    capabilities = member.capabilities
    return (
        project_id,
        group,
        member.name,
        member.owner_token,
        member.fencing_token,
        member.expires_at_us,
        member.ttl_seconds,
        None if capabilities is None else capabilities.kind,
        None if capabilities is None else capabilities.data,
        0 if capabilities is None else len(capabilities.data),
        member.granted_at_us,
    )


class GroupStatements:
    """The group reads and writes both backends run alike, on a transaction's `_rows`/`_write`.

    Each backend adds how it locks groups (`lock_group`, `lock_groups`), loads several members
    at once (`load_members`) and reads who watches a group (`group_watchers`).
    """

    def _rows(self, statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _write(self, statement: str, params: tuple[object, ...]) -> None:
        raise NotImplementedError

    # -- reads -----------------------------------------------------------------------------

    def load_group(self, project_id: int, name: str) -> GroupRow | None:
        """The group's row (not locked), if it was ever created."""
        found = self._rows(_GROUP, (project_id, name))
        return _group(project_id, name, found[0]) if found else None

    def group_counts(self, project_id: int, name: str, now_us: int) -> GroupCounts:
        """How many members are live and how many stored ones have expired, at `now_us`."""
        ((live, expired, soonest),) = self._rows(
            _COUNTS, (now_us, now_us, now_us, project_id, name)
        )
        return GroupCounts(int(live), int(expired), None if soonest is None else int(soonest))

    def load_member(self, project_id: int, group: str, member: str) -> Member | None:
        """The member's row, live or not."""
        found = self._rows(_MEMBER, (project_id, group, member))
        return member_of(found[0]) if found else None

    def counts_of(
        self, project_id: int, names: Sequence[str], now_us: int
    ) -> dict[str, GroupCounts]:
        """`group_counts` of several groups, in one statement (a page of a listing)."""
        found = dict.fromkeys(names, GroupCounts())
        if not names:
            return found
        rows = self._rows(_counts_of(len(names)), (now_us, now_us, now_us, project_id, *names))
        for name, live, expired, soonest in rows:
            found[name] = GroupCounts(
                int(live), int(expired), None if soonest is None else int(soonest)
            )
        return found

    def list_groups(
        self, project_id: int, *, prefix: str, after: str, limit: int
    ) -> list[GroupRow]:
        """Up to `limit` existing groups after `after`, starting with `prefix`, in name order."""
        bound = (prefix + "~",) if prefix else ()  # names are made of characters below `~`
        rows = self._rows(
            _listed_groups(bounded=bool(prefix)), (project_id, after, prefix, *bound, limit)
        )
        return [_group(project_id, name, fields) for name, *fields in rows]

    def member_sizes(
        self, project_id: int, group: str, *, after: str, now_us: int, limit: int
    ) -> list[tuple[str, int]]:
        """Up to `limit` live members after `after`, in order, with their capabilities' size."""
        rows = self._rows(_SIZES, (project_id, group, after, now_us, limit))
        return [(name, int(size)) for name, size in rows]

    def members_named(self, project_id: int, group: str, names: Sequence[str]) -> list[Member]:
        """The rows of these members of one group, in name order."""
        if not names:
            return []
        marks = ", ".join("?" * len(names))
        rows = self._rows(
            f"SELECT {MEMBER_COLUMNS} FROM group_members WHERE project_id = ?"  # noqa: S608
            f" AND group_name = ? AND member IN ({marks}) ORDER BY member",
            (project_id, group, *names),
        )
        return [member_of(row) for row in rows]

    # -- writes ----------------------------------------------------------------------------

    def save_group(self, row: GroupRow) -> None:
        """Write the group's row as `row` says."""
        self._write(
            _SAVE_GROUP, (row.project_id, row.name, row.fencing_token, row.version, row.live)
        )

    def save_member(self, project_id: int, group: str, member: Member) -> None:
        """Write the member's row (a new member, or one joined again or updated)."""
        self._write(_SAVE_MEMBER, member_params(project_id, group, member))

    def renew_member(self, project_id: int, group: str, member: Member) -> None:
        """Write a renewed member's expiry and ttl (nothing else of it changes)."""
        self._write(
            _RENEW_MEMBER,
            (member.expires_at_us, member.ttl_seconds, project_id, group, member.name),
        )

    def delete_member(self, project_id: int, group: str, member: str) -> None:
        """Delete the member's row."""
        self._write(_DELETE_MEMBER, (project_id, group, member))

    def delete_members(self, project_id: int, group: str) -> None:
        """Delete every member row of the group (it is being deleted)."""
        self._write(_DELETE_MEMBERS, (project_id, group))

    def drop_expired(self, project_id: int, group: str, now_us: int, limit: int) -> int:
        """Delete up to `limit` expired members of the group; return how many."""
        names = [name for (name,) in self._rows(_EXPIRED, (project_id, group, now_us, limit))]
        for name in names:
            self.delete_member(project_id, group, name)
        return len(names)


def _group(project_id: int, name: str, fields: Iterable[Any]) -> GroupRow:
    token, version, live = fields
    return GroupRow(project_id, name, int(token), int(version), bool(live))
