"""The server's settings, from the command line, the environment or a test."""

from __future__ import annotations

import attrs

from ._waiting import WaitingSettings
from .storage import DEFAULT_DATABASE_URL

__all__ = ["ServerConfig"]


@attrs.frozen
class ServerConfig:
    """How a server runs. Every field has a production-sensible default."""

    database_url: str = DEFAULT_DATABASE_URL
    # How long a request id's outcome is kept for replay (the contract asks for >= 10 minutes).
    retention_seconds: float = 600.0
    # Bodies are tiny JSON objects; anything bigger is refused with 413 before parsing.
    max_body_bytes: int = 16_384
    # Requests per second per project (per server process); None disables the limit.
    rate_limit: float | None = None
    # Stored outcomes past their retention are deleted in batches this often.
    purge_interval_seconds: float = 5.0
    purge_batch: int = 5_000
    # SQLite only: "full" survives power loss, "normal" only a killed process (see the README).
    sqlite_synchronous: str = "full"
    access_log: bool = True
    # How long a known key stays cached in memory.
    auth_cache_seconds: float = 60.0
    # Waiting for a lock: how long places and reservations last, heartbeats, polling.
    waiting: WaitingSettings = attrs.field(factory=WaitingSettings)

    def __attrs_post_init__(self) -> None:
        if self.retention_seconds < 600:
            raise ValueError(
                f"retention must be at least 600 seconds, got {self.retention_seconds:g}"
            )
        if self.max_body_bytes < 1024:
            raise ValueError(
                f"the body limit must be at least 1024 bytes, got {self.max_body_bytes}"
            )
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise ValueError(f"the rate limit must be positive, got {self.rate_limit:g}")
        if self.sqlite_synchronous not in ("full", "normal"):
            raise ValueError(
                f"sqlite synchronous must be full or normal, got {self.sqlite_synchronous!r}"
            )
