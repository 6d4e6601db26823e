"""Reference servers for benchmarks: child processes on SQLite or a fresh PostgreSQL database."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs

from tests.support.server import ServerProcess, create_project

POSTGRES_ADMIN_URLS = (
    os.environ.get("VOLCANO_BENCH_POSTGRES_URL", ""),
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://127.0.0.1:5432/test",
)


@attrs.frozen
class Keys:
    anon: str = attrs.field(repr=False)
    service: str = attrs.field(repr=False)

    def headers(self) -> dict[str, str]:
        return {"apikey": self.anon, "Authorization": f"Bearer {self.service}"}


@attrs.frozen
class Deployment:
    """Running servers on one database, with a project's keys."""

    label: str
    database_url: str
    urls: tuple[str, ...]
    keys: Keys


def make_keys(database_url: str) -> Keys:
    project = create_project(database_url, f"bench-{uuid.uuid4().hex[:8]}")
    return Keys(project.anon_key, project.service_key)


@contextlib.contextmanager
def deployment(
    backend: str, servers: int = 1, *, label: str | None = None, args: tuple[str, ...] = ()
) -> Iterator[Deployment]:
    """`servers` server processes on one fresh database of `backend` ("sqlite" or "postgres")."""
    with fresh_database(backend) as database_url:
        keys = make_keys(database_url)
        running = [ServerProcess(database_url, "--no-access-log", *args) for _ in range(servers)]
        try:
            for server in running:
                server.start()
            urls = tuple(server.url for server in running)
            yield Deployment(label or f"{backend} x{servers}", database_url, urls, keys)
        finally:
            for server in running:
                server.terminate()


@contextlib.contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A fresh, empty database of `backend` ("sqlite" or "postgres"), dropped afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="volcano-bench-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.db'}"
        return
    if backend != "postgres":
        raise ValueError(backend)
    import psycopg

    admin = postgres_admin_url()
    name = f"volcano_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_admin_url() -> str:
    """The first reachable PostgreSQL URL to create benchmark databases from."""
    import psycopg

    for url in POSTGRES_ADMIN_URLS:
        if not url:
            continue
        try:
            with psycopg.connect(url, connect_timeout=3):
                return url
        except psycopg.Error:
            continue
    raise RuntimeError("PostgreSQL is not reachable (set VOLCANO_BENCH_POSTGRES_URL)")


def postgres_available() -> bool:
    try:
        postgres_admin_url()
    except RuntimeError:
        return False
    return True
