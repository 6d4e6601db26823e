"""Test databases: a fresh PostgreSQL database per run, and small helpers over both backends.

The PostgreSQL server is `$VOLCANO_TEST_POSTGRES_URL` (any database on it that the user may
connect to; the tests create their own beside it), else 127.0.0.1:5432 with trust auth as CI
provides it (database `test`, user `postgres` or the current user). When it cannot be reached
the postgres tests skip with the reason, unless `$VOLCANO_REQUIRE_POSTGRES=1` (CI): then they
fail.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

__all__ = [
    "admin_url",
    "allow_connections",
    "execute",
    "fresh_postgres_database",
    "heartbeats_stalled",
    "is_postgres",
    "process_database",
    "queued",
    "require_postgres",
    "scalar",
    "terminate_backends",
]

# CI's server (trust auth): as user postgres, else as the user running the tests (e.g. root).
DEFAULT_ADMIN_URLS = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://127.0.0.1:5432/test",
)


@functools.cache
def _usable_admin_url() -> tuple[str | None, str]:
    """The first test-server URL that accepts a connection, or None and why none did."""
    import psycopg

    override = os.environ.get("VOLCANO_TEST_POSTGRES_URL")
    candidates = (override,) if override else DEFAULT_ADMIN_URLS
    errors = []
    for url in candidates:
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            errors.append(f"{_display(url)}: {' '.join(str(exc).split())}")
        else:
            return url, ""
    return None, "; ".join(errors)


def admin_url() -> str:
    """A URL of the test PostgreSQL server, for creating and dropping databases."""
    require_postgres()
    url, _ = _usable_admin_url()
    assert url is not None
    return url


def is_postgres(database_url: str) -> bool:
    """Whether `database_url` names a PostgreSQL database."""
    return database_url.split(":", 1)[0].lower() in ("postgresql", "postgres")


def require_postgres() -> None:
    """Skip (locally) or fail (with VOLCANO_REQUIRE_POSTGRES=1) when PostgreSQL is unusable."""
    url, why = _usable_admin_url()
    if url is not None:
        return
    reason = f"PostgreSQL is not usable ({why})"
    if os.environ.get("VOLCANO_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason}; VOLCANO_REQUIRE_POSTGRES=1 demands it", pytrace=False)
    pytest.skip(f"{reason}; set VOLCANO_TEST_POSTGRES_URL to run the postgres tests")


@contextlib.contextmanager
def fresh_postgres_database(prefix: str = "volcano_test") -> Iterator[str]:
    """A new, empty database on the test server; dropped afterwards, even after a failure."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlsplit(admin_url())._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin_url(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def process_database(database_url: str, sqlite_path: Path) -> str:
    """The database for a test that starts server processes of its own.

    SQLite: a new file at `sqlite_path`. PostgreSQL: the session's database, where the test
    keeps to a project of its own.
    """
    return database_url if is_postgres(database_url) else f"sqlite:///{sqlite_path}"


def _database_name(database_url: str) -> str:
    return urlsplit(database_url).path.lstrip("/")


def terminate_backends(database_url: str) -> int:
    """End every other session on the database, as a restart would; returns how many."""
    import psycopg

    with psycopg.connect(admin_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (_database_name(database_url),),
        ).fetchone()
    return int(row[0]) if row else 0


def allow_connections(database_url: str, allowed: bool) -> None:
    """Let new sessions into the database, or refuse them (existing ones stay)."""
    import psycopg
    from psycopg import sql

    statement = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
        sql.Identifier(_database_name(database_url)), sql.SQL("true" if allowed else "false")
    )
    with psycopg.connect(admin_url(), autocommit=True) as conn:
        conn.execute(statement)


def scalar(database_url: str, query: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of `query` (placeholders written `?`), on either
    backend, through the driver directly."""
    if is_postgres(database_url):
        import psycopg

        with psycopg.connect(database_url) as conn:
            row = conn.execute(query.replace("?", "%s"), tuple(params)).fetchone()
    else:
        path = database_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            row = conn.execute(query, tuple(params)).fetchone()
    assert row is not None
    return row[0]


def execute(database_url: str, statement: str, params: Sequence[Any] = ()) -> int:
    """Run one writing statement (placeholders written `?`) and commit; how many rows it
    changed. For a test playing another server, or a purge, on either backend."""
    if is_postgres(database_url):
        import psycopg

        with psycopg.connect(database_url) as conn:
            return conn.execute(statement.replace("?", "%s"), tuple(params)).rowcount
    path = database_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn, conn:
        return conn.execute(statement, tuple(params)).rowcount


@contextlib.contextmanager
def heartbeats_stalled(database_url: str) -> Iterator[None]:
    """No server on the database can write its heartbeat meanwhile (on PostgreSQL the
    `servers` table is locked; on SQLite the whole database, so nothing else is written)."""
    if is_postgres(database_url):
        import psycopg

        with psycopg.connect(database_url) as conn:
            conn.execute("LOCK TABLE servers IN EXCLUSIVE MODE")
            yield
        return
    path = database_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


def queued(database_url: str, key: str) -> int:
    """How many callers wait in the queue of `key` (in any project), read from the database."""
    return int(
        scalar(
            database_url,
            "SELECT count(*) FROM lock_waiters WHERE key = ? AND state = 'waiting'",
            (key,),
        )
    )


def _display(url: str) -> str:
    from volcano_server.storage import redact_url

    return redact_url(url)
