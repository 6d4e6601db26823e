"""An optional per-project request rate limit (a token bucket per project, per process)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    """Allows `rate` requests per second per project with bursts of up to `burst`."""

    def __init__(
        self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._rate = rate
        self._burst = burst if burst is not None else max(1.0, rate)
        self._clock = clock
        self._buckets: dict[int, tuple[float, float]] = {}  # project -> (tokens, at)
        self._lock = threading.Lock()

    def check(self, project_id: int) -> int | None:
        """None if the request may proceed, else whole seconds to wait (at least 1)."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(project_id, (self._burst, now))
            tokens = min(self._burst, tokens + (now - at) * self._rate)
            if tokens >= 1.0:
                self._buckets[project_id] = (tokens - 1.0, now)
                return None
            self._buckets[project_id] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self._rate))
