"""volcano.integrations.django in a real Django project (tests/.../apps/django_project), its
commands run as `python -m django` processes against a real reference server: a command runs
once across concurrent invocations, with the `volcano` command's exit statuses, and
`locked_migrate` migrates once across two "pods"."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import volcano
from tests.integration.frameworks.conftest import (
    APPS,
    ROOT,
    WAIT,
    Process,
    python,
    wait_until,
)

pytestmark = pytest.mark.slow


class Project:
    """The test project's files (database, progress log, flag) and its commands."""

    def __init__(self, tmp_path: Path, env: dict[str, str], spawn: Callable[..., Process]) -> None:
        self.db = tmp_path / "django.sqlite3"
        self.log = tmp_path / "progress.log"
        self.flag = tmp_path / "flag"
        self.env = {
            **env,
            "DJANGO_SETTINGS_MODULE": f"{APPS}.django_project.settings",
            "VOLCANO_TEST_DB": str(self.db),
            "VOLCANO_TEST_LOG": str(self.log),
            "VOLCANO_TEST_FLAG": str(self.flag),
        }
        self._spawn = spawn
        self._count = 0

    def start(self, *args: str, env: dict[str, str] | None = None) -> Process:
        self._count += 1
        return self._spawn(
            f"django-{self._count}", python("-m", "django", *args), {**self.env, **(env or {})}
        )

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            python("-m", "django", *args), env={**self.env, **(env or {})}, capture_output=True,
            text=True, timeout=WAIT, check=False,
        )  # fmt: skip

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def release(self) -> None:
        self.flag.touch()


