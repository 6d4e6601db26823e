"""Real reference servers for tests: in a thread of the test process, or as a child process.

`serve_in_thread(app)` runs uvicorn on a free loopback port inside the test process (fast to
start; used by most integration tests, like httpx's own test suite). `ServerProcess` runs the
`volcano-server serve` command itself, for what only a process can show: `kill -9`, SIGTERM,
two servers on one database, the CLI's own output.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from volcano_server import ServerConfig
from volcano_server.app._server import Listeners, uvicorn_config
from volcano_server.http._auth import make_project_keys
from volcano_server.storage import open_storage

__all__ = ["DEFAULT_SIGNALS", "Project", "ServerProcess", "create_project", "serve_in_thread"]

_LISTENING = re.compile(r"listening on (https?://\S+)")

# Put before a command line: runs it with SIGINT, SIGTERM and SIGHUP at their defaults, as from a
# terminal. A suite started in the background by a shell without job control (`.ci/run &`)
# inherits SIGINT ignored, and so would every child: a Ctrl-C test would test nohup instead.
# (An exec wrapper, not preexec_fn, which is unsafe with threads.)
DEFAULT_SIGNALS = (
    sys.executable,
    "-c",
    (
        "import os, signal, sys\n"
        "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_DFL)\n"
        "os.execv(sys.argv[1], sys.argv[1:])"
    ),
)


@attrs.frozen
class Project:
    """A project's keys, as `volcano-server keys create` prints them."""

    name: str
    anon_key: str = attrs.field(repr=False)
    service_key: str = attrs.field(repr=False)

    def headers(self) -> dict[str, str]:
        """The two credential headers every lock request carries."""
        return {"apikey": self.anon_key, "Authorization": f"Bearer {self.service_key}"}

    def client_args(self, url: str) -> dict[str, str]:
        """The keyword arguments of `volcano.Client` (or AsyncClient) for this project at `url`."""
        return {"anon_key": self.anon_key, "service_key": self.service_key, "api_url": url}

    def env(self, url: str) -> dict[str, str]:
        """The environment variables the SDK reads."""
        return {
            "VOLCANO_ANON_KEY": self.anon_key,
            "VOLCANO_SERVICE_KEY": self.service_key,
            "VOLCANO_API_URL": url,
        }

    def child_env(self, url: str) -> dict[str, str]:
        """This process's environment with only this project's VOLCANO_* variables."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
        return {**inherited, **self.env(url)}


def create_project(database_url: str, name: str) -> Project:
    """Make keys for `name` in the database directly (what `keys create` does)."""
    storage = open_storage(database_url)
    try:
        keys = make_project_keys(storage, name)
    finally:
        storage.close()
    return Project(name, keys.anon_key, keys.service_key)


@contextlib.contextmanager
def serve_in_thread(
    app: Starlette,
    host: str = "127.0.0.1",
    config: ServerConfig | None = None,
    *,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
) -> Iterator[str]:
    """Serve `app` (made by `create_app`) on a free port in a background thread, as
    `volcano-server serve` would with `config`'s limits; yields its base URL.

    `wrap` puts a middleware of the test's own in front of the app. On the way out, requests
    waiting for a lock are answered first, as `volcano-server` does on SIGTERM.
    """
    uv_config = uvicorn_config(app, config or ServerConfig(), Listeners(host, 0))
    if wrap is not None:
        uv_config.app = wrap(app)
    server = uvicorn.Server(uv_config)
    thread = threading.Thread(target=server.run, name="uvicorn-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the in-thread server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        waits = getattr(app.state, "waits", None)  # a test's own app may have none
        if waits is not None:
            waits.close()
        server.should_exit = True
        thread.join(timeout=20)


class ServerProcess:
    """`volcano-server serve` as a child process on a free (or given) port."""

    def __init__(
        self,
        database_url: str,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """`prefix` runs the command through another, e.g. into a network namespace."""
        self.database_url = database_url
        self.args = list(args)
        self.prefix = list(prefix)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.port = 0
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        return "".join(self._lines)

    def start(self, port: int | None = None, timeout: float = 30.0) -> ServerProcess:
        """Start and wait for the "listening on" line; reuses the last port when restarting."""
        if port is not None:
            self.port = port
        command = [
            *self.prefix,
            sys.executable,
            "-m",
            "volcano_server",
            "serve",
            "--port",
            str(self.port),
            "--db",
            self.database_url,
            *self.args,
        ]
        self._lines = []
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.cwd,
        )
        listening = threading.Event()
        self._reader = threading.Thread(
            target=self._read, args=(self.process, listening), daemon=True
        )
        self._reader.start()
        if not listening.wait(timeout):
            self.kill()
            raise RuntimeError(f"volcano-server did not start:\n{self.log}")
        match = _LISTENING.search(self.log)
        assert match is not None
        self.url = match.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def _read(self, process: subprocess.Popen[str], listening: threading.Event) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self._lines.append(line)
            if _LISTENING.search(line):
                listening.set()
        listening.set()  # exited: let start() fail fast
        process.stderr.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, like a crash."""
        self._signal(signal.SIGKILL)

    def terminate(self) -> int:
        """SIGTERM, then wait for the exit status."""
        return self._signal(signal.SIGTERM)

    def _signal(self, signum: int) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=10)
        return code

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
