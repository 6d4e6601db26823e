"""Where the SDK's log lines go while `volcano` runs.

By default nothing is printed: the command reports what matters in its own one line, and keeps
the SDK's warnings (a lost lease, a failed release) to decide what that line says. `-v` prints
every record of the `volcano` logger (requests, retries, losses) on stderr as well.
"""

from __future__ import annotations

import logging
import sys


class HeldWarnings(logging.Handler):
    """Keeps the SDK's warnings (a lost lease, a failed release) for the command to report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def configure_logging(*, verbose: bool) -> HeldWarnings:
    """Route the `volcano` logger: warnings kept for reporting, everything on stderr with -v."""
    held = HeldWarnings()
    handlers: list[logging.Handler] = [held]
    if verbose:
        stream = logging.StreamHandler(sys.stderr)
        stream.setFormatter(logging.Formatter("volcano: %(levelname)s: %(message)s"))
        handlers.append(stream)
    logger = logging.getLogger("volcano")
    logger.handlers[:] = handlers
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False
    return held
