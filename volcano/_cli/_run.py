"""`volcano locks run`: hold a lock for exactly as long as a command runs.

The order of work: install signal handlers; acquire (a signal now stops volcano before the
command starts); start the watchdog (`_watchdog`), and the command in the watchdog's process
group, with VOLCANO_LOCK_KEY and VOLCANO_FENCING_TOKEN; wait until it exits or the guard reports
ownership lost; on loss, SIGTERM the command's group, SIGKILL it after the grace period, and
exit 76; otherwise stand the watchdog down, release and exit with the command's status. While
the command runs, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to volcano go to the command's group,
and the lease is released only after the command exits. If volcano dies without a word (SIGKILL),
the watchdog kills the group, and the lease is left to expire.

Renewal is `with_lock`'s: the guard renews in the background and says when ownership is lost.
The command's own process group lets volcano stop everything the command started (a shell's
children too) and keeps a terminal's Ctrl-C from reaching the command twice; in exchange the
command does not own the terminal, so when volcano's stdin is one, the command's is /dev/null
(a read gets end of file instead of stopping the command for good).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from ._exit import Exit, Failure
from ._parser import acquisition_options
from ._watchdog import Watchdog, WatchdogFailed

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from types import FrameType

    import volcano

    from ._logs import HeldWarnings

    _Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def run(client: volcano.Client, args: argparse.Namespace, held: HeldWarnings) -> int:
    """Acquire `args.key`, run `args.command` under it, and return the exit status.

    Raises:
        volcano.Error: Acquisition failed.
        Failure: A signal arrived before the command started, or it could not be started.
    """
    command = _Command(args.command)
    command.catch_signals()
    try:
        with client.locks.with_lock(args.key, **acquisition_options(args)) as guard:
            status = command.run(args.key, guard, args.grace)
            warnings_before_release = len(held.records)
        return _outcome(args.key, guard, status, held.records[warnings_before_release:])
    except _Interrupted as stop:
        name = signal.Signals(stop.signum).name
        raise Failure(Exit.SIGNALLED + stop.signum, f"{name} before the command started") from None
    finally:
        command.restore_signals()


def _outcome(
    key: str,
    guard: volcano.LockGuard,
    status: int | None,
    release_warnings: Sequence[logging.LogRecord],
) -> int:
    """The exit status once the guard has exited: the command's, or 76 when ownership was lost."""
    if status is None:  # lost while the command ran; reported when it was stopped
        return Exit.LOST
    if guard.lost:  # the release was refused: ownership had ended before a renewal noticed
        _report(f"the lock on {key!r} was lost while the command ran: {guard.lost_reason}")
        return Exit.LOST
    if release_warnings:  # the command is done; the lease lingers until it expires
        _report(
            f"the lock on {key!r} stays held until {guard.lease.expires_at:%Y-%m-%dT%H:%M:%SZ}: "
            f"{release_warnings[-1].getMessage()}"
        )
    return status


def _report(line: str) -> None:
    print(f"volcano: {line}", file=sys.stderr, flush=True)


class _Phase(enum.Enum):
    ACQUIRING = "acquiring"
    RUNNING = "running"
    FINISHING = "finishing"


