"""Load beside a test: processes that only spin on the CPU (`--cpu-hog N`, tests/conftest.py).

A test that passes on an idle machine may lean on timing that a loaded one does not give (a
thread scheduled late, a child process slow to start): the hog lets such a test be run, on
purpose and repeatably, as a busy CI runner would run it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["hogging"]

_SPIN = "while True: pass"


@contextlib.contextmanager
def hogging(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` child processes spinning until the block ends (0: none)."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            hogs.append(subprocess.Popen([sys.executable, "-c", _SPIN]))
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
