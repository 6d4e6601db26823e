"""The lock operations the API serves: a transaction each, or a waiting acquire held open.

`LockService` is what `_api` calls for every operation of the spec, in one table: it runs each
operation's transaction through the runner (on the loop or in a worker thread, 503 on an outage)
and hands a waiting acquire to `Waits`, which holds it in line, delivers its lease or ends that
lease if its client left first, and a watching get to `Watches`, which holds it until the key's
version moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from ..wire._wire import Answer
from ._admission import Job
from ._offload import Runner
from ._transactions import Caller, Renewal
from ._waiters import Waits
from ._watching import Watches

__all__ = ["Caller", "LockService", "Renewal"]


class LockService:
    """The lock operations: acquire, renew (one lease or many), release, force release, get, list.

    Acquires may wait in line, and gets may watch a key for a change.
    """

    def __init__(self, waits: Waits, watches: Watches, run: Runner) -> None:
        self._waits = waits
        self._watches = watches
        self._tx = waits.transactions
        self._run = run

    @property
    def parked(self) -> int:
        """Waiting acquires parked in line and watches held open.

        They need the loop only when their turn comes or their key changes.
        """
        return self._waits.parked + self._watches.parked

    async def acquire(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        *,
        limit: int,
        label: str | None = None,
        shared: bool = False,
        wait_seconds: float,
        gone: Callable[[], asyncio.Future[None]],
    ) -> Answer | None:
        """Take a free slot of the key, extend the caller's own lease, or wait in line for one.

        The lease carries `label`, and is `shared` or exclusive. `gone()` gives a future done
        when the client disconnects (asked for only when the request waits). None: the client
        left before its answer.
        """
        if wait_seconds:
            disconnected = gone()
            try:
                return await self._waits.acquire(
                    caller,
                    key,
                    owner_token,
                    ttl_seconds,
                    limit=limit,
                    label=label,
                    shared=shared,
                    wait_seconds=wait_seconds,
                    gone=disconnected,
                )
            finally:
                disconnected.cancel()
        tx = self._tx
        answer = await self._run(
            lambda may_block: tx.acquire(
                caller,
                key,
                owner_token,
                ttl_seconds,
                limit=limit,
                label=label,
                shared=shared,
                may_block=may_block,
            ),
            job=Job(caller.project_id),
            traced_as="acquire",
            lane=(caller.project_id, key),
        )
        assert isinstance(answer, Answer)  # noqa: S101 - only a waiting acquire queues
        return answer

    async def renew(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        fencing_token: int,
        ttl_seconds: float,
        *,
        label: str | None = None,
    ) -> Answer:
        """Extend the live lease that matches both tokens; with `label`, relabel it."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.renew(
                caller,
                key,
                owner_token,
                fencing_token,
                ttl_seconds,
                label=label,
                may_block=may_block,
            ),
            job=Job(caller.project_id, keeps=True),
            traced_as="renew",
            lane=(caller.project_id, key),
        )

    async def renew_many(self, caller: Caller, renewals: Sequence[Renewal]) -> Answer:
        """Renew each lease as `renew` would, in one transaction."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.renew_many(caller, renewals, may_block=may_block),
            job=Job(caller.project_id, keeps=True),
        )

    async def release(
        self, caller: Caller, key: str, owner_token: str, fencing_token: int
    ) -> Answer:
        """End the live lease that matches both tokens; the next in line gets the key."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.release(
                caller, key, owner_token, fencing_token, may_block=may_block
            ),
            job=Job(caller.project_id, keeps=True),
            traced_as="release",
            lane=(caller.project_id, key),
        )

    async def force_release(self, caller: Caller, key: str) -> Answer:
        """End the live lease, whoever holds it; the next in line gets the key."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.force_release(caller, key, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="force_release",
            lane=(caller.project_id, key),
        )

    async def get(
        self,
        caller: Caller,
        key: str,
        *,
        after_version: int | None = None,
        wait_seconds: float = 0.0,
        gone: Callable[[], asyncio.Future[None]] | None = None,
    ) -> Answer | None:
        """Report the key's state without changing it.

        With `after_version` and `wait_seconds`, once its version differs from that one or the
        wait runs out (a watch); None when the client left first.
        """
        if after_version is not None and wait_seconds > 0 and gone is not None:
            disconnected = gone()
            try:
                return await self._watches.watch(
                    caller,
                    key,
                    after_version=after_version,
                    wait_seconds=wait_seconds,
                    gone=disconnected,
                )
            finally:
                disconnected.cancel()
        tx = self._tx
        return await self._run(
            lambda may_block: tx.get(caller, key, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="get",
        )

    async def list_locks(self, caller: Caller, *, prefix: str, after: str, limit: int) -> Answer:
        """One page of the keys that are held or waited for."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.list_locks(
                caller, prefix=prefix, after=after, limit=limit, may_block=may_block
            ),
            job=Job(caller.project_id),
            traced_as="list",
        )

    async def holders(self, caller: Caller, key: str, *, after: int, limit: int) -> Answer:
        """One page of the key's live leases."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.holders(
                caller, key, after=after, limit=limit, may_block=may_block
            ),
            job=Job(caller.project_id),
            traced_as="holders",
        )

    async def check(self, caller: Caller, key: str, fencing_token: int) -> Answer:
        """Whether `fencing_token` names a live lease of the key."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.check(caller, key, fencing_token, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="check",
        )

    async def synced(self, *, here: bool = False) -> None:
        """Return once every transaction committed so far is on disk: answer only then."""
        await self._tx.synced(here=here)
