"""What both backends share below the storage interface: SQL they run alike, and error mapping.

Statements are written once with `?` placeholders, as SQLite takes them; `for_postgres` turns
them into psycopg's `%s` (none of them holds a literal `?`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._base import ExpiredLease, Lease, LockRow, StorageUnavailable

__all__ = [
    "EXPIRED_LEASES",
    "EXPIRED_MEMBERS",
    "FIND_WAITER",
    "HOLDERS_PAGE",
    "IDLE_KEYS",
    "LEASES",
    "LEASE_COLUMNS",
    "LEASE_COUNTS",
    "QUEUED",
    "SOONEST_LEASES",
    "TOUCH_SERVER",
    "WAITING_COUNT",
    "bump_groups",
    "bump_versions",
    "delete_expired",
    "delete_expired_members",
    "delete_idle",
    "ended_of",
    "for_postgres",
    "leases_of",
    "listed_keys",
    "listed_params",
    "lock_writes",
    "raise_floors",
    "unavailable_when",
]

# Insert or update a key's row: (project_id, key, fencing_token, limit, version, updated_at_us).
# `updated_at_us` tells how long a key has gone unchanged (`purge_keys`).
SAVE_LOCK = (
    "INSERT INTO locks (project_id, key, fencing_token, limit_count, version, updated_at_us)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (project_id, key) DO UPDATE SET"
    " fencing_token = excluded.fencing_token, limit_count = excluded.limit_count,"
    " version = excluded.version, updated_at_us = excluded.updated_at_us"
)
# Insert or update one lease of a key (`lease_params`).
SAVE_LEASE = (
    "INSERT INTO leases (project_id, key, fencing_token, owner_token, expires_at_us,"
    " ttl_seconds, label, granted_at_us, shared) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (project_id, key, fencing_token) DO UPDATE SET"
    " expires_at_us = excluded.expires_at_us, ttl_seconds = excluded.ttl_seconds,"
    " label = excluded.label, granted_at_us = excluded.granted_at_us"
)
# (project_id, key, fencing_token): one lease of a key ends.
DELETE_LEASE = "DELETE FROM leases WHERE project_id = ? AND key = ? AND fencing_token = ?"
# (project_id, key): a key's leases, by fencing token.
# A lease's columns, in the order `leases_of` reads them.
LEASE_COLUMNS = (
    "fencing_token, owner_token, expires_at_us, ttl_seconds, label, granted_at_us, shared"
)
LEASES = (
    f"SELECT {LEASE_COLUMNS}"  # noqa: S608 - constants only
    " FROM leases WHERE project_id = ? AND key = ? ORDER BY fencing_token"
)
# (now, now, now, project_id, key): a key's live leases counted, its stored expired ones counted,
# and the highest live fencing token: what a summary needs of the leases it does not show.
LEASE_COUNTS = (
    "SELECT count(*) FILTER (WHERE expires_at_us > ?), count(*) FILTER (WHERE expires_at_us <= ?),"
    " max(fencing_token) FILTER (WHERE expires_at_us > ?)"
    " FROM leases WHERE project_id = ? AND key = ?"
)
# (project_id, key, now, limit): the key's live leases that end soonest, soonest first.
SOONEST_LEASES = (
    f"SELECT {LEASE_COLUMNS}"  # noqa: S608 - constants only
    " FROM leases WHERE project_id = ? AND key = ? AND expires_at_us > ?"
    " ORDER BY expires_at_us, fencing_token LIMIT ?"
)
# (project_id, key, after, now, limit): a page of the key's live leases, by fencing token.
HOLDERS_PAGE = (
    f"SELECT {LEASE_COLUMNS}"  # noqa: S608 - constants only
    " FROM leases WHERE project_id = ? AND key = ? AND fencing_token > ? AND expires_at_us > ?"
    " ORDER BY fencing_token LIMIT ?"
)
# (project_id, key): how many wait in the key's line.
WAITING_COUNT = (
    "SELECT count(*) FROM lock_waiters WHERE project_id = ? AND key = ? AND state = 'waiting'"
)

# A waiter's fields in `Waiter.from_row` order; the first parameter is now (is its server alive).
_WAITERS = (
    "SELECT w.seq, w.project_id, w.key, w.owner_token, w.ttl_seconds, w.server_id, w.state,"
    " w.until_us, w.label, coalesce(s.alive_until_us, 0) > ?, w.shared,"
    " coalesce(s.alive_until_us, 0)"
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


# (now, limit): expired leases, as `purge_lease_writes` and `ended_of` take them.
EXPIRED_LEASES = (
    "SELECT project_id, key, fencing_token, expires_at_us, granted_at_us FROM leases"
    " WHERE expires_at_us <= ? LIMIT ?"
)
# (now, limit): expired group members, as `delete_expired_members` and `bump_groups` take them.
EXPIRED_MEMBERS = (
    "SELECT project_id, group_name, member FROM group_members WHERE expires_at_us <= ? LIMIT ?"
)
# (unchanged since, limit): keys with no lease and nobody in line, unchanged since then, with
# their version and last token (as `purge_key_writes` takes them).
IDLE_KEYS = (
    "SELECT l.project_id, l.key, l.version, l.fencing_token FROM locks l"
    " WHERE l.updated_at_us < ? AND l.fencing_token > 0"
    " AND NOT EXISTS (SELECT 1 FROM leases x WHERE x.project_id = l.project_id AND x.key = l.key)"
    " AND NOT EXISTS (SELECT 1 FROM lock_waiters w"
    " WHERE w.project_id = l.project_id AND w.key = l.key) LIMIT ?"
)


def delete_expired(expired: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that delete `EXPIRED_LEASES` rows (keep their keys' versions: `bump`)."""
    return [(DELETE_LEASE, (project_id, key, token)) for project_id, key, token, *_ in expired]