@pytest.fixture
def django_project(tmp_path: Path, child_env: dict[str, str], spawn) -> Project:
    return Project(tmp_path, child_env, spawn)


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database the project's migrations have run on (once per module; tests copy it)."""
    where = tmp_path_factory.mktemp("django")
    (where / "flag").touch()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": f"{APPS}.django_project.settings",
        "VOLCANO_TEST_DB": str(where / "db.sqlite3"),
        "VOLCANO_TEST_LOG": str(where / "progress.log"),
        "VOLCANO_TEST_FLAG": str(where / "flag"),
    }
    result = subprocess.run(
        python("-m", "django", "migrate", "--verbosity", "0"), env=env, capture_output=True,
        text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return where / "db.sqlite3"


@pytest.fixture
def migrated(django_project: Project, migrated_database: Path) -> Project:
    shutil.copyfile(migrated_database, django_project.db)
    return django_project


class TestLockedCommand:
    def test_a_command_runs_once_across_two_concurrent_invocations(
        self, migrated: Project, client: volcano.Client
    ) -> None:
        """While one invocation runs, a second exits 75 (the `volcano` command's "held")
        with one line saying so, and never runs its handle; the first then exits 0."""
        first = migrated.start("send_reports")
        wait_until(migrated.lines, "the first to start")
        second = migrated.run("send_reports")
        assert second.returncode == 75, second.stderr
        assert second.stderr.startswith(
            "CommandError: 'django:send_reports' is held by another owner; its lease ends in"
        )
        migrated.release()
        assert first.popen.wait(WAIT) == 0, first.output()
        assert [line.split()[0] for line in migrated.lines()] == ["start", "end"]
        assert not client.locks.get("django:send_reports").held

    def test_with_lock_wait_the_second_waits_in_line_then_runs(
        self, migrated: Project, client: volcano.Client
    ) -> None:
        """`--lock-wait`: the second invocation waits in the key's line and runs once the
        first has released, with the next fencing token."""
        first = migrated.start("send_reports")
        wait_until(migrated.lines, "the first to start")
        second = migrated.start("send_reports", "--lock-wait", "30")
        wait_until(
            lambda: client.locks.get("django:send_reports").waiters == 1, "the second in line"
        )
        migrated.release()
        assert first.popen.wait(WAIT) == 0
        assert second.popen.wait(WAIT) == 0
        tokens = [int(line.split()[1]) for line in migrated.lines()]
        assert [line.split()[0] for line in migrated.lines()] == ["start", "end", "start", "end"]
        assert tokens[2] == tokens[0] + 1

    def test_a_lock_lost_while_the_command_runs_exits_76(
        self, migrated: Project, client: volcano.Client
    ) -> None:
        """A lease taken over mid-command (a force release): self.lock turns lost, and the
        command exits 76 with the reason, as `volcano locks run` does."""
        running = migrated.start("send_reports", "--until-lost")
        wait_until(migrated.lines, "the command to start")
        client.locks.force_release("django:send_reports")
        assert running.popen.wait(WAIT) == 76
        assert "CommandError: lost the lock on 'django:send_reports'" in running.output()

    def test_an_unreachable_server_exits_69_and_refused_keys_77(self, migrated: Project) -> None:
        """No lock server: 69; keys the server refuses: 77; the handle never runs."""
        gone = migrated.run("send_reports", env={"VOLCANO_API_URL": "http://127.0.0.1:9"})
        assert gone.returncode == 69, gone.stderr
        refused = migrated.run("send_reports", env={"VOLCANO_SERVICE_KEY": "vk_local_wrong"})
        assert refused.returncode == 77, refused.stderr
        assert "check VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY" in refused.stderr
        assert migrated.lines() == []

    def test_missing_keys_and_a_bad_key_exit_64_with_one_line(self, migrated: Project) -> None:
        """No service key anywhere, or a --lock-key the server would refuse: 64 and the
        reason on one line, never a traceback."""
        missing = migrated.run("send_reports", env={"VOLCANO_SERVICE_KEY": ""})
        assert missing.returncode == 64, missing.stderr
        assert missing.stderr.strip().splitlines() == [
            "CommandError: service_key is required: pass service_key= or set VOLCANO_SERVICE_KEY"
        ]
        bad = migrated.run("send_reports", "--lock-key", "no spaces")
        assert bad.returncode == 64, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        assert bad.stderr.startswith("CommandError: key must")
        assert migrated.lines() == []

    def test_settings_beat_the_environment(self, migrated: Project, sqlite_server) -> None:
        """VOLCANO_API_URL in the settings is used over the environment variable."""
        migrated.release()
        result = migrated.run(
            "send_reports",
            env={
                "VOLCANO_API_URL": "http://127.0.0.1:9",
                "VOLCANO_TEST_SETTINGS_URL": sqlite_server.url,
            },
        )
        assert result.returncode == 0, result.stderr


class TestLockedMigrate:
    def test_two_pods_migrate_once_one_after_the_other(
        self, django_project: Project, client: volcano.Client
    ) -> None:
        """Two `locked_migrate` at once on a fresh database: the first migrates, the second
        waits in line meanwhile, then finds nothing to apply; both exit 0 and the
        migration ran once."""
        first = django_project.start("locked_migrate")
        wait_until(django_project.lines, "the first to migrate")
        second = django_project.start("locked_migrate")
        wait_until(
            lambda: client.locks.get("django:migrate:default").waiters == 1, "the second in line"
        )
        django_project.release()
        assert first.popen.wait(WAIT) == 0, first.output()
        assert second.popen.wait(WAIT) == 0, second.output()
        assert [line.split()[0] for line in django_project.lines()] == ["migrating", "migrated"]
        assert "Applying reports.0001_initial... OK" in first.output()
        assert "No migrations to apply." in second.output()
        with sqlite3.connect(django_project.db) as db:
            assert db.execute("SELECT count(*) FROM reports_report").fetchone() == (0,)
        assert not client.locks.get("django:migrate:default").held


def test_the_commands_are_importable_without_django_settings() -> None:
    """Importing the adapter needs Django installed, not configured (settings are read late)."""
    result = subprocess.run(
        python("-c", "import volcano.integrations.django as d; print(d.SETTINGS[0])"),
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert result.stdout.strip() == "VOLCANO_API_URL", result.stderr
