"""Watching a group by version, and listing groups and members page by page.

A group's watch is a key's watch with other requests (`_watch.VersionCursor`): the group's state
now, then one state per change of its membership (a join, a leave, a removal, an expiry, new
capabilities), each poll a long poll the server answers as soon as the version moves. Changes
faster than the polls are folded into the latest state. The watch ends, raising
`GroupNotFoundError`, when the group is deleted. Listings follow `next` from page to page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _group_requests, _validate
from ._group_models import GroupState
from ._watch import AsyncWatch, VersionCursor, Watch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from ._async_engine import AsyncEngine
    from ._engine import Engine
    from ._group_models import GroupMember
    from ._seam import Call, Success
    from ._seam._groups import GroupPage, MemberPage

__all__ = [
    "AsyncGroupWatch",
    "GroupCursor",
    "GroupWatch",
    "async_group_pages",
    "async_group_watch",
    "async_member_pages",
    "group_pages",
    "group_watch",
    "member_pages",
]


class GroupCursor(VersionCursor[GroupState]):
    """Where a watch of one group stands (see `VersionCursor`)."""

    def read(self) -> Call[GroupState]:
        """A get of the group."""
        return _group_requests.get(self.key)

    def poll(self, after_version: int, wait: float) -> Call[GroupState]:
        """A long poll of the group."""
        return _group_requests.watch(self.key, after_version=after_version, wait=wait)


class GroupWatch(Watch[GroupState]):
    """A group's states, one per change of its membership: an iterator, and a context manager.

    Made by `Client.groups.watch`. Each `next()` blocks until the group changes (or returns its
    state now, the first time); it raises `GroupNotFoundError` once the group is deleted.
    `close()` ends it (a poll under way in another thread first ends with its answer).
    """


class AsyncGroupWatch(AsyncWatch[GroupState]):
    """The asyncio twin of `GroupWatch`: `async for state in ...`; `aclose()` ends it at once."""


def group_watch(engine: Engine, group: object, after_version: object) -> GroupWatch:
    """A watch of `group` sent through `engine` (arguments checked here)."""
    cursor = GroupCursor(_group_requests.group_name(group), _validate.version(after_version))
    return GroupWatch(cursor, send=engine.send, clock=engine.clock, timeout=engine.timeout)


def async_group_watch(engine: AsyncEngine, group: object, after_version: object) -> AsyncGroupWatch:
    """The asyncio twin of `group_watch`."""
    cursor = GroupCursor(_group_requests.group_name(group), _validate.version(after_version))
    return AsyncGroupWatch(cursor, send=engine.send, clock=engine.clock, timeout=engine.timeout)


def group_pages(
    send: Callable[[Call[GroupPage]], Success[GroupPage]], prefix: str, page_size: int
) -> Iterator[GroupState]:
    """Every listed group's state, page after page, until a page says there is no next."""
    after = ""
    while True:
        page = send(_group_requests.groups_page(prefix, after=after, page_size=page_size)).value
        yield from page.states
        if page.next_after is None:
            return
        after = page.next_after


async def async_group_pages(
    send: Callable[[Call[GroupPage]], Awaitable[Success[GroupPage]]], prefix: str, page_size: int
) -> AsyncIterator[GroupState]:
    """The asyncio twin of `group_pages`."""
    after = ""
    while True:
        call = _group_requests.groups_page(prefix, after=after, page_size=page_size)
        page = (await send(call)).value
        for state in page.states:
            yield state
        if page.next_after is None:
            return
        after = page.next_after


def member_pages(
    send: Callable[[Call[MemberPage]], Success[MemberPage]], group: str, page_size: int
) -> Iterator[GroupMember]:
    """Every live member of `group`, page after page, until a page says there is no next."""
    after = ""
    while True:
        page = send(_group_requests.members_page(group, after=after, page_size=page_size)).value
        yield from page.members
        if page.next_after is None:
            return
        after = page.next_after


async def async_member_pages(
    send: Callable[[Call[MemberPage]], Awaitable[Success[MemberPage]]], group: str, page_size: int
) -> AsyncIterator[GroupMember]:
    """The asyncio twin of `member_pages`."""
    after = ""
    while True:
        call = _group_requests.members_page(group, after=after, page_size=page_size)
        page = (await send(call)).value
        for member in page.members:
            yield member
        if page.next_after is None:
            return
        after = page.next_after
