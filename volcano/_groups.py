"""Groups: named sets of members with capabilities, reached as `client.groups`.

```python
client.groups.create("workers")
with client.groups.membership("workers", "worker-7", ttl=10, capabilities={"port": 8080}):
    for member in client.groups.members("workers"):
        print(member.member, member.capabilities)
```

A group is created and deleted explicitly (deleting one with live members is refused); a
member joins with a ttl and is a lease on its group: it leaves when its ttl runs out unless
renewed, by hand (`renew`) or by the client's renewal loop (`membership`, batched with the
client's other memberships). A group's membership is watched by version (`watch`), and its
leader elected on the lock `groups:` + its name (`campaign`, `leader`, `observe`): a leader's
label is its member name. `Groups` and `AsyncGroups` build their requests with the same code
(`_group_requests`) and differ only in how they send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _group_requests, _group_watch, _requests, _tracing, _validate, _watch
from ._elections import (
    AsyncCampaign,
    AsyncLeaderObserver,
    Campaign,
    Leader,
    LeaderObserver,
    leader_of,
)
from ._membership import AsyncMembershipGuard, MembershipGuard, join, join_async

if TYPE_CHECKING:
    import uuid
    from collections.abc import AsyncIterator, Callable, Iterator
    from datetime import timedelta

    from ._async_engine import AsyncEngine
    from ._engine import Engine
    from ._exceptions import Error
    from ._group_models import GroupMember, GroupState, MemberRemoval, Membership

__all__ = ["AsyncGroups", "Groups"]


class _GroupsBase:
    """What both namespaces share: naming a group's election."""

    @staticmethod
    def election_key(group: str) -> str:
        """The lock key on which `group`'s leader is elected: `groups:` + its name."""
        return _group_requests.election_key(group)


