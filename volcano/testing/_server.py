"""A throwaway `volcano-server` in a child process, for tests of code that takes locks.

The SDK never imports the server: this module runs its command line (`python -m
volcano_server`) with the interpreter running the tests, so the server comes from the same
environment, and reads the keys that `volcano-server keys create` prints.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterator

    import volcano

__all__ = ["LocalServer", "Project", "ServerStartError", "local_server"]

START_TIMEOUT = 30.0
"""Seconds a server may take to say where it listens (a cold start takes about half a second)."""

_LISTENING = re.compile(r"listening on (http://\S+)")


class ServerStartError(RuntimeError):
    """The server could not be started, or could not make a project's keys."""


class _Credentials:
    """What a project's keys let you build: the environment variables and the two clients."""

    url: str
    anon_key: str
    service_key: str

    def env(self) -> dict[str, str]:
        """VOLCANO_API_URL, VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY, for `volcano.Client()`."""
        return {
            "VOLCANO_API_URL": self.url,
            "VOLCANO_ANON_KEY": self.anon_key,
            "VOLCANO_SERVICE_KEY": self.service_key,
        }

    def client(self, **kwargs: Any) -> volcano.Client:
        """A `volcano.Client` for this project; `kwargs` go to its constructor (e.g. timeout=)."""
        import volcano

        return volcano.Client(
            anon_key=self.anon_key, service_key=self.service_key, api_url=self.url, **kwargs
        )

    def async_client(self, **kwargs: Any) -> volcano.AsyncClient:
        """A `volcano.AsyncClient` for this project; `kwargs` go to its constructor."""
        import volcano

        return volcano.AsyncClient(
            anon_key=self.anon_key, service_key=self.service_key, api_url=self.url, **kwargs
        )


@attrs.frozen
class Project(_Credentials):
    """One project on a local server: its URL and its keys (kept out of `repr()`).

    Projects are isolated: the same lock key in two projects is two locks.
    """

    name: str
    url: str
    anon_key: str = attrs.field(repr=False)
    service_key: str = attrs.field(repr=False)


class LocalServer(_Credentials):
    """A `volcano-server` child process on a free loopback port and a temporary SQLite database.

    Its `url`, `anon_key` and `service_key` are those of a first project made at start-up;
    `new_project()` makes more. Made by `local_server()`, which also stops it.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.database_url = f"sqlite:///{directory / 'volcano.db'}"
        self.log_path = directory / "server.log"
        self.url = ""
        self.anon_key = ""
        self.service_key = ""
        self._names = itertools.count(1)
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<LocalServer {self.url or 'not started'} database={self.database_url!r}>"

    def new_project(self, name: str | None = None) -> Project:
        """Make a new project (a fresh pair of keys) and return it.

        Args:
            name: The project's name; by default `project-N`. The same name twice is the same
                project (with a second pair of keys), so leave it out for isolation.

        Raises:
            ServerStartError: `volcano-server keys create` failed.
        """
        name = name or f"project-{next(self._names)}"
        result = subprocess.run(  # noqa: S603 - our own interpreter running the server's CLI
            [*_server_command(), "keys", "create", "--project", name, "--db", self.database_url],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
        keys = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        # Its VOLCANO_API_URL line is not ours to trust: the first project predates the port.
        if result.returncode != 0 or not {"VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY"} <= set(keys):
            raise ServerStartError(f"could not make a project's keys: {_last_line(result.stderr)}")
        return Project(name, self.url, keys["VOLCANO_ANON_KEY"], keys["VOLCANO_SERVICE_KEY"])

    def start(self) -> None:
        """Start the server, wait until it listens, and make the first project.

        Raises:
            ServerStartError: It did not start (nothing is left running); the message says why.
        """
        first = self.new_project("default")  # also creates the schema before serving
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - see new_project
                [
                    *_server_command(),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--db",
                    self.database_url,
                    "--no-access-log",
                    "--log-level",
                    "info",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self.url = self._wait_until_listening(self._process)
        self.anon_key, self.service_key = first.anon_key, first.service_key

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); calling it again does nothing."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _wait_until_listening(self, process: subprocess.Popen[bytes]) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            log = self.log_path.read_text(errors="replace")
            match = _LISTENING.search(log)
            if match:
                return match.group(1)
            if process.poll() is not None:
                self._process = None
                raise ServerStartError(f"could not start the reference server: {_last_line(log)}")
            time.sleep(0.02)
        self.stop()
        raise ServerStartError(
            f"the reference server did not say where it listens within {START_TIMEOUT:g}s "
            f"(its log: {self.log_path})"
        )


@contextlib.contextmanager
def local_server(directory: str | os.PathLike[str] | None = None) -> Iterator[LocalServer]:
    """Run a throwaway Volcano reference server for the duration of a `with` block.

    ```python
    with volcano.testing.local_server() as server:
        client = volcano.Client(
            anon_key=server.anon_key, service_key=server.service_key, api_url=server.url
        )
    ```

    It needs the server extra (`pip install "volcano[server]"`, or `pip install ".[server]"`
    from a checkout). The server listens on a free loopback port and keeps its SQLite database
    and log in `directory` (default: a temporary directory, deleted afterwards).

    Raises:
        ServerStartError: The server could not start; the message says why (for instance a
            missing server extra).
    """
    temporary = directory is None
    path = Path(tempfile.mkdtemp(prefix="volcano-test-") if directory is None else directory)
    path.mkdir(parents=True, exist_ok=True)
    server = LocalServer(path)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        if temporary:
            shutil.rmtree(path, ignore_errors=True)


def _server_command() -> list[str]:
    return [sys.executable, "-m", "volcano_server"]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
