"""`serve --daemon`: a server in the background that is listening by the time the command returns.

`volcano-server serve &` followed by a client races the server, which may not listen yet. With
`--daemon` the command forks: the child leaves the terminal's session (closing the shell does
not stop it), sends its output to `--log-file` and serves; the parent waits until the child
says it listens, then exits 0 saying where (the URL alone on stdout, for a script to capture
and hand to `keys create --api-url`), or until the child has died, then exits 1 with the
end of its log. So the next line of a script always finds the server listening.

`--pid-file` (with or without `--daemon`) holds the server's pid from the moment it listens
until it stops cleanly, so `kill "$(cat FILE)"` stops the server that wrote it.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs

__all__ = ["Announce", "LogFile", "open_log", "run_in_background"]

# The server's own start-up is bounded (database connect and pool waits of 3 s, a migration);
# past this the parent stops waiting and says so, leaving the child to carry on.
_START_SECONDS = 60.0


@attrs.frozen
class Announce:
    """What the serving process tells others: its pid file, and a parent waiting to hear."""

    pid_file: Path | None = None
    parent: int | None = None  # the write end of the pipe a waiting parent reads

    def listening(self, url: str) -> None:
        """The server listens at `url`: write the pid file, then tell the parent (once)."""
        if self.pid_file is not None:
            temporary = self.pid_file.with_name(f".{self.pid_file.name}.{os.getpid()}")
            temporary.write_text(f"{os.getpid()}\n")
            temporary.replace(self.pid_file)
        if self.parent is not None:
            os.write(self.parent, f"{url}\n".encode())
            os.close(self.parent)

    def stopped(self) -> None:
        """The server stopped cleanly: remove the pid file, if it is still this process's."""
        if self.pid_file is None:
            return
        with contextlib.suppress(OSError):
            if self.pid_file.read_text().strip() == str(os.getpid()):
                self.pid_file.unlink()


@attrs.frozen
class LogFile:
    """A log file open for appending."""

    path: str
    fd: int


def open_log(path: str) -> LogFile:
    """Open the log file `path` for appending (OSError when it cannot be).

    A new one is readable by its owner only, whatever the umask: its lines name tenants' keys
    and labels. (One that exists keeps its mode: an operator may have given a group access.)
    """
    return LogFile(path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))


def _log_to(log: LogFile) -> None:
    """Make `log` this process's stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log.fd, 1)
    os.dup2(log.fd, 2)
    os.close(log.fd)


def run_in_background(start: Callable[[Announce], int], log: LogFile, announce: Announce) -> int:
    """Run `start` in a detached child logging to `log`; 0 once it listens, 1 if it died.

    The child returns `start`'s status too, so both processes leave through the caller.
    """
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: a session of its own, no terminal, its output in the log
        os.close(read_end)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        _log_to(log)
        return start(attrs.evolve(announce, parent=write_end))
    os.close(write_end)
    os.close(log.fd)
    try:
        url, timed_out = _read_until_closed(read_end)
    finally:
        os.close(read_end)
    if url:
        print(
            f"volcano-server listening on {url} (pid {pid}); stop it with: kill {pid}",
            file=sys.stderr,
        )
        print(url)  # alone on stdout, for `url=$(volcano-server serve --daemon ...)`
        return 0
    why = f"is not listening after {_START_SECONDS:g} s" if timed_out else "did not start"
    print(f"volcano-server {why} (log: {log.path}): {_last_line(log.path)}", file=sys.stderr)
    return 1


def _read_until_closed(fd: int) -> tuple[str, bool]:
    """What the child wrote before closing its end or dying, and whether time ran out first."""
    deadline = time.monotonic() + _START_SECONDS
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        chunk = os.read(fd, 1024) if ready else b""
        if not chunk:
            return data.decode(errors="replace").strip(), not ready
        data += chunk
    return data.decode(errors="replace").strip(), True


def _last_line(path: str) -> str:
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError as exc:
        return f"cannot read the log: {exc.strerror}"
    return lines[-1] if lines else "(the log is empty)"
