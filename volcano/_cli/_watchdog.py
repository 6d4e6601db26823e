"""The watchdog of `volcano locks run`: the command's process group dies when volcano does.

Nothing catches SIGKILL (the OOM killer, `kill -9`, a container's hard stop). A command that
outlived volcano would run on with nobody renewing its lease; the lease expires, the next runner
acquires, and two copies of the job run at once. So before the command starts, volcano starts
this small process, which

1. leads a process group of its own, the one volcano then starts the command in;
2. ignores the signals that volcano forwards to that group or the command sends it (`kill 0`);
3. reads a pipe whose write end only volcano holds: close-on-exec and closed in every child, so
   neither the command nor the watchdog has it;
4. on end of file, which comes when volcano has exited however it died, SIGKILLs the group,
   itself included; on a byte, volcano's word that the command has exited, exits quietly.

There is no race with volcano dying early: end of file waits in the pipe until the watchdog
reads it, however late that is, and the command joins the group only once the watchdog is ready.
Being in the group also keeps the group's id from being reused while anything of it lives, so
the kill never reaches a stranger. (PR_SET_PDEATHSIG would add nothing: it is Linux's alone,
fires on the death of the forking thread rather than the process, and reaches only one process.)
Everything here is POSIX: pipes, process groups and `killpg` work alike on macOS and the BSDs.

volcano runs this file as a script with `python -I -S`: no site, nothing from the environment,
the standard library's `os` and `signal` alone, so it is ready in tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess
    from types import TracebackType
    from typing import Self

READY = b"r"
"""What the watchdog writes on its stdout once it ignores the group's signals."""

STAND_DOWN = b"s"
"""What volcano writes into the pipe once the command has exited: leave the group alone."""

IGNORED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGPIPE,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)
"""The signals a process group is sent in practice (forwarded by volcano, from a terminal, by a
command's `kill 0` or `kill -USR1 0`) that would end or stop the watchdog. SIGKILL and SIGSTOP
cannot be ignored; faults (SIGSEGV and kin) would be the watchdog's own."""


class WatchdogFailed(Exception):
    """The watchdog could not be started, or exited before it was ready."""


class Watchdog:
    """A ready watchdog: start the command in `group`; leave the `with` block once it has exited.

    Leaving the block normally stands the watchdog down (the group is left as it is); leaving it
    by an exception closes the pipe without a word, so the watchdog kills the group.
    """

    def __init__(self, process: subprocess.Popen[bytes], lifeline: int) -> None:
        self._process = process
        self._lifeline = lifeline

    @classmethod
    def start(cls) -> Self:
        """Start a watchdog in a new process group and wait until it is ready.

        Raises:
            WatchdogFailed: It could not be started, or exited before it was ready.
        """
        import subprocess

        lifeline_end, lifeline = os.pipe()  # close-on-exec, both: no child inherits `lifeline`
        ready, ready_end = os.pipe()
        try:
            process = subprocess.Popen(  # noqa: S603 - this interpreter, running this file
                [sys.executable, "-I", "-S", __file__],
                stdin=lifeline_end,
                stdout=ready_end,
                stderr=subprocess.DEVNULL,
                cwd="/",  # keep no directory busy
                process_group=0,
            )
        except OSError as error:
            os.close(lifeline)
            os.close(ready)
            raise WatchdogFailed(f"cannot run {sys.executable}: {error.strerror}") from None
        finally:  # the watchdog's ends are its own now
            os.close(lifeline_end)
            os.close(ready_end)
        try:
            answer = os.read(ready, len(READY))
        finally:
            os.close(ready)
        if answer != READY:
            os.close(lifeline)
            raise WatchdogFailed(f"it exited with status {process.wait()} before it was ready")
        return cls(process, lifeline)

    @property
    def group(self) -> int:
        """The id of the process group the watchdog leads (its pid)."""
        return self._process.pid

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            with contextlib.suppress(BrokenPipeError):  # the group, watchdog too, was killed
                os.write(self._lifeline, STAND_DOWN)
        os.close(self._lifeline)
        self._process.wait()


def _guard() -> None:
    """The watchdog process: wait for volcano's word or its death; kill the group on death."""
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    try:
        os.write(1, READY)  # stdout: volcano waits for this before it starts the command
        word = os.read(0, len(STAND_DOWN))  # stdin: the pipe from volcano
    except OSError:  # volcano stopped listening, or the pipe broke: as good as dead
        word = b""
    if not word:
        os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    _guard()