class _Interrupted(BaseException):
    """A signal arrived before there was a command to pass it to: stop acquiring."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Command:
    """The command's process group, and the signal handlers that look after it.

    Signal handlers run in the main thread between bytecodes. While acquiring, a signal raises
    `_Interrupted` (so a long acquisition can be abandoned); while the command runs, it is
    passed on to the command's group (kept until the process exists, if it arrives while it is
    being started); once the command has exited, signals are ignored while the lease is released.
    """

    def __init__(self, argv: Sequence[str]) -> None:
        self._argv = list(argv)
        self._phase = _Phase.ACQUIRING
        self._group: int | None = None  # the command's process group, once it has started
        self._pending: list[int] = []
        self._previous: dict[int, _Handler] = {}

    def catch_signals(self) -> None:
        """Handle the forwarded signals, except those volcano was started ignoring."""
        for signum in FORWARDED:
            previous = signal.getsignal(signum)
            if previous is None or previous == signal.SIG_IGN:  # nohup: the caller said ignore
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._on_signal)

    def restore_signals(self) -> None:
        """Put back the handlers `catch_signals` replaced."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def run(self, key: str, guard: volcano.LockGuard, grace: float) -> int | None:
        """Run the command under `guard`; its exit status, or None if ownership was lost."""
        self._phase = _Phase.RUNNING  # from here on, signals are for the command
        with _watchdog() as watchdog:
            process = self._start(key, guard.lease.fencing_token, watchdog.group)
            return self._supervise(process, key, guard, grace)

    def _supervise(
        self, process: subprocess.Popen[bytes], key: str, guard: volcano.LockGuard, grace: float
    ) -> int | None:
        exited = threading.Event()
        changed = threading.Event()
        _watch(process.wait, changed, "volcano-run-process", then=exited)
        _watch(guard.wait_lost, changed, "volcano-run-guard")
        changed.wait()
        if exited.is_set():
            self._phase = _Phase.FINISHING
            return _status(process.returncode)
        _report(
            f"lost the lock on {key!r} ({guard.lost_reason}); stopping the command: "
            f"SIGTERM now, SIGKILL after {grace:g}s"
        )
        self._signal_group(signal.SIGTERM)
        if not exited.wait(grace):
            self._signal_group(signal.SIGKILL)
            exited.wait()
        self._signal_group(signal.SIGKILL)  # whatever it started and left behind
        self._phase = _Phase.FINISHING
        return None

    def _start(self, key: str, fencing_token: int, group: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, "VOLCANO_LOCK_KEY": key, "VOLCANO_FENCING_TOKEN": str(fencing_token)}
        stdin = subprocess.DEVNULL if _stdin_is_a_terminal() else None
        try:
            # The command line is the user's own, run as given (no shell).
            process = subprocess.Popen(self._argv, env=env, stdin=stdin, process_group=group)  # noqa: S603
        except FileNotFoundError:
            self._phase = _Phase.FINISHING
            raise Failure(Exit.NOT_FOUND, f"command not found: {self._argv[0]}") from None
        except OSError as error:
            self._phase = _Phase.FINISHING
            raise Failure(
                Exit.CANNOT_EXECUTE, f"cannot execute {self._argv[0]}: {error.strerror}"
            ) from None
        self._group = group
        while self._pending:
            self._signal_group(self._pending.pop(0))
        return process

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._phase is _Phase.ACQUIRING:
            raise _Interrupted(signum)
        if self._phase is _Phase.RUNNING:
            if self._group is None:
                self._pending.append(signum)
            else:
                self._signal_group(signum)

    def _signal_group(self, signum: int) -> None:
        if self._group is not None:
            with contextlib.suppress(ProcessLookupError):  # the whole group has exited
                os.killpg(self._group, signum)


def _watchdog() -> Watchdog:
    """A ready watchdog, whose process group the command is to start in."""
    try:
        return Watchdog.start()
    except WatchdogFailed as error:
        message = f"cannot start the watchdog that stops the command if volcano dies: {error}"
        raise Failure(Exit.UNEXPECTED, message) from None


def _watch(
    wait: Callable[[], object],
    changed: threading.Event,
    name: str,
    *,
    then: threading.Event | None = None,
) -> None:
    """Call `wait` in a daemon thread, then set `then` (if given) and `changed`."""

    def watch() -> None:
        try:
            wait()
            if then is not None:
                then.set()
        finally:
            changed.set()

    threading.Thread(target=watch, name=name, daemon=True).start()


def _status(returncode: int) -> int:
    """The shell's way of telling a signal from an exit status: 128 + N for signal N."""
    return Exit.SIGNALLED - returncode if returncode < 0 else returncode


def _stdin_is_a_terminal() -> bool:
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no stdin, or not a real file
        return False
