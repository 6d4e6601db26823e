"""Fixtures of the framework adapters' tests: real processes (Celery workers and beats, Django's
manage.py, uvicorn) against a real reference server, each test in a Volcano project of its own.

Celery's broker is the local Redis (127.0.0.1:6379, or VOLCANO_TEST_REDIS_URL); without it the
Celery tests skip with the reason, or fail with VOLCANO_REQUIRE_REDIS=1 (CI).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.server import Project, create_project

ROOT = Path(__file__).resolve().parents[3]
APPS = "tests.integration.frameworks.apps"
REDIS_URL = os.environ.get("VOLCANO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WAIT = 60.0


def figure(text: str) -> None:
    """Report a measured figure (shown with -s, and in the junit report's stdout)."""
    print(f"FIGURE {text}", flush=True)


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT) -> object:
    """Poll `condition` every 20 ms until it returns something true; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}")


class Process:
    """A child process in a session of its own (so `kill()` takes its whole group), its output
    in a log file that `wait_for` reads."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.argv = list(argv)
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                self.argv,
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = WAIT) -> re.Match[str]:
        """The first match of `pattern` in the output, once it appears."""

        def found() -> re.Match[str] | None:
            if self.popen.poll() is not None and not re.search(pattern, self.output()):
                pytest.fail(f"{self.argv[2:5]} exited {self.popen.returncode}:\n{self.output()}")
            return re.search(pattern, self.output())

        match = wait_until(found, f"{pattern!r} in {self.log.name}", timeout)
        assert isinstance(match, re.Match)
        return match

    def kill(self) -> None:
        """SIGKILL the whole process group: nothing of it can clean up."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, as a supervisor stops it; its exit status."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def stop(self) -> None:
        """Whatever it is doing, stop it and its group (teardown)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


@pytest.fixture
def project(sqlite_server: LiveServer, request: pytest.FixtureRequest) -> Project:
    """A Volcano project of this test's own on the session's reference server."""
    return create_project(sqlite_server.database_url, f"frameworks-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def client(sqlite_server: LiveServer, project: Project) -> Iterator[volcano.Client]:
    with volcano.Client(**project.client_args(sqlite_server.url)) as client:
        yield client


def environment(server: LiveServer, project: Project) -> dict[str, str]:
    """The environment of a child process: `project` on `server`, this checkout importable."""
    env = project.child_env(server.url)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def child_env(sqlite_server: LiveServer, project: Project) -> dict[str, str]:
    """The environment of a child process: the test's project, this checkout importable."""
    return environment(sqlite_server, project)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start child processes (`spawn(name, argv, env)`); all are stopped after the test."""
    started: list[Process] = []

    def start(name: str, argv: Sequence[str], env: dict[str, str]) -> Process:
        process = Process(argv, env, tmp_path / f"{name}.log")
        started.append(process)
        return process

    yield start
    stop_all(started)


def stop_all(processes: Sequence[Process]) -> None:
    """Stop them all at once: each shuts down (a worker, warmly) in parallel."""
    for process in processes:
        if process.popen.poll() is None:
            process.popen.send_signal(signal.SIGTERM)
    for process in processes:
        process.stop()


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The local Redis, Celery's broker; skip (or fail in CI) without it."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        reason = f"the Celery tests need Redis at {REDIS_URL}: {error}"
        if os.environ.get("VOLCANO_REQUIRE_REDIS") == "1":
            pytest.fail(f"{reason}; VOLCANO_REQUIRE_REDIS=1 demands it", pytrace=False)
        pytest.skip(reason)
    return REDIS_URL