class Groups(_GroupsBase):
    """The group operations of a `Client`, reached as `client.groups`.

    Every method checks its arguments before sending and raises `InvalidArgumentError` naming
    a bad one; `ClientClosedError` once the client is closed; `APIConnectionError` when no
    answer arrived; and an `APIStatusError` subclass for an error answer: `GroupNotFoundError`
    for a group that does not exist, `MemberNotFoundError`, `GroupExistsError`,
    `GroupNotEmptyError`, `MemberExistsError`, `LeaseNotHeldError`. Mutations accept
    `request_id=` (a UUID string, or `uuid.UUID`), fresh by default.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<Groups of {self._engine.describe()}>"

    @_tracing.traced("create_group")
    def create(self, group: str, *, request_id: str | uuid.UUID | None = None) -> GroupState:
        """Create `group`, empty.

        Args:
            group: The group's name: 1 to 240 characters, a letter or digit, then letters,
                digits, `.`, `_`, `:` or `-`.
            request_id: The request id (a UUID); a fresh one by default.

        Returns:
            The new group's state (a group deleted before goes on with its version).

        Raises:
            GroupExistsError: The group exists already.
        """
        return self._engine.send(_group_requests.create(group, request_id=request_id)).value

    @_tracing.traced("delete_group")
    def delete(self, group: str, *, request_id: str | uuid.UUID | None = None) -> None:
        """Delete `group`, once it has no live member.

        Raises:
            GroupNotEmptyError: A member is live (expired ones do not count).
            GroupNotFoundError: The group does not exist.
        """
        self._engine.send(_group_requests.delete(group, request_id=request_id))

    @_tracing.traced("get_group")
    def get(self, group: str) -> GroupState:
        """`group`'s state: its version, its last fencing token, how many live members.

        Raises:
            GroupNotFoundError: The group does not exist.
        """
        return self._engine.send(_group_requests.get(group)).value

    def list(self, prefix: str = "", *, page_size: int = 100) -> Iterator[GroupState]:
        """Every group of the project whose name starts with `prefix`, in name order.

        Pages of `page_size` groups (1 to 500) are asked for as the iteration goes on.
        """
        checked, size = _validate.prefix(prefix), _validate.page_size(page_size)
        return _group_watch.group_pages(self._engine.send, checked, size)

    @_tracing.traced("join")
    def join(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        capabilities: Any = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Join `group` as `member` for `ttl` seconds, announcing `capabilities`.

        Renew the membership before its ttl runs out (`renew`, or hold it with `membership`),
        or the member leaves by itself. A transport failure or a 503 is retried once with the
        very same request, as an acquisition is.

        Args:
            group: The group's name.
            member: The member's name: 1 to 200 characters, made as a key is.
            ttl: The membership's time to live: seconds (0.1 to 86400) or a `timedelta`.
            capabilities: What the member announces to anyone who reads the group: `bytes`,
                or a JSON value (dict, list, str, number, bool); at most 65,538 bytes (JSON
                written compactly in UTF-8). Never a secret. None (the default): none.
            token: The owner token (a UUID); a fresh one by default. Keep it private.
            request_id: The request id (a UUID); a fresh one by default.

        Returns:
            The membership. Joining again with a live member's own token returns that
            membership (same fencing token) with a new expiry and these capabilities.

        Raises:
            MemberExistsError: Another owner token holds this member (`retry_after`: how long
                until it expires unless renewed).
            GroupNotFoundError: The group does not exist.
        """
        joining = _group_requests.join(
            group, member, ttl=ttl, capabilities=capabilities, token=token, request_id=request_id
        )
        return join(self._engine, joining).value

    @_tracing.traced("renew_membership")
    def renew(
        self,
        membership: Membership,
        *,
        ttl: float | timedelta | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Extend `membership` to `ttl` seconds from now (default: its own ttl); not retried.

        Raises:
            LeaseNotHeldError: It left, was removed, or its ttl ran out.
        """
        call = _group_requests.renew(membership, ttl=ttl, request_id=request_id)
        return self._engine.send(call).value

    @_tracing.traced("update_capabilities")
    def update(
        self,
        membership: Membership,
        capabilities: Any,
        *,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Announce new `capabilities` (None: none) for `membership`; its expiry stays.

        Raises:
            LeaseNotHeldError: It left, was removed, or its ttl ran out.
        """
        call = _group_requests.update(membership, capabilities, request_id=request_id)
        return self._engine.send(call).value

    @_tracing.traced("leave")
    def leave(self, membership: Membership, *, request_id: str | uuid.UUID | None = None) -> None:
        """End `membership`: the member leaves its group; not retried.

        Raises:
            LeaseNotHeldError: It had left, was removed, or its ttl ran out.
        """
        self._engine.send(_group_requests.leave(membership, request_id=request_id))

    @_tracing.traced("remove_member")
    def remove(
        self, group: str, member: str, *, request_id: str | uuid.UUID | None = None
    ) -> MemberRemoval:
        """Remove `member` from `group` without its owner token: administrative recovery.

        Removing nothing is not an error (`removed` is False).
        """
        call = _group_requests.remove(group, member, request_id=request_id)
        return self._engine.send(call).value

    @_tracing.traced("get_member")
    def member(self, group: str, member: str) -> GroupMember:
        """One live member of `group`, with its capabilities.

        Raises:
            MemberNotFoundError: It has not joined (or left, was removed, or expired).
            GroupNotFoundError: The group does not exist.
        """
        return self._engine.send(_group_requests.member(group, member)).value

    def members(self, group: str, *, page_size: int = 100) -> Iterator[GroupMember]:
        """Every live member of `group`, in member order, with its capabilities.

        Pages of up to `page_size` members (1 to 500, and at most 256 KiB of capabilities
        each) are asked for as the iteration goes on. A member joined throughout appears
        exactly once; one that joined or left meanwhile may or may not.
        """
        checked = _group_requests.group_name(group)
        size = _validate.page_size(page_size)
        return _group_watch.member_pages(self._engine.send, checked, size)

    def watch(self, group: str, *, after_version: int | None = None) -> _group_watch.GroupWatch:
        """Watch `group`: its state now, then one `GroupState` per change of its membership.

        ```python
        client.groups.create("pool")
        with client.groups.watch("pool") as states:
            print("members:", next(states).members)
            with client.groups.membership("pool", "worker-9", ttl=10):
                print("members:", next(states).members)  # as soon as it joined
        ```

        A change is a join, a leave, a removal, an expiry or new capabilities; list the
        members when one comes. Changes faster than the polls are folded into the latest
        state. Transport failures and overloaded servers are retried, as a key's watch does;
        the iteration raises `GroupNotFoundError` once the group is deleted.
        """
        return _group_watch.group_watch(self._engine, group, after_version)

    def membership(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        capabilities: Any = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> MembershipGuard:
        """A guard that is a member of `group` for a `with` block, renewed in the background.

        ```python
        client.groups.create("crew")
        with client.groups.membership("crew", "worker-7", ttl=10) as held:
            held.update({"load": 0.4})  # announce new capabilities
            held.check()  # raises LockLostError once the membership is lost
        ```

        Entering joins (as `join`, with a fresh owner token); the client's renewal loop renews
        the membership with the client's other memberships due then, in one request; leaving
        leaves the group. The arguments are `join`'s and `Locks.with_lock`'s.
        """
        plan = _group_requests.membership_plan(
            group,
            member,
            ttl=ttl,
            capabilities=capabilities,
            at_risk_margin=at_risk_margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
        )
        return MembershipGuard(self._engine, plan)

    def campaign(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        wait: float | timedelta | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> Campaign:
        """Campaign to lead `group` as `member`: `Elections.campaign` on its election key.

        The leadership's label is `member`, so `leader(group)` names it. `wait=0` tries once
        and raises `LockHeldError` when another member leads. Leading a group does not need
        membership of it.
        """
        plan = _group_requests.campaign_plan(
            group,
            member,
            ttl=ttl,
            wait=wait,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
            at_risk_margin=at_risk_margin,
        )
        return Campaign(self._engine, plan)

    def leader(self, group: str) -> Leader | None:
        """Who leads `group`: `(member, term)`, or None when nobody does."""
        key = _group_requests.election_key(group)
        return leader_of(key, self._engine.send(_requests.get(key, request_id=None)).value)

    def observe(self, group: str) -> LeaderObserver:
        """Each change of `group`'s leader, and each vacancy (None), as `Elections.observe`."""
        key = _group_requests.election_key(group)
        return LeaderObserver(key, _watch.watch(self._engine, key, None))


class AsyncGroups(_GroupsBase):
    """The group operations of an `AsyncClient`; see `Groups`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<AsyncGroups of {self._engine.describe()}>"

    @_tracing.traced_async("create_group")
    async def create(self, group: str, *, request_id: str | uuid.UUID | None = None) -> GroupState:
        """Create `group`; see `Groups.create`."""
        call = _group_requests.create(group, request_id=request_id)
        return (await self._engine.send(call)).value

    @_tracing.traced_async("delete_group")
    async def delete(self, group: str, *, request_id: str | uuid.UUID | None = None) -> None:
        """Delete `group`; see `Groups.delete`."""
        await self._engine.send(_group_requests.delete(group, request_id=request_id))

    @_tracing.traced_async("get_group")
    async def get(self, group: str) -> GroupState:
        """`group`'s state; see `Groups.get`."""
        return (await self._engine.send(_group_requests.get(group))).value

    def list(self, prefix: str = "", *, page_size: int = 100) -> AsyncIterator[GroupState]:
        """Every group whose name starts with `prefix`; see `Groups.list`."""
        checked, size = _validate.prefix(prefix), _validate.page_size(page_size)
        return _group_watch.async_group_pages(self._engine.send, checked, size)

    @_tracing.traced_async("join")
    async def join(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        capabilities: Any = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Join `group` as `member`; see `Groups.join`."""
        joining = _group_requests.join(
            group, member, ttl=ttl, capabilities=capabilities, token=token, request_id=request_id
        )
        return (await join_async(self._engine, joining)).value

    @_tracing.traced_async("renew_membership")
    async def renew(
        self,
        membership: Membership,
        *,
        ttl: float | timedelta | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Extend `membership`; see `Groups.renew`."""
        call = _group_requests.renew(membership, ttl=ttl, request_id=request_id)
        return (await self._engine.send(call)).value

    @_tracing.traced_async("update_capabilities")
    async def update(
        self,
        membership: Membership,
        capabilities: Any,
        *,
        request_id: str | uuid.UUID | None = None,
    ) -> Membership:
        """Announce new capabilities for `membership`; see `Groups.update`."""
        call = _group_requests.update(membership, capabilities, request_id=request_id)
        return (await self._engine.send(call)).value

    @_tracing.traced_async("leave")
    async def leave(
        self, membership: Membership, *, request_id: str | uuid.UUID | None = None
    ) -> None:
        """End `membership`; see `Groups.leave`."""
        await self._engine.send(_group_requests.leave(membership, request_id=request_id))

    @_tracing.traced_async("remove_member")
    async def remove(
        self, group: str, member: str, *, request_id: str | uuid.UUID | None = None
    ) -> MemberRemoval:
        """Remove `member` without its owner token; see `Groups.remove`."""
        call = _group_requests.remove(group, member, request_id=request_id)
        return (await self._engine.send(call)).value

    @_tracing.traced_async("get_member")
    async def member(self, group: str, member: str) -> GroupMember:
        """One live member; see `Groups.member`."""
        return (await self._engine.send(_group_requests.member(group, member))).value

    def members(self, group: str, *, page_size: int = 100) -> AsyncIterator[GroupMember]:
        """Every live member of `group`; see `Groups.members`."""
        checked = _group_requests.group_name(group)
        size = _validate.page_size(page_size)
        return _group_watch.async_member_pages(self._engine.send, checked, size)

    def watch(
        self, group: str, *, after_version: int | None = None
    ) -> _group_watch.AsyncGroupWatch:
        """Watch `group`'s membership; see `Groups.watch`."""
        return _group_watch.async_group_watch(self._engine, group, after_version)

    def membership(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        capabilities: Any = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> AsyncMembershipGuard:
        """A membership for an `async with` block; see `Groups.membership`."""
        plan = _group_requests.membership_plan(
            group,
            member,
            ttl=ttl,
            capabilities=capabilities,
            at_risk_margin=at_risk_margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
        )
        return AsyncMembershipGuard(self._engine, plan)

    def campaign(
        self,
        group: str,
        member: str,
        *,
        ttl: float | timedelta,
        wait: float | timedelta | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> AsyncCampaign:
        """Campaign to lead `group` as `member`; see `Groups.campaign`."""
        plan = _group_requests.campaign_plan(
            group,
            member,
            ttl=ttl,
            wait=wait,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
            at_risk_margin=at_risk_margin,
        )
        return AsyncCampaign(self._engine, plan)

    async def leader(self, group: str) -> Leader | None:
        """Who leads `group`, or None; see `Groups.leader`."""
        key = _group_requests.election_key(group)
        return leader_of(key, (await self._engine.send(_requests.get(key, request_id=None))).value)

    def observe(self, group: str) -> AsyncLeaderObserver:
        """Each change of `group`'s leader; see `Groups.observe`."""
        key = _group_requests.election_key(group)
        return AsyncLeaderObserver(key, _watch.async_watch(self._engine, key, None))