def bump_versions(expired: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that move each key's version past its expired leases deleted.

    A key's version counts its stored leases that have expired (`LockRow.version_at`), so it
    goes up by one for each deleted: the key's version at any moment stays the same.
    """
    counts = collections.Counter((project_id, key) for project_id, key, *_ in expired)
    return [
        ("UPDATE locks SET version = version + ? WHERE project_id = ? AND key = ?", (n, *ref))
        for ref, n in counts.items()
    ]


def delete_expired_members(
    expired: Sequence[Sequence[Any]],
) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that delete `EXPIRED_MEMBERS` rows (keep their groups' versions)."""
    return [
        (
            "DELETE FROM group_members WHERE project_id = ? AND group_name = ? AND member = ?",
            (project_id, group, member),
        )
        for project_id, group, member in expired
    ]


def bump_groups(expired: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that move each group's version past its expired members deleted.

    A group's version counts its stored members that have expired, as a key's does its leases.
    """
    counts = collections.Counter((project_id, group) for project_id, group, *_ in expired)
    return [
        ("UPDATE groups SET version = version + ? WHERE project_id = ? AND name = ?", (n, *ref))
        for ref, n in counts.items()
    ]


def delete_idle(idle: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that delete `IDLE_KEYS` rows (their floors: `raise_floors`)."""
    return [
        ("DELETE FROM locks WHERE project_id = ? AND key = ?", (project_id, key))
        for project_id, key, *_ in idle
    ]


def raise_floors(deleted: Sequence[Sequence[Any]]) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that raise each project's floor past its keys deleted (`IDLE_KEYS` rows).

    A key used again after its row is gone starts from its project's floor, above any fencing
    token or version it had (`LockRow.purged`), so neither ever goes back or repeats.
    """
    floors: dict[int, int] = {}
    for project_id, _, version, token in deleted:
        floors[project_id] = max(floors.get(project_id, 0), version, token)
    return [
        ("UPDATE projects SET key_floor = ? WHERE id = ? AND key_floor < ?", (floor, p, floor))
        for p, floor in floors.items()
    ]


def ended_of(expired: Sequence[Sequence[Any]]) -> list[ExpiredLease]:
    """The leases `EXPIRED_LEASES` found, as the metrics count them."""
    return [
        ExpiredLease(project_id, key, expires - granted)
        for project_id, key, _, expires, granted in expired
        if granted is not None
    ]


def listed_keys(*, bounded: bool) -> str:
    """The keys of one page of `list_locks`, each with a live lease or a caller in line.

    Its parameters are `listed_params`. `bounded`: a prefix is given, and keys must sort
    below its upper bound (`prefix_bound`).
    """
    where = "project_id = ? AND key > ? AND key >= ?" + (" AND key < ?" if bounded else "")
    return (
        "SELECT key FROM ("  # noqa: S608 - constants only
        f"SELECT key FROM leases WHERE expires_at_us > ? AND {where}"
        f" UNION SELECT key FROM lock_waiters WHERE state = 'waiting' AND {where}"
        ") AS listed ORDER BY key LIMIT ?"
    )


def listed_params(
    project_id: int, now: int, *, prefix: str, after: str, limit: int
) -> tuple[object, ...]:
    """The parameters of `listed_keys(bounded=bool(prefix))`."""
    bound = (prefix_bound(prefix),) if prefix else ()
    return (
        now,
        project_id,
        after,
        prefix,
        *bound,
        project_id,
        after,
        prefix,
        *bound,
        limit,
    )


def prefix_bound(prefix: str) -> str:
    """A string above every key that starts with `prefix` and below every other key above it.

    Keys are made of `-.0-9:A-Z_a-z`, all below `~` in byte order.
    """
    return prefix + "~"


def for_postgres(statement: str) -> str:
    """The statement with psycopg's placeholders."""
    return statement.replace("?", "%s")


def lock_writes(
    row: LockRow, loaded: LockRow | None, now: int
) -> list[tuple[str, tuple[object, ...]]]:
    """The statements that make storage hold `row`, `loaded` being what it held, at `now`.

    The key's row only when its token, limit or version changed (or it is not stored yet); a
    lease deleted when it is gone from `row` (released, force-released, or expired and
    dropped); written when new or changed.
    """
    writes: list[tuple[str, tuple[object, ...]]] = []
    ref = (row.project_id, row.key)
    fields = (row.fencing_token, row.limit, row.version)
    if (
        loaded is None
        or not loaded.stored
        or (loaded.fencing_token, loaded.limit, loaded.version) != fields
    ):
        writes.append((SAVE_LOCK, (*ref, *fields, now)))
    before = {lease.fencing_token: lease for lease in (loaded.leases if loaded else ())}
    after = {lease.fencing_token: lease for lease in row.leases}
    writes += [(DELETE_LEASE, (*ref, token)) for token in before if token not in after]
    writes += [
        (SAVE_LEASE, lease_params(row, lease))
        for token, lease in after.items()
        if before.get(token) != lease
    ]
    return writes


def lease_params(row: LockRow, lease: Lease) -> tuple[object, ...]:
    """The parameters of `SAVE_LEASE`."""
    return (
        row.project_id,
        row.key,
        lease.fencing_token,
        lease.owner_token,
        lease.expires_at_us,
        lease.ttl_seconds,
        lease.label,
        lease.granted_at_us,
        lease.shared,
    )


def leases_of(rows: Iterable[Sequence[Any]]) -> tuple[Lease, ...]:
    """Leases from `LEASES` rows (or a `volcano_open` list of them)."""
    return tuple(
        Lease(token, owner, until, float(ttl), label, granted, bool(shared))
        for token, owner, until, ttl, label, granted, shared in rows
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
