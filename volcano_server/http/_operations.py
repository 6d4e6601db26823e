"""The one table from operationId to what runs it: a transaction, or a request held open.

Each lock and group operation of the spec is one entry of `OPERATIONS`. Most are one
transaction (`Transaction`): the storage work it runs, given the caller, the checked path and
query parameters and the checked body; the span it is traced as; whether it keeps a lease (such
work is admitted first when storage time is scarce: `Job.keeps`); one on a key runs in the
key's lane (`KeyTransaction`, `locks._lanes`). Two may be held open instead, when they ask to
wait: an acquire with `wait_seconds` waits in line (`Waits`), a get with `after_version` and
`wait_seconds` watches (`Watches`). Each runs on the `Parts` the app hands the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..groups._transactions import GroupTransactions, MemberRenewal
from ..groups._watching import read_group
from ..locks._admission import Job
from ..locks._offload import Runner
from ..locks._transactions import Caller, LeaseRenewal, Queued, Transactions
from ..locks._waiters import Waits
from ..locks._watching import Watches
from ..storage import OnLocked, Storage
from ..storage._groups import watch_key
from ..wire._wire import Answer

__all__ = ["OPERATIONS", "Parts"]

Params = dict[str, Any]
Body = dict[str, Any]
# Gives a future done when the client disconnects (asked for only by a request held open).
Gone = Callable[[], "asyncio.Future[None]"]


@attrs.frozen
class Parts:
    """What the operations run on, handed to the API by the app."""

    locks: Transactions
    groups: GroupTransactions
    waits: Waits
    watches: Watches
    storage: Storage  # a group's state is read straight from it
    run: Runner


# An operation: its answer, or None when its client left before it (only a held request).
Handler = Callable[[Parts, Caller, Params, Body, Gone], Awaitable[Answer | None]]


@attrs.frozen
class Transaction:
    """An operation that is one transaction, run through the runner (503 on an outage)."""

    work: Callable[[Parts, Caller, Params, Body, bool], Answer]  # the last: may it block
    traced_as: str | None
    keeps: bool = False

    async def __call__(
        self, parts: Parts, caller: Caller, params: Params, body: Body, _gone: Gone
    ) -> Answer:
        """Run the transaction for `caller`."""
        work = self.work
        return await parts.run(
            lambda may_block: work(parts, caller, params, body, may_block),
            job=Job(caller.project_id, keeps=self.keeps),
            traced_as=self.traced_as,
        )


@attrs.frozen
class KeyTransaction:
    """A transaction on the key `params["key"]`, run in the key's lane (`locks._lanes`).

    Its work is also given what leaves the lane once it holds the key's lock (`on_locked`).
    """

    work: Callable[[Parts, Caller, Params, Body, bool, OnLocked], Answer]
    traced_as: str
    keeps: bool = False

    async def __call__(
        self, parts: Parts, caller: Caller, params: Params, body: Body, _gone: Gone
    ) -> Answer:
        """Run the transaction for `caller`, in its key's lane."""
        work = self.work
        return await parts.run.in_lane(
            (caller.project_id, params["key"]),
            lambda may_block, on_locked: work(parts, caller, params, body, may_block, on_locked),
            job=Job(caller.project_id, keeps=self.keeps),
            traced_as=self.traced_as,
        )


def _granted(result: Answer | Queued) -> Answer:
    assert isinstance(result, Answer)  # noqa: S101 - only a waiting acquire queues
    return result


_ACQUIRE = KeyTransaction(
    lambda o, c, p, b, may_block, on_locked: _granted(
        o.locks.acquire(
            c,
            p["key"],
            b["owner_token"],
            b["ttl_seconds"],
            limit=b.get("limit", 1),
            label=b.get("label") or None,
            shared=b.get("shared", False),
            may_block=may_block,
            on_locked=on_locked,
        )
    ),
    "acquire",
)


async def _acquire(
    parts: Parts, caller: Caller, params: Params, body: Body, gone: Gone
) -> Answer | None:
    """Take a free slot of the key, extend the caller's own lease, or wait in line for one."""
    wait_seconds = body.get("wait_seconds", 0.0)
    if not wait_seconds:
        return await _ACQUIRE(parts, caller, params, body, gone)
    disconnected = gone()
    try:
        return await parts.waits.acquire(
            caller,
            params["key"],
            body["owner_token"],
            body["ttl_seconds"],
            limit=body.get("limit", 1),
            label=body.get("label") or None,
            shared=body.get("shared", False),
            wait_seconds=wait_seconds,
            gone=disconnected,
        )
    finally:
        disconnected.cancel()


def _watched(read: Transaction, watch_key_of: Callable[[Params], str]) -> Handler:
    """`read`; with `after_version` and `wait_seconds`, a watch of the state instead.

    The watch is held until the state's version differs from `after_version` or the wait runs
    out (None: the client left first).
    """

    async def handler(
        parts: Parts, caller: Caller, params: Params, body: Body, gone: Gone
    ) -> Answer | None:
        after_version = params.get("after_version")
        wait_seconds = params.get("wait_seconds", 0.0)
        if after_version is None or wait_seconds <= 0:
            return await read(parts, caller, params, body, gone)
        disconnected = gone()
        try:
            return await parts.watches.watch(
                caller,
                watch_key_of(params),
                after_version=after_version,
                wait_seconds=wait_seconds,
                gone=disconnected,
            )
        finally:
            disconnected.cancel()

    return handler


