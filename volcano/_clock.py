"""Time as the SDK sees it, in one object that each client takes at construction.

Every decision about a lease's life uses `monotonic()`: wall-clock jumps cannot make a guard
believe it still holds a lease it may have lost. The renewal loops wait through `wait` and
`async_wait`, so a test's fake clock decides when they wake (no test sleeps).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    import threading


class Clock:
    """The real clock: `time.monotonic`, `time.sleep`, `asyncio.sleep` and timed waits."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Block this thread for `seconds`."""
        time.sleep(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """Suspend this task for `seconds`."""
        import asyncio  # here, so that sync-only users never import asyncio

        await asyncio.sleep(seconds)

    def wait(self, condition: threading.Condition, timeout: float | None) -> None:
        """Wait on `condition` (held by the caller) until notified or `timeout` seconds pass."""
        condition.wait(timeout)

    async def async_wait(self, event: asyncio.Event, seconds: float | None) -> None:
        """Wait until `event` is set or `seconds` pass (None: no limit)."""
        import asyncio

        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return


SYSTEM_CLOCK = Clock()
