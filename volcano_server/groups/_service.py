"""The group operations the API serves, and the table from operationId to each.

`GroupService` runs each group transaction through the runner (on the loop or in a worker
thread, 503 on an outage), and hands a watching get to `Watches` under the group's watch key.
`GROUP_OPERATIONS` is the API's table for the group operations (as `_api._OPERATIONS` is for
the lock ones); `GROUP_BODIES` the operations whose bodies may be as large as a group body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..locks._admission import Job
from ..locks._offload import Runner
from ..locks._transactions import Caller
from ..locks._watching import Watches
from ..storage import Storage
from ..storage._groups import watch_key
from ..wire._wire import Answer
from ._transactions import GroupTransactions, MemberRenewal
from ._watching import read_group

__all__ = ["GROUP_BODIES", "GROUP_OPERATIONS", "GroupService"]


class GroupService:
    """The group operations: create, delete, get (or watch) and list groups; members.

    Join, renew (one or many), update capabilities, leave, remove; get and list members.
    """

    def __init__(
        self, storage: Storage, transactions: GroupTransactions, watches: Watches, run: Runner
    ) -> None:
        self._storage = storage
        self._tx = transactions
        self._watches = watches
        self._run = run

    async def create(self, caller: Caller, group: str) -> Answer:
        """Create the group."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.create(caller, group, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="create_group",
        )

    async def delete(self, caller: Caller, group: str) -> Answer:
        """Delete the group (refused while it has a live member)."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.delete(caller, group, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="delete_group",
        )

    async def get(
        self,
        caller: Caller,
        group: str,
        *,
        after_version: int | None,
        wait_seconds: float,
        gone: Callable[[], asyncio.Future[None]],
    ) -> Answer | None:
        """The group's state; with `after_version` and `wait_seconds`, once it differs.

        None: the client left while its watch waited.
        """
        if after_version is not None and wait_seconds > 0:
            disconnected = gone()
            try:
                return await self._watches.watch(
                    caller,
                    watch_key(group),
                    after_version=after_version,
                    wait_seconds=wait_seconds,
                    gone=disconnected,
                )
            finally:
                disconnected.cancel()
        storage, key_ref = self._storage, (caller.project_id, watch_key(group))
        view = await self._run(
            lambda may_block: read_group(storage, key_ref, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="get_group",
        )
        return view.answer

    async def list_groups(self, caller: Caller, *, prefix: str, after: str, limit: int) -> Answer:
        """One page of the project's groups."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.list_groups(
                caller, prefix=prefix, after=after, limit=limit, may_block=may_block
            ),
            job=Job(caller.project_id),
            traced_as="list_groups",
        )

    async def list_members(self, caller: Caller, group: str, *, after: str, limit: int) -> Answer:
        """One page of the group's members."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.list_members(
                caller, group, after=after, limit=limit, may_block=may_block
            ),
            job=Job(caller.project_id),
            traced_as="list_members",
        )

    async def get_member(self, caller: Caller, group: str, member: str) -> Answer:
        """One member and its capabilities."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.get_member(caller, group, member, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="get_member",
        )

    async def join(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        ttl_seconds: float,
        capabilities: dict[str, Any] | None,
    ) -> Answer:
        """Join the group as `member`."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.join(
                caller,
                group,
                member,
                owner_token=owner_token,
                ttl_seconds=ttl_seconds,
                capabilities=capabilities,
                may_block=may_block,
            ),
            job=Job(caller.project_id),
            traced_as="join",
        )

    async def renew(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        fencing_token: int,
        ttl_seconds: float,
    ) -> Answer:
        """Extend a live membership."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.renew(
                caller,
                group,
                member,
                owner_token=owner_token,
                fencing_token=fencing_token,
                ttl_seconds=ttl_seconds,
                may_block=may_block,
            ),
            job=Job(caller.project_id, keeps=True),
            traced_as="renew_membership",
        )

    async def renew_many(self, caller: Caller, renewals: list[MemberRenewal]) -> Answer:
        """Renew many memberships in one transaction."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.renew_many(caller, renewals, may_block=may_block),
            job=Job(caller.project_id, keeps=True),
            traced_as="renew_memberships",
        )

    async def update(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        fencing_token: int,
        capabilities: dict[str, Any] | None,
    ) -> Answer:
        """Replace a live member's capabilities."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.update(
                caller,
                group,
                member,
                owner_token=owner_token,
                fencing_token=fencing_token,
                capabilities=capabilities,
                may_block=may_block,
            ),
            job=Job(caller.project_id),
            traced_as="update_capabilities",
        )

    async def leave(
        self, caller: Caller, group: str, member: str, *, owner_token: str, fencing_token: int
    ) -> Answer:
        """End a live membership."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.leave(
                caller,
                group,
                member,
                owner_token=owner_token,
                fencing_token=fencing_token,
                may_block=may_block,
            ),
            job=Job(caller.project_id, keeps=True),
            traced_as="leave",
        )

    async def remove(self, caller: Caller, group: str, member: str) -> Answer:
        """End a member's live membership, whoever holds it."""
        tx = self._tx
        return await self._run(
            lambda may_block: tx.remove(caller, group, member, may_block=may_block),
            job=Job(caller.project_id),
            traced_as="remove_member",
        )


