"""Lanes: this server's transactions on one key run in the order they asked.

A waiting acquire's place in line is decided by its transaction, so without lanes a request read
first could join behind one read after it: on SQLite, one whose transaction would have blocked is
repeated in a worker thread while later ones run on the loop; on PostgreSQL every transaction
runs in a thread, and threads reach the pool and the key's row lock in any order. A lane is a
FIFO lock per key (asyncio's `Lock` wakes its waiters in turn and lets nobody barge past a woken
one), taken once a request has been judged, never held across a wait in line or a disk sync.

A transaction leaves its lane when it ends, or as soon as it holds the key's lock in the
database (PostgreSQL calls `leave` then, handed it as `on_locked`: `Runner.in_lane`): the next
one then queues for that lock behind it, in turn, while it runs. On SQLite a transaction
mostly runs to its end on the loop, so a lane is rarely contended there.

Order is worth a short wait, not an outage's: a transaction stalled on a lost database link
holds its lane until the link is given up (seconds), and the requests behind it would each
wait for the one before to fail in turn. So a lane is waited for at most `PATIENCE`; past it
the transaction runs without it, as it would have without lanes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from ._registry import KeyRef

__all__ = ["PATIENCE", "Lanes"]

PATIENCE = 1.0
"""The longest a transaction waits for its key's lane (seconds); then it runs without it."""


class Lanes:
    """One FIFO lock per key that has a transaction running or waiting to run here."""

    def __init__(self, patience: float = PATIENCE) -> None:
        self._patience = patience
        self._lanes: dict[KeyRef, tuple[asyncio.Lock, int]] = {}  # key -> (lock, users)

    def __len__(self) -> int:
        """How many keys have a transaction running or waiting in their lane."""
        return len(self._lanes)

    @contextlib.asynccontextmanager
    async def lane(self, key_ref: KeyRef) -> AsyncIterator[Callable[[], None]]:
        """Hold the key's lane, after every transaction on the key that asked before.

        Waited for at most the lanes' patience, then the block runs without it. Gives
        `leave()`, which lets the next one go before the block ends (on the loop; once).
        """
        lock, users = self._lanes.get(key_ref) or (asyncio.Lock(), 0)
        self._lanes[key_ref] = (lock, users + 1)
        held = False

        def leave() -> None:
            nonlocal held
            if held:
                held = False
                lock.release()

        try:
            # asyncio.timeout, not wait_for: a free lane is taken without a task or a loop turn.
            with contextlib.suppress(TimeoutError):  # past it, the one ahead is stalled
                async with asyncio.timeout(self._patience):
                    held = await lock.acquire()
            yield leave
        finally:
            leave()
            lock, users = self._lanes[key_ref]
            if users == 1:
                del self._lanes[key_ref]
            else:
                self._lanes[key_ref] = (lock, users - 1)
