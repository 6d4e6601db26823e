"""The server's log output: one handler on stderr, as text lines or as JSON lines.

Access lines (`volcano_server.access`) carry their fields in `record.access`; the JSON format
puts them at the top level of each object, next to time, level, logger and message.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["JsonFormatter", "configure_logging"]

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


def configure_logging(level: str, log_format: str = "text") -> None:
    """Send the server's logs (and its libraries' warnings) to stderr in `log_format`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT))
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
