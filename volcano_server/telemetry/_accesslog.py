r"""One access-log line per request: escaped, never a secret, as text or as JSON fields.

The path is logged as the client sent it (still percent-encoded, without the query string,
which no operation uses and where a careless client might put a key), and every character that
is not printable ASCII is escaped, so `%0A` stays `%0A` and a raw control byte becomes `\x1b`:
a client can neither forge a log line nor drive an operator's terminal. Headers, bodies, keys
and owner tokens are never logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["AccessLog", "RequestRecord", "escape"]

access_log = logging.getLogger("volcano_server.access")


def escape(text: str) -> str:
    """`text` with backslashes, control characters and anything outside printable ASCII escaped."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return text.encode("unicode_escape").decode("ascii")


@attrs.frozen
class RequestRecord:
    """What is logged and counted about one answered request."""

    method: str
    path: str  # as sent: percent-encoded, no query string
    status: int
    request_id: str
    operation: str  # the spec's operationId, or "none" when no operation was reached
    seconds: float | None  # from the request's arrival to its answer, when known
    replayed: bool = False

    @classmethod
    def of(
        cls,
        scope: Mapping[str, Any],
        status: int,
        request_id: str,
        *,
        operation: str = "none",
        started: float | None = None,
        replayed: bool = False,
    ) -> RequestRecord:
        """The record of a request the app answered (`started` from `time.perf_counter()`)."""
        raw: bytes | None = scope.get("raw_path")
        path = raw.split(b"?", 1)[0].decode("latin-1") if raw else scope.get("path", "")
        seconds = time.perf_counter() - started if started is not None else None
        return cls(scope["method"], path, status, request_id, operation, seconds, replayed)

    def fields(self) -> dict[str, Any]:
        """The record as JSON-ready fields (escaped like the text line)."""
        return {
            "method": escape(self.method),
            "path": escape(self.path),
            "status": self.status,
            "operation": self.operation,
            "duration_ms": round(1000 * self.seconds, 3) if self.seconds is not None else None,
            "replayed": self.replayed,
            "request_id": escape(self.request_id),
        }


class AccessLog:
    """Reports each answered request: counted (`count`: the metrics'), logged when enabled."""

    def __init__(self, count: Callable[[RequestRecord], None], *, enabled: bool) -> None:
        self._count = count
        self._enabled = enabled

    def __call__(self, record: RequestRecord) -> None:
        """Report one answered request."""
        self._count(record)
        if not self._enabled:
            return
        fields = record.fields()
        took = f" {fields['duration_ms']:.1f}ms" if record.seconds is not None else ""
        access_log.info(
            "%s %s %d%s%s request_id=%s",
            fields["method"],
            fields["path"],
            record.status,
            took,
            " replayed" if record.replayed else "",
            fields["request_id"],
            extra={"access": fields},
        )
