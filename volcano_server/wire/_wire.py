"""Answers as the spec spells them: JSON bodies and RFC 3339 UTC timestamps (errors: `_errors`)."""

from __future__ import annotations

import asyncio
import calendar
import json
import time
from typing import Any

import attrs

__all__ = ["HEALTH_BODY", "Answer", "dumps", "parse_rfc3339_us", "rfc3339_us"]


@attrs.frozen
class Answer:
    """An HTTP answer: status, JSON body (or empty), and the headers an answer may carry.

    An answer that tells of a lease also carries that lease's expiry and the server's clock
    after the transaction behind it committed, so that it is never sent once the lease has
    expired (`_api`): a server that stalls longer than a ttl must not tell a client it holds
    what has already ended.
    """

    status: int
    body: bytes
    retry_after: int | None = None
    replayed: bool = False
    lease_until_us: int | None = None  # the expiry of the lease it tells of (the soonest)
    clock_us: int | None = None  # the storage clock once its transaction committed
    # The server's monotonic clock (`Storage.monotonic`) just before `clock_us` was asked for:
    # the answer's age counts from there.
    clock_at: float | None = None
    # A batch's results, each with the expiry of the lease it tells of (`_batch`).
    results: tuple[tuple[dict[str, Any], int | None], ...] = ()
    # Sent only once these are done: the answers of the waiters its transaction granted a
    # lease here (a releasing client must not be able to ask again ahead of them).
    after: tuple[asyncio.Future[None], ...] = ()


_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    r"""Compact UTF-8 JSON; NaN and infinities can never be emitted.

    Never fails on a string that is not valid Unicode (a lone surrogate, which Python's JSON
    parser accepts from `"\ud800"`): it is written back as that JSON escape.
    """
    return _encoder.encode(value).encode("utf-8", "backslashreplace")


def rfc3339_us(us: int) -> str:
    """Microseconds since the epoch as `2026-11-29T21:15:30.250000Z`, exactly (no floats)."""
    seconds, micros = divmod(us, 1_000_000)
    t = time.gmtime(seconds)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{micros:06d}Z"
    )


def parse_rfc3339_us(text: str) -> int:
    """Microseconds since the epoch of a timestamp written by `rfc3339_us`."""
    date, _, rest = text.partition("T")
    clock, _, fraction = rest.rstrip("Z").partition(".")
    year, month, day = (int(part) for part in date.split("-"))
    hour, minute, second = (int(part) for part in clock.split(":"))
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    return seconds * 1_000_000 + int(fraction.ljust(6, "0")[:6] or 0)


HEALTH_BODY = dumps({"status": "ok"})
"""`GET /healthz`'s body, whoever answers it (the API, the private listener, the protocol)."""
