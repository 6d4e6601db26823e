"""Key administration, written once for both backends: add, list and revoke keys, the audit trail.

None of this is on a request's path except `record_key_uses`, which a background task calls to
write the keys' "last used" times in one batch. A backend provides `_admin()`: one write
transaction, yielding a function that runs a statement written with `?` placeholders and
returns its rows, and the storage clock's now.

A key's id is `key_` and the first 8 bytes of its SHA-256 hash in hex: safe to show and to
type (it says nothing usable about the key), and derived, so keys made before ids existed got
theirs when the schema was upgraded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal

import attrs

__all__ = ["KeyAdmin", "KeyEvent", "KeyInfo", "KeyKind", "Sql", "UnknownProject", "key_id"]

KeyKind = Literal["anon", "service"]

# Runs one statement (`?` placeholders) and returns its rows ([] for statements without any).
Sql = Callable[[str, tuple[object, ...]], list[tuple[Any, ...]]]


class UnknownProject(LookupError):
    """No project has this name."""


def key_id(key_hash: bytes) -> str:
    """The public id of the key with this hash."""
    return "key_" + key_hash[:8].hex()


@attrs.frozen
class KeyInfo:
    """What an operator may see of a key: never the key itself, nor its hash."""

    key_id: str
    kind: KeyKind
    project: str
    created_at_us: int
    last_used_at_us: int | None
    revoked_at_us: int | None


@attrs.frozen
class KeyEvent:
    """One entry of the audit trail: a key created or revoked, when and by whom."""

    at_us: int
    action: str  # "created" or "revoked"
    key_id: str
    kind: KeyKind
    project: str
    actor: str


_KEY_COLUMNS = (
    "k.key_id, k.kind, p.name, k.created_at_us, k.last_used_at_us, k.revoked_at_us"
    " FROM api_keys k JOIN projects p ON p.id = k.project_id"
)


class KeyAdmin:
    """The key administration both storage backends inherit."""

    def _admin(self) -> AbstractContextManager[tuple[Sql, int]]:
        """One write transaction: a statement runner and the storage clock's now."""
        raise NotImplementedError

    def create_project_keys(
        self, project: str, anon_hash: bytes, service_hash: bytes, *, actor: str = "volcano-server"
    ) -> None:
        """Create the project if new and add one anon and one service key to it."""
        with self._admin() as (sql, now):
            sql(
                "INSERT INTO projects (name, created_at_us) VALUES (?, ?)"
                " ON CONFLICT (name) DO NOTHING",
                (project, now),
            )
            project_id = _project_id(sql, project)
            _add_key(sql, now, project_id, anon_hash, kind="anon", actor=actor)
            _add_key(sql, now, project_id, service_hash, kind="service", actor=actor)

    def add_service_key(self, project: str, service_hash: bytes, *, actor: str) -> None:
        """Add a service key to an existing project (its other keys keep working)."""
        with self._admin() as (sql, now):
            project_id = _project_id(sql, project)
            _add_key(sql, now, project_id, service_hash, kind="service", actor=actor)

    def list_keys(self, project: str | None = None) -> list[KeyInfo]:
        """Every key (of `project`, when given), oldest first."""
        where, params = (" WHERE p.name = ?", (project,)) if project is not None else ("", ())
        with self._admin() as (sql, _now):
            rows = sql(
                f"SELECT {_KEY_COLUMNS}{where} ORDER BY p.name, k.created_at_us, k.kind, k.key_id",
                params,
            )
        return [KeyInfo(*row) for row in rows]

    def revoke_key(self, key_id: str, *, actor: str) -> tuple[KeyInfo, bool] | None:
        """Revoke the key with this id; None when there is none.

        Returns the key and whether this call revoked it (False: it already was).
        """
        with self._admin() as (sql, now):
            revoked = sql(
                "UPDATE api_keys SET revoked_at_us = ? WHERE key_id = ? AND revoked_at_us IS NULL"
                " RETURNING kind, project_id",
                (now, key_id),
            )
            if revoked:
                kind, project_id = revoked[0]
                _audit(sql, now, "revoked", key_id, kind=kind, project_id=project_id, actor=actor)
            rows = sql(f"SELECT {_KEY_COLUMNS} WHERE k.key_id = ?", (key_id,))
        return (KeyInfo(*rows[0]), bool(revoked)) if rows else None

    def key_events(self, project: str | None = None) -> list[KeyEvent]:
        """The audit trail (of `project`, when given), oldest first."""
        where, params = (" WHERE p.name = ?", (project,)) if project is not None else ("", ())
        with self._admin() as (sql, _now):
            rows = sql(
                "SELECT e.at_us, e.action, e.key_id, e.kind, p.name, e.actor"  # noqa: S608 - fixed text
                f" FROM key_events e JOIN projects p ON p.id = e.project_id{where}"
                " ORDER BY e.at_us, e.id",
                params,
            )
        return [KeyEvent(*row) for row in rows]

    def record_key_uses(self, uses: Mapping[bytes, int]) -> None:
        """Move each key's "last used" time forward to the one given (by key hash)."""
        if not uses:
            return
        with self._admin() as (sql, _now):
            for key_hash, at_us in sorted(uses.items()):  # one order: no deadlock between servers
                sql(
                    "UPDATE api_keys SET last_used_at_us = ? WHERE key_hash = ?"
                    " AND (last_used_at_us IS NULL OR last_used_at_us < ?)",
                    (at_us, key_hash, at_us),
                )


def _project_id(sql: Sql, project: str) -> int:
    rows = sql("SELECT id FROM projects WHERE name = ?", (project,))
    if not rows:
        raise UnknownProject(project)
    return int(rows[0][0])


def _add_key(
    sql: Sql, now: int, project_id: int, key_hash: bytes, *, kind: KeyKind, actor: str
) -> None:
    sql(
        "INSERT INTO api_keys (key_hash, key_id, project_id, kind, created_at_us)"
        " VALUES (?, ?, ?, ?, ?)",
        (key_hash, key_id(key_hash), project_id, kind, now),
    )
    _audit(sql, now, "created", key_id(key_hash), kind=kind, project_id=project_id, actor=actor)


def _audit(
    sql: Sql, now: int, action: str, key: str, *, kind: str, project_id: int, actor: str
) -> None:
    sql(
        "INSERT INTO key_events (at_us, action, key_id, kind, project_id, actor)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (now, action, key, kind, project_id, actor),
    )
