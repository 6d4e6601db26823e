"""The command line on PostgreSQL: migrations from several processes, unreachable databases,
databases whose commits a crash can lose, URLs naming several hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.databases import fresh_postgres_database, scalar
from tests.support.raw import Locks, new_id
from tests.support.server import ServerProcess, create_project
from volcano_server.storage._postgres import _SCHEMA_VERSION

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

UNREACHABLE = "postgresql://volcano:hunter2@127.0.0.1:1/volcano"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "volcano_server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


class TestMigrate:
    def test_concurrent_migrations_from_several_processes(self) -> None:
        """Eight `migrate` processes started at once on an empty database all succeed, and the
        schema ends at the newest version with every table."""
        with fresh_postgres_database("volcano_migrate") as url:
            command = [sys.executable, "-m", "volcano_server", "migrate", "--db", url]
            processes = [
                subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(8)
            ]
            results = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in processes]
            for process in processes:
                if process.stderr:
                    process.stderr.close()
            assert [code for code, _ in results] == [0] * 8, results
            assert scalar(url, "SELECT version FROM volcano_schema") == _SCHEMA_VERSION
            tables = scalar(
                url,
                "SELECT count(*) FROM information_schema.tables WHERE table_name IN"
                " ('projects', 'api_keys', 'locks', 'request_outcomes', 'key_events',"
                " 'lock_waiters', 'servers')",
            )
            assert tables == 7

    def test_newer_schema_is_refused_in_one_line(self) -> None:
        """A database migrated by a newer server is not touched: one line says why."""
        with fresh_postgres_database("volcano_newer") as url:
            assert cli("migrate", "--db", url).returncode == 0
            import psycopg

            with psycopg.connect(url) as conn:
                conn.execute("UPDATE volcano_schema SET version = 99")
            result = cli("migrate", "--db", url)
        assert result.returncode == 1
        assert "schema version 99" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    def test_database_url_from_environment(self, pg_url: str) -> None:
        """VOLCANO_DATABASE_URL routes keys create to PostgreSQL, like --db."""
        result = cli(
            "keys", "create", "--project", "from-env", env={"VOLCANO_DATABASE_URL": pg_url}
        )
        assert result.returncode == 0, result.stderr
        assert scalar(pg_url, "SELECT count(*) FROM projects WHERE name = 'from-env'") == 1


class TestUnreachable:
    @pytest.mark.parametrize(
        "args",
        [("migrate",), ("keys", "create", "--project", "p"), ("serve", "--port", "0")],
    )
    def test_unreachable_database_is_one_clear_line(self, args: tuple[str, ...]) -> None:
        """Nothing listening at the URL: exit 1 within seconds, one line, no traceback, and
        the password masked."""
        started = time.monotonic()
        result = cli(*args, "--db", UNREACHABLE)
        assert time.monotonic() - started < 20
        assert result.returncode == 1
        assert "cannot open the database postgresql://volcano:***@127.0.0.1:1/volcano" in (
            result.stderr
        )
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "hunter2" not in result.stderr + result.stdout

    def test_password_in_query_is_masked(self) -> None:
        """A password given as a URL parameter is masked too."""
        result = cli("migrate", "--db", "postgresql://volcano@127.0.0.1:1/volcano?password=hunter2")
        assert result.returncode == 1
        assert "password=***" in result.stderr
        assert "hunter2" not in result.stderr

    def test_bad_pool_size_is_one_line(self) -> None:
        """The server's own URL parameter is checked before connecting."""
        result = cli("migrate", "--db", "postgresql://127.0.0.1:1/volcano?pool_size=0")
        assert result.returncode == 1
        assert "pool_size must be 1 to 1000" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


class TestDurability:
    def test_synchronous_commit_off_is_refused_in_one_line(self) -> None:
        """A database whose sessions commit asynchronously (a crash loses acknowledged leases,
        and their fencing tokens are issued again) is refused at start: exit 1, one line."""
        with fresh_postgres_database("volcano_async") as url:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                name = conn.execute("SELECT current_database()").fetchone()
                assert name is not None
                conn.execute(f"ALTER DATABASE {name[0]} SET synchronous_commit = off")
            result = cli("serve", "--port", "0", "--db", url)
        assert result.returncode == 1
        assert "refusing the database" in result.stderr
        assert "synchronous_commit is off" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


class TestSeveralHosts:
    def test_the_host_that_takes_writes_is_found_and_the_missing_standby_warned(self) -> None:
        """A URL naming a host that refuses connections before the real one: the server
        serves through the second, and warns that no synchronous standby backs a failover."""
        with fresh_postgres_database("volcano_hosts") as url:
            parts = urlsplit(url)
            user, _, where = parts.netloc.rpartition("@")
            both = parts._replace(
                netloc=f"{user}@127.0.0.1:1,{where}" if user else f"127.0.0.1:1,{where}"
            )
            project = create_project(both.geturl(), "hosts")
            with ServerProcess(both.geturl(), "--no-access-log") as server:
                with httpx.Client(base_url=server.url, headers=project.headers()) as http:
                    acquired = Locks(http).acquire("k", new_id(), 30)
                log = server.log
        assert acquired.status_code == 200, acquired.text
        assert "DURABILITY: the URL names 2 hosts" in log
