"""The watchdog of `volcano locks run`, with real processes: what it does on each word from volcano.

(volcano's death by SIGKILL, the case it exists for, is in test_run.py's TestVolcanoKilled.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from volcano._cli._watchdog import IGNORED, Watchdog

from .conftest import WAIT


class Bug(Exception):
    """Something going wrong in volcano while the command runs."""


def sleeper(group: int) -> subprocess.Popen[bytes]:
    """A process that sleeps in `group` until something kills it."""
    return subprocess.Popen(["sleep", "300"], process_group=group)


class TestWatchdog:
    def test_standing_down_leaves_the_group_alone(self) -> None:
        """Left without an error (the command exited), it goes and leaves the group running."""
        with Watchdog.start() as watchdog:  # a kill would be sent before the watchdog exits
            leftover = subprocess.Popen(
                ["sh", "-c", 'read line; echo "$line"'],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                process_group=watchdog.group,
            )
        assert leftover.communicate("still here\n", timeout=WAIT) == ("still here\n", None)

    def test_an_error_kills_the_group(self) -> None:
        """Left by an exception, the pipe closes without a word: the group is SIGKILLed."""
        with contextlib.suppress(Bug), Watchdog.start() as watchdog:
            command = sleeper(watchdog.group)
            raise Bug
        assert command.wait(WAIT) == -signal.SIGKILL

    def test_signals_to_its_group_do_not_end_it(self) -> None:
        """Each signal it ignores (all a group is sent in practice) leaves it on guard."""
        with contextlib.suppress(Bug), Watchdog.start() as watchdog:
            for signum in IGNORED:
                os.killpg(watchdog.group, signum)
            command = sleeper(watchdog.group)
            raise Bug
        assert command.wait(WAIT) == -signal.SIGKILL