def _held(body: dict[str, Any], *fields: str) -> dict[str, Any]:
    """The owner token and these fields of a validated body, by name."""
    return {name: body[name] for name in ("owner_token", *fields)}


# operationId -> how it runs on the group service, given the caller, the path and query
# parameters, the body, and a way to learn that the client disconnected (a watch asks).
_Run = Callable[
    [GroupService, Caller, dict[str, Any], dict[str, Any], Callable[[], "asyncio.Future[None]"]],
    Awaitable[Answer | None],
]
GROUP_OPERATIONS: dict[str, _Run] = {
    "listGroups": lambda s, c, p, _b, _gone: s.list_groups(
        c, prefix=p.get("prefix", ""), after=p.get("after", ""), limit=p.get("limit", 100)
    ),
    "createGroup": lambda s, c, p, _b, _gone: s.create(c, p["group"]),
    "getGroup": lambda s, c, p, _b, gone: s.get(
        c,
        p["group"],
        after_version=p.get("after_version"),
        wait_seconds=p.get("wait_seconds", 0.0),
        gone=gone,
    ),
    "deleteGroup": lambda s, c, p, _b, _gone: s.delete(c, p["group"]),
    "listMembers": lambda s, c, p, _b, _gone: s.list_members(
        c, p["group"], after=p.get("after", ""), limit=p.get("limit", 100)
    ),
    "getMember": lambda s, c, p, _b, _gone: s.get_member(c, p["group"], p["member"]),
    "removeMember": lambda s, c, p, _b, _gone: s.remove(c, p["group"], p["member"]),
    "joinGroup": lambda s, c, p, b, _gone: s.join(
        c, p["group"], p["member"], capabilities=b.get("capabilities"), **_held(b, "ttl_seconds")
    ),
    "renewMembership": lambda s, c, p, b, _gone: s.renew(
        c, p["group"], p["member"], **_held(b, "fencing_token", "ttl_seconds")
    ),
    "updateCapabilities": lambda s, c, p, b, _gone: s.update(
        c, p["group"], p["member"], capabilities=b["capabilities"], **_held(b, "fencing_token")
    ),
    "leaveGroup": lambda s, c, p, b, _gone: s.leave(
        c, p["group"], p["member"], **_held(b, "fencing_token")
    ),
    "renewMemberships": lambda s, c, _p, b, _gone: s.renew_many(
        c, [MemberRenewal(**entry) for entry in b["memberships"]]
    ),
}
# Operations whose bodies may be as large as a group body: capabilities, or many memberships.
GROUP_BODIES = frozenset({"joinGroup", "updateCapabilities", "renewMemberships"})
