"""Key lifecycle through `volcano-server keys ...`: rotate, list, revoke and the audit trail,
revocation reaching every server process on the database, and version-1 databases upgraded in
place. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import contextlib
import getpass
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS, LiveServer
from tests.support.databases import fresh_postgres_database, process_database, queued
from tests.support.raw import Locks, Waiter, wait_for
from tests.support.server import Project, ServerProcess, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.http._auth import hash_key
from volcano_server.storage import key_id, open_storage

pytestmark = pytest.mark.slow


def keys(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    """Run `volcano-server keys ARGS --db DB`."""
    return subprocess.run(
        [sys.executable, "-m", "volcano_server", "keys", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def new_project(db: str) -> Project:
    """A project made by `keys create`, as an operator would."""
    name = f"keys-{uuid.uuid4().hex[:8]}"
    made = keys("create", "--project", name, db=db)
    assert made.returncode == 0, made.stderr
    values = dict(line.split("=", 1) for line in made.stdout.splitlines())
    return Project(name, values["VOLCANO_ANON_KEY"], values["VOLCANO_SERVICE_KEY"])


def with_service_key(project: Project, service_key: str) -> Project:
    return Project(project.name, project.anon_key, service_key)


def status(url: str, project: Project) -> int:
    return httpx.get(f"{url}/v1/locks/k", headers=project.headers(), timeout=5).status_code


def table(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()[1:]]


class TestKeyCommands:
    def test_list_shows_ids_kinds_and_times_never_a_secret(self, database_url: str) -> None:
        """keys list --project shows each key's id, kind, project and times; no key, no hash."""
        project = new_project(database_url)
        listed = keys("list", "--project", project.name, db=database_url)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split()[:6] == ["ID", "KIND", "PROJECT", "CREATED", "LAST", "USED"]
        rows = table(listed.stdout)
        assert [(row[0], row[1], row[2]) for row in rows] == [
            (key_id(hash_key(project.anon_key)), "anon", project.name),
            (key_id(hash_key(project.service_key)), "service", project.name),
        ]
        assert all(row[-2:] == ["-", "-"] for row in rows)  # never used, not revoked
        for secret in (project.anon_key, project.service_key):
            assert secret not in listed.stdout
            assert hash_key(secret).hex() not in listed.stdout

    def test_rotate_adds_a_key_and_the_old_one_works_until_revoked(
        self, live_server: LiveServer, database_url: str
    ) -> None:
        """keys rotate prints a new service key; old and new both work; once the old one is
        revoked only the new one does."""
        project = new_project(database_url)
        rotated = keys("rotate", "--project", project.name, db=database_url)
        assert rotated.returncode == 0, rotated.stderr
        (line,) = rotated.stdout.splitlines()
        assert line.startswith("VOLCANO_SERVICE_KEY=vk_local_service_")
        renewed = with_service_key(project, line.split("=", 1)[1])
        assert status(live_server.url, project) == 200
        assert status(live_server.url, renewed) == 200
        old_id = key_id(hash_key(project.service_key))
        assert keys("revoke", old_id, db=database_url).returncode == 0
        wait_for(lambda: status(live_server.url, project) == 401, "the old key refused", 5)
        assert status(live_server.url, renewed) == 200

    def test_revocation_reaches_every_server_process_within_5_seconds(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """Two server processes on one database both refuse a revoked key within 5 s, with a
        401 that says it was revoked."""
        db = process_database(database_url, tmp_path / "two.db")
        project = new_project(db)
        with ServerProcess(db, "--no-access-log") as a, ServerProcess(db, "--no-access-log") as b:
            assert status(a.url, project) == status(b.url, project) == 200  # both cached it
            assert keys("revoke", key_id(hash_key(project.service_key)), db=db).returncode == 0
            for server in (a, b):
                wait_for(lambda s=server: status(s.url, project) == 401, "refused", timeout=5)
                response = httpx.get(f"{server.url}/v1/locks/k", headers=project.headers())
                assert "revoked" in response.json()["error"]["message"]

    def test_revocation_reaches_a_waiter_and_it_is_never_granted(
        self, database_url: str, tmp_path: Path
    ) -> None:
        """A waiter queued with service key 1; key 1 is revoked: within the revocation delay
        (the key cache's 2 s and a heartbeat's 1 s) the waiter is answered 401 and leaves the
        line, and the holder's release (key 2) does not hand it the key (issue 20, B4)."""
        db = process_database(database_url, tmp_path / "revoked.db")
        waiter_keys = new_project(db)
        rotated = keys("rotate", "--project", waiter_keys.name, db=db)
        holder_keys = with_service_key(waiter_keys, rotated.stdout.split("=", 1)[1].strip())
        with (
            ServerProcess(db, "--no-access-log") as server,
            httpx.Client(base_url=server.url, headers=holder_keys.headers()) as holder,
        ):
            owner = str(uuid.uuid4())
            lease = Locks(holder).acquire("k", owner, 60).json()
            waiter = Waiter(
                httpx.Client(base_url=server.url, headers=waiter_keys.headers(), timeout=30),
                "k",
                wait=30,
            )
            wait_for(lambda: queued(db, "k") == 1, "the waiter in line")
            revoked = keys("revoke", key_id(hash_key(waiter_keys.service_key)), db=db)
            assert revoked.returncode == 0, revoked.stderr
            answer = waiter.result(timeout=10)
            assert answer.status_code == 401, answer.text
            assert "revoked" in answer.json()["error"]["message"]
            assert queued(db, "k") == 0
            Locks(holder).release("k", owner, lease["fencing_token"])
            assert Locks(holder).state("k")["held"] is False

    def test_revoking_again_or_an_unknown_id(self, database_url: str) -> None:
        """Revoking twice says it already was (exit 0); an unknown id is one line, exit 1."""
        project = new_project(database_url)
        anon_id = key_id(hash_key(project.anon_key))
        first = keys("revoke", anon_id, db=database_url)
        again = keys("revoke", anon_id, db=database_url)
        unknown = keys("revoke", "key_0000000000000000", db=database_url)
        assert (first.returncode, again.returncode, unknown.returncode) == (0, 0, 1)
        assert first.stdout.strip() == f"{anon_id} (anon key of {project.name}) revoked"
        assert "already revoked" in again.stdout
        assert unknown.stderr.strip() == (
            "volcano-server: no key has the id 'key_0000000000000000' (see keys list)"
        )

    def test_rotating_an_unknown_project_fails_in_one_line(self, database_url: str) -> None:
        """keys rotate never creates a project."""
        result = keys("rotate", "--project", "no-such-project", db=database_url)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert "no project is named 'no-such-project'" in result.stderr

    def test_audit_trail_has_every_change_and_who_made_it(self, database_url: str) -> None:
        """keys audit lists the creation of both keys, the rotation and the revocation, in
        order, each with the operator's user@host."""
        project = new_project(database_url)
        keys("rotate", "--project", project.name, db=database_url)
        keys("revoke", key_id(hash_key(project.service_key)), db=database_url)
        audit = keys("audit", "--project", project.name, db=database_url)
        assert audit.returncode == 0, audit.stderr
        rows = table(audit.stdout)
        assert [(row[1], row[3]) for row in rows] == [
            ("created", "anon"),
            ("created", "service"),
            ("created", "service"),
            ("revoked", "service"),
        ]
        assert {row[-1] for row in rows} == {f"{getpass.getuser()}@{socket.gethostname()}"}

    def test_last_use_is_recorded(self, database_url: str) -> None:
        """A server notes when each key was last used and writes it in the background."""
        project = new_project(database_url)
        config = ServerConfig(
            database_url=database_url, access_log=False, key_use_flush_seconds=0.05
        )
        with serve_in_thread(create_app(config), config=config) as url:
            assert status(url, project) == 200

            def used() -> bool:
                rows = table(keys("list", "--project", project.name, db=database_url).stdout)
                return all(row[4] != "-" for row in rows)

            wait_for(used, "both keys' last use in keys list")


@contextlib.contextmanager
def version_1_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database at schema version 1 (before key ids), made by the backends' own first
    migration step, holding one project with one anon and one service key."""
    anon, service = "vk_anon_old", "vk_service_old"
    rows = [(hash_key(anon), "anon"), (hash_key(service), "service")]
    insert_key = "INSERT INTO api_keys (key_hash, project_id, kind, created_at_us) VALUES"
    if backend == "sqlite":
        from volcano_server.storage._sqlite import _upgrade

        path = tmp_path / "v1.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            _upgrade(conn, str(path), target=1)
            conn.execute("INSERT INTO projects (id, name, created_at_us) VALUES (1, 'old', 1)")
            conn.executemany(f"{insert_key} (?, 1, ?, 1)", rows)
        yield f"sqlite:///{path}"
        return
    import psycopg

    from volcano_server.storage._postgres import _MIGRATIONS

    with fresh_postgres_database("volcano_v1") as url:
        with psycopg.connect(url) as conn:
            for statement in _MIGRATIONS[1]:
                conn.execute(statement)
            conn.execute("CREATE TABLE volcano_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO volcano_schema (version) VALUES (1)")
            conn.execute("INSERT INTO projects (id, name, created_at_us) VALUES (1, 'old', 1)")
            conn.cursor().executemany(f"{insert_key} (%s, 1, %s, 1)", rows)
        yield url


class TestSchemaUpgrade:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_version_1_database_is_upgraded_in_place(self, backend: str, tmp_path: Path) -> None:
        """Opening a version-1 database upgrades it: its keys keep working, get their ids,
        appear in keys list and in the audit trail, and can be revoked."""
        with version_1_database(backend, tmp_path) as url:
            old = Project("old", "vk_anon_old", "vk_service_old")
            app = create_app(ServerConfig(database_url=url, access_log=False))
            with serve_in_thread(app) as server:
                assert status(server, old) == 200
            storage = open_storage(url)
            try:
                listed = storage.list_keys("old")
                events = storage.key_events("old")
            finally:
                storage.close()
            assert [key.key_id for key in listed] == [
                key_id(hash_key(old.anon_key)),
                key_id(hash_key(old.service_key)),
            ]
            assert [(event.action, event.actor) for event in events] == [
                ("created", "before the audit trail")
            ] * 2
            assert keys("revoke", listed[1].key_id, db=url).returncode == 0
