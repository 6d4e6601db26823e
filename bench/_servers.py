"""Reference servers for benchmarks: child processes on SQLite or a fresh PostgreSQL database."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs

from volcano_server._auth import make_project_keys
from volcano_server.storage import open_storage

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


class _Server:
    def __init__(self, database_url: str, args: list[str]) -> None:
        command = [
            sys.executable,
            "-m",
            "volcano_server",
            "serve",
            "--port",
            "0",
            "--db",
            database_url,
            "--no-access-log",
            *args,
        ]
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self.url = ""
        ready = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                match = re.search(r"listening on (http://\S+)", line)
                if match:
                    self.url = match.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not self.url:
            self.stop()
            raise RuntimeError(f"volcano-server did not start on {database_url}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def make_keys(database_url: str) -> Keys:
    storage = open_storage(database_url)
    try:
        keys = make_project_keys(storage, f"bench-{uuid.uuid4().hex[:8]}")
    finally:
        storage.close()
    return Keys(keys.anon_key, keys.service_key)


@contextlib.contextmanager
def deployment(
    backend: str, servers: int = 1, *, label: str | None = None, args: tuple[str, ...] = ()
) -> Iterator[Deployment]:
    """`servers` server processes on one fresh database of `backend` ("sqlite" or "postgres")."""
    with _database(backend) as database_url:
        keys = make_keys(database_url)
        running = [_Server(database_url, list(args)) for _ in range(servers)]
        try:
            yield Deployment(
                label or f"{backend} x{servers}", database_url, tuple(s.url for s in running), keys
            )
        finally:
            for server in running:
                server.stop()


@contextlib.contextmanager
def _database(backend: str) -> Iterator[str]:
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


def wait_healthy(url: str, timeout: float = 10.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} is not healthy")
        time.sleep(0.05)
