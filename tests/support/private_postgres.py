"""A PostgreSQL cluster of the test's own, on one host of a `Lab`, from the installed binaries.

    with PrivatePostgres(lab, "db") as pg:
        url = pg.create_database()          # postgresql://postgres@<db's address>:5432/<new>

    with (
        PrivatePostgres(lab, "pg1", durable=True, settings=SYNC) as primary,
        primary.standby("pg2") as standby,  # pg_basebackup, streaming from pg1 as "pg2"
    ):
        primary.kill()                      # SIGKILL to every process of the cluster at once
        standby.promote()

The machine's own PostgreSQL listens on loopback only, where no fault can reach its packets; this
one listens on the lab host's address, so every byte between a server and it crosses the lab's
switch. It runs as the `postgres` system user (PostgreSQL refuses root) from a temporary
directory and trusts the lab's addresses, for replication too. By default it skips fsync
(nothing here survives the test); `durable=True` keeps fsync and full-page writes on, as in
production, for the tests of what a crash or a failover keeps. It is stopped, and its directory
removed, when the block ends; it also gets SIGQUIT (immediate shutdown) if the test process
dies, and the next cluster removes the directory left behind.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .netlab import Lab

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["PrivatePostgres", "binaries"]

_USER = "postgres"
_FOLDER_PREFIX = "volcano-pg-"
_START_SECONDS = 60.0


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory, None when there is none."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def unavailable() -> str | None:
    """Why a private cluster cannot run here, or None when it can."""
    if binaries() is None:
        return "no PostgreSQL binaries under /usr/lib/postgresql/*/bin"
    try:
        pwd.getpwnam(_USER)
    except KeyError:
        return f"no {_USER!r} system user to run PostgreSQL as"
    return None


def _remove_stale_folders() -> None:
    """Remove the directories of clusters whose test process is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*-*"):
        pid = folder.name.removeprefix(_FOLDER_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


class PrivatePostgres:
    """initdb (or pg_basebackup from `primary`), then postgres, on `host` of `lab`; a context
    manager.

    `settings` are added to postgresql.conf (values as written there, quoted where needed).
    A cluster made with `primary` is a hot standby streaming from it, named `host`
    (`cluster_name`, which is the application name `synchronous_standby_names` matches).
    """

    def __init__(
        self,
        lab: Lab,
        host: str,
        *,
        port: int = 5432,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        primary: PrivatePostgres | None = None,
    ) -> None:
        self.lab = lab
        self.host = host
        self.port = port
        self.durable = durable
        self.settings = dict(settings or {})
        self.primary = primary
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries")
        self._bin = bin_dir
        self._folder: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The host's address, where the cluster listens."""
        return self.lab.address(self.host)

    @property
    def url(self) -> str:
        """The maintenance database's URL."""
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        return f"postgresql://{_USER}@{self.address}:{self.port}/{name}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        name = new_database_name()
        self.sql(f"CREATE DATABASE {name}")
        return self.database_url(name)

    def standby(self, host: str, *, settings: dict[str, str] | None = None) -> PrivatePostgres:
        """A hot standby of this cluster on `host` (not started until its block is entered)."""
        # Promoted, it runs alone, as a failover manager leaves a new primary that has no
        # standby yet (Patroni's synchronous_mode, not strict): its commits wait for nobody.
        named = {"cluster_name": f"'{host}'", "synchronous_standby_names": "''", **(settings or {})}
        return PrivatePostgres(
            self.lab, host, port=self.port, durable=self.durable, settings=named, primary=self
        )

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement through psql on the cluster's host; its unaligned output."""
        assert self._folder is not None
        psql = [str(self._bin / "psql"), "-XAtq", "-h", str(self._folder), "-p", str(self.port)]
        return self._run([*psql, "-d", database, "-c", statement], timeout=30)

    def promote(self) -> None:
        """Make this standby a primary; returns once it accepts writes."""
        if self.sql("SELECT pg_promote(true, 60)") != "t":
            raise RuntimeError(f"{self.host} was not promoted within 60 s")

    def kill(self) -> None:
        """SIGKILL to every process of the cluster, all stopped first, as when its machine dies
        with the kernel still there to close its sockets. The directory stays, for `start`."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        pids = [process.pid, *_children(process.pid)]
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
        process.wait(30)

    def stop(self, mode: Literal["fast", "immediate"]) -> None:
        """Shut down (fast: SIGINT, sessions ended and a checkpoint; immediate: SIGQUIT, crash
        recovery at the next start); returns once postgres has exited. The data stays."""
        process = self._process
        assert process is not None
        process.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
        process.wait(60)

    def _run(self, argv: list[str], *, timeout: float) -> str:
        """`argv` as the postgres user on the cluster's host; its output, or RuntimeError."""
        done = subprocess.run(
            self._as_postgres(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def _as_postgres(self, argv: list[str], pdeathsig: str = "KILL") -> list[str]:
        user = ["setpriv", "--reuid", _USER, "--regid", _USER, "--init-groups"]
        namespace = self.lab.namespace(self.host)
        inside = ["ip", "netns", "exec", namespace] if namespace else []
        return [*inside, *user, "--pdeathsig", pdeathsig, "--", *argv]

    def __enter__(self) -> Self:
        _remove_stale_folders()
        folder = Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-"))
        self._folder = folder
        try:
            shutil.chown(folder, _USER, _USER)
            if self.primary is None:
                self._initdb(folder / "data")
            else:
                self._basebackup(self.primary, folder / "data")
            self._configure(folder / "data")
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def start(self) -> None:
        """Start postgres on the cluster's data (made, or left by `kill` or `stop`)."""
        folder = self._folder
        assert folder is not None
        with (folder / "log").open("ab") as log:  # the child keeps its own copy
            self._process = subprocess.Popen(
                self._as_postgres(
                    [str(self._bin / "postgres"), "-D", str(folder / "data")], "QUIT"
                ),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self._wait_ready()

    def _initdb(self, data: Path) -> None:
        initdb = [str(self._bin / "initdb"), "-D", str(data), "-A", "trust", "-U", _USER]
        self._run([*initdb, "--no-sync"], timeout=120)
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.lab.subnet} trust\n")
            hba.write(f"host replication all {self.lab.subnet} trust\n")

    def _basebackup(self, primary: PrivatePostgres, data: Path) -> None:
        """A copy of `primary` that streams from it (-R: standby.signal, primary_conninfo)."""
        backup = [str(self._bin / "pg_basebackup"), "-D", str(data), "-R", "-X", "stream"]
        where = ["-h", primary.address, "-p", str(primary.port), "-U", _USER, "--no-sync"]
        self._run([*backup, *where, "-c", "fast"], timeout=120)

    def _configure(self, data: Path) -> None:
        """Append this cluster's settings; later lines win over a copied primary's."""
        settings = {
            "listen_addresses": f"'{self.address}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{data.parent}'",
            "max_connections": "200",
            "fsync": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "log_min_messages": "warning",
            **self.settings,
        }
        with (data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def _wait_ready(self) -> None:
        assert self._process is not None
        assert self._folder is not None
        deadline = time.monotonic() + _START_SECONDS
        while True:
            if self._process.poll() is not None:
                log = (self._folder / "log").read_text(errors="replace")
                raise RuntimeError(f"postgres exited with {self._process.returncode}:\n{log}")
            with contextlib.suppress(RuntimeError):
                self.sql("SELECT 1")
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start within {_START_SECONDS:g}s")
            time.sleep(0.1)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the cluster (immediate shutdown) and remove its directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGQUIT)  # immediate shutdown, children included
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def new_database_name() -> str:
    """A fresh database name."""
    return f"volcano_{uuid.uuid4().hex[:12]}"


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a postmaster's backends and helpers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name, in parentheses, may hold spaces: the fields follow its end.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found