def _held(body: Body, *fields: str) -> dict[str, Any]:
    """The owner token and these fields of a validated body, by name."""
    return {name: body[name] for name in ("owner_token", *fields)}


OPERATIONS: dict[str, Handler] = {
    # -- locks ---------------------------------------------------------------------------
    "acquireLock": _acquire,
    "renewLock": KeyTransaction(  # label None (or absent): kept
        lambda o, c, p, b, may_block, on_locked: o.locks.renew(
            c,
            p["key"],
            b["owner_token"],
            b["fencing_token"],
            b["ttl_seconds"],
            label=b.get("label"),
            may_block=may_block,
            on_locked=on_locked,
        ),
        "renew",
        keeps=True,
    ),
    "renewLeases": Transaction(
        lambda o, c, _p, b, may_block: o.locks.renew_many(
            c, [LeaseRenewal(**entry) for entry in b["leases"]], may_block=may_block
        ),
        None,
        keeps=True,
    ),
    "releaseLock": KeyTransaction(
        lambda o, c, p, b, may_block, on_locked: o.locks.release(
            c,
            p["key"],
            b["owner_token"],
            b["fencing_token"],
            may_block=may_block,
            on_locked=on_locked,
        ),
        "release",
        keeps=True,
    ),
    "forceReleaseLock": KeyTransaction(
        lambda o, c, p, _b, may_block, on_locked: o.locks.force_release(
            c, p["key"], may_block=may_block, on_locked=on_locked
        ),
        "force_release",
    ),
    "getLock": _watched(
        Transaction(
            lambda o, c, p, _b, may_block: o.locks.get(c, p["key"], may_block=may_block), "get"
        ),
        lambda p: str(p["key"]),
    ),
    "listLocks": Transaction(
        lambda o, c, p, _b, may_block: o.locks.list_locks(
            c,
            prefix=p.get("prefix", ""),
            after=p.get("after", ""),
            limit=p.get("limit", 100),
            may_block=may_block,
        ),
        "list",
    ),
    "listHolders": Transaction(
        lambda o, c, p, _b, may_block: o.locks.holders(
            c, p["key"], after=p.get("after", 0), limit=p.get("limit", 100), may_block=may_block
        ),
        "holders",
    ),
    "checkLease": Transaction(
        lambda o, c, p, _b, may_block: o.locks.check(
            c, p["key"], p["fencing_token"], may_block=may_block
        ),
        "check",
    ),
    # -- groups --------------------------------------------------------------------------
    "listGroups": Transaction(
        lambda o, c, p, _b, may_block: o.groups.list_groups(
            c,
            prefix=p.get("prefix", ""),
            after=p.get("after", ""),
            limit=p.get("limit", 100),
            may_block=may_block,
        ),
        "list_groups",
    ),
    "createGroup": Transaction(
        lambda o, c, p, _b, may_block: o.groups.create(c, p["group"], may_block=may_block),
        "create_group",
    ),
    "getGroup": _watched(
        Transaction(
            lambda o, c, p, _b, may_block: (
                read_group(
                    o.storage, (c.project_id, watch_key(p["group"])), may_block=may_block
                ).answer
            ),
            "get_group",
        ),
        lambda p: watch_key(p["group"]),
    ),
    "deleteGroup": Transaction(
        lambda o, c, p, _b, may_block: o.groups.delete(c, p["group"], may_block=may_block),
        "delete_group",
    ),
    "listMembers": Transaction(
        lambda o, c, p, _b, may_block: o.groups.list_members(
            c,
            p["group"],
            after=p.get("after", ""),
            limit=p.get("limit", 100),
            may_block=may_block,
        ),
        "list_members",
    ),
    "getMember": Transaction(
        lambda o, c, p, _b, may_block: o.groups.get_member(
            c, p["group"], p["member"], may_block=may_block
        ),
        "get_member",
    ),
    "removeMember": Transaction(
        lambda o, c, p, _b, may_block: o.groups.remove(
            c, p["group"], p["member"], may_block=may_block
        ),
        "remove_member",
    ),
    "joinGroup": Transaction(
        lambda o, c, p, b, may_block: o.groups.join(
            c,
            p["group"],
            p["member"],
            capabilities=b.get("capabilities"),
            **_held(b, "ttl_seconds"),
            may_block=may_block,
        ),
        "join",
    ),
    "renewMembership": Transaction(
        lambda o, c, p, b, may_block: o.groups.renew(
            c,
            p["group"],
            p["member"],
            **_held(b, "fencing_token", "ttl_seconds"),
            may_block=may_block,
        ),
        "renew_membership",
        keeps=True,
    ),
    "updateCapabilities": Transaction(
        lambda o, c, p, b, may_block: o.groups.update(
            c,
            p["group"],
            p["member"],
            capabilities=b["capabilities"],
            **_held(b, "fencing_token"),
            may_block=may_block,
        ),
        "update_capabilities",
    ),
    "leaveGroup": Transaction(
        lambda o, c, p, b, may_block: o.groups.leave(
            c, p["group"], p["member"], **_held(b, "fencing_token"), may_block=may_block
        ),
        "leave",
        keeps=True,
    ),
    "renewMemberships": Transaction(
        lambda o, c, _p, b, may_block: o.groups.renew_many(
            c, [MemberRenewal(**entry) for entry in b["memberships"]], may_block=may_block
        ),
        "renew_memberships",
        keeps=True,
    ),
}
