"""What the test project's command and migration record, and the flag they wait for (files
named by the test in VOLCANO_TEST_LOG and VOLCANO_TEST_FLAG)."""

import os
import time
from pathlib import Path


def record(line: str) -> None:
    with Path(os.environ["VOLCANO_TEST_LOG"]).open("a") as log:
        log.write(f"{line} {os.getpid()}\n")


def hold_until_flag(limit: float = 60.0) -> None:
    flag = Path(os.environ["VOLCANO_TEST_FLAG"])
    deadline = time.monotonic() + limit
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
