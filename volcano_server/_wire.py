"""Answers as the spec spells them: JSON bodies and RFC 3339 UTC timestamps (errors: `_errors`)."""

from __future__ import annotations

import json
import time
from typing import Any

import attrs

__all__ = ["Answer", "dumps", "rfc3339_us"]


@attrs.frozen
class Answer:
    """An HTTP answer: status, JSON body (or empty), and the headers an answer may carry."""

    status: int
    body: bytes
    retry_after: int | None = None
    replayed: bool = False


_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON; NaN and infinities can never be emitted."""
    return _encoder.encode(value).encode()


def rfc3339_us(us: int) -> str:
    """Microseconds since the epoch as `2026-11-29T21:15:30.250000Z`, exactly (no floats)."""
    seconds, micros = divmod(us, 1_000_000)
    t = time.gmtime(seconds)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{micros:06d}Z"
    )
