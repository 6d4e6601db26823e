"""The server's log output: one handler on stderr, as text lines or as JSON lines.

Access lines (`volcano_server.access`) carry their fields in `record.access`; the JSON format
puts them at the top level of each object, next to time, level, logger and message.

Nothing a client sends can forge a line or drive a terminal: in the text format every character
outside printable ASCII is escaped, and every line of a record after its first (a traceback's,
or a message's own line break) starts with `    | `, so only the server starts a line with a
timestamp. JSON escapes for itself. A fault that repeats is logged whole once a minute
(`Throttle`), so a client that can trigger one cannot fill the disk with tracebacks.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ._accesslog import escape

__all__ = ["CONTINUATION", "JsonFormatter", "TextFormatter", "Throttle", "configure_logging"]

CONTINUATION = "    | "
"""How every line of a text record after its first begins."""

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; control characters escaped by JSON itself."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "access", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=True, default=str)


class TextFormatter(logging.Formatter):
    """Text lines, escaped, each continuation line indented (see the module's docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line, plus indented continuation lines."""
        first, *rest = super().format(record).split("\n")
        return "\n".join([escape(first), *(CONTINUATION + escape(line) for line in rest)])


class Throttle:
    """Whether a repeated event is worth logging whole: once per `seconds` for each kind.

    `allow(kind)` returns how many of that kind were held back since the last one logged, or
    None to hold this one back too.
    """

    def __init__(self, seconds: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[Hashable, tuple[float, int]] = {}  # kind -> (logged at, held back)

    def allow(self, kind: Hashable) -> int | None:
        """None: hold this event back; else log it, saying how many were held back before."""
        now = self._clock()
        with self._lock:
            logged, held = self._kinds.get(kind, (now - self._seconds, 0))
            if now - logged < self._seconds:
                self._kinds[kind] = (logged, held + 1)
                return None
            self._kinds[kind] = (now, 0)
            if len(self._kinds) > 1_000:  # kinds come from the code, but stay bounded anyway
                self._kinds = {kind: (now, 0)}
            return held


def configure_logging(level: str, log_format: str = "text") -> None:
    """Send the server's logs (and its libraries' warnings) to stderr in `log_format`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter(_TEXT))
    root = logging.getLogger("volcano_server")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # The PostgreSQL driver's pool reports reconnections; uvicorn, faults in the app. Give
    # their lines the same shape (uvicorn's per-request warnings are our access lines already).
    for name, floor in (("psycopg", logging.WARNING), ("uvicorn", logging.ERROR)):
        library = logging.getLogger(name)
        library.handlers[:] = [handler]
        library.setLevel(max(floor, root.level))
        library.propagate = False


def _rfc3339(created: float) -> str:
    seconds = int(created)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        + f".{int((created - seconds) * 1000):03d}Z"
    )
