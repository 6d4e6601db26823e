"""Fixtures for the `volcano` command's tests: the installed command, run as a child process
against a real reference server, with a project of each test's own in its environment."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.server import DEFAULT_SIGNALS, create_project

VOLCANO = Path(sys.executable).with_name("volcano")
"""The console script pip installed beside this interpreter: what users run."""

WAIT = 60.0
"""A generous bound on anything that should happen within a second or two."""


@attrs.frozen
class Shell:
    """The `volcano` command with one project's keys in its environment, and an SDK client of
    the same project to look at (or interfere with) the locks it takes."""

    env: dict[str, str] = attrs.field(repr=False)
    client: volcano.Client
    database_url: str  # the server's, to see who waits in a queue

    def run(
        self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `volcano ARGS...` to its end (with `env` instead of the project's, if given)."""
        return subprocess.run(
            [str(VOLCANO), *args],
            env=self.env if env is None else env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start `volcano ARGS...` and return at once."""
        return self.start_with(self.env, *args)

    def start_with(self, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        """Start `volcano ARGS...` with `env` and return at once."""
        return subprocess.Popen(
            [*DEFAULT_SIGNALS, str(VOLCANO), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def shell(sqlite_server: LiveServer, request: pytest.FixtureRequest) -> Iterator[Shell]:
    """`volcano` in a project of this test's own (so no test sees another's locks)."""
    project = create_project(sqlite_server.database_url, request.node.nodeid[:100])
    with volcano.Client(**project.client_args(sqlite_server.url)) as client:
        yield Shell(project.child_env(sqlite_server.url), client, sqlite_server.database_url)


def one_line(stderr: str) -> str:
    """The single `volcano: ...` line a failure prints; fails the test on anything else."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("volcano: "), stderr
    return lines[0]


def wait_for(path: Path, process: subprocess.Popen[str] | None = None) -> str:
    """Wait until `path` holds a line (written by a command under test); return its text."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        if process is not None and process.poll() is not None:
            raise AssertionError(f"volcano exited with {process.returncode}: {process.stderr}")
        time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for `process` (killing it past the bound) and return (status, stdout, stderr)."""
    try:
        out, err = process.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"volcano did not exit: {err}") from None
    return process.returncode, out, err
