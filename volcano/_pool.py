"""What the SDK's two transports (`_transport`, `_async_transport`) share.

The pool's limits, read when used (tests change them), and the mark of a client the SDK made
for itself.
"""

from __future__ import annotations

import httpx

__all__ = [
    "KEEPALIVE_EXPIRY",
    "MAX_CONNECTIONS",
    "MAX_IDLE",
    "Origin",
    "Own",
    "origin_of",
    "seconds",
]

MAX_CONNECTIONS = 100
"""Requests one client's transport has under way at once (httpx's default pool: 100)."""
MAX_IDLE = 20
"""Idle connections kept for reuse (httpx's default: 20)."""
KEEPALIVE_EXPIRY = 5.0
"""Seconds an idle connection is kept (httpx's default: 5, below the reference server's 15, so
the client closes first and never reuses a connection the server is closing)."""


class Own:
    """Marks a client the SDK made for itself.

    Its `transport` takes the SDK's requests straight away (`_transport.direct`).
    """

    transport: httpx.BaseTransport | httpx.AsyncBaseTransport


Origin = tuple[str, str, int]
"""Where a connection goes: scheme, host and port."""


def origin_of(url: httpx.URL) -> Origin:
    """The origin of `url`, its port filled in from its scheme."""
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


def seconds(value: object) -> float | None:
    """A timeout of `request.extensions["timeout"]` in seconds; None (none) for anything else."""
    return float(value) if isinstance(value, int | float) else None
