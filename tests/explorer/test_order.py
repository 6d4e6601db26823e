"""The order a server keeps, pinned on both backends with the explorer's world, where the test
decides when each piece of storage work runs: requests read in one order join the line in that
order (its lanes, `_lanes`), and a release that hands a slot over is answered after the waiter
it handed it to."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.conftest import BACKENDS
from tests.explorer._checks import Checks
from tests.explorer._world import Request, World
from tests.explorer.test_found import CHECKS, acquire, owner, run_through, verdict
from tests.explorer.test_schedules import KEY, open_world


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        made, reader = open_world(request.param, stack)
        CHECKS[made] = Checks(made, reader, [KEY])
        stack.callback(CHECKS.pop, made)
        made.start_server("s1")
        made.drain()
        yield made


def release(world: World, holder: Request) -> Request:
    """The holder releases the lease it was answered with."""
    body = {name: holder.payload[name] for name in ("owner_token", "fencing_token")}
    return world.send(holder.client, holder.server, "release", KEY, body)


def newest_first(world: World, requests: list[Request]) -> None:
    """Run the requests' storage work, always the newest pending piece first, until none is
    left: a schedule that, without lanes, runs their transactions in the reverse order."""
    while mine := [p for p in world.pending if p.request in requests]:
        pending = mine[-1]
        world.run(pending)
        while pending in world.paused():
            world.resume(pending)


class TestLine:
    def test_requests_join_the_line_in_the_order_the_server_read_them(self, world: World) -> None:
        """Waiting acquires read in the order 2, 3, 4 while the key is held: their transactions
        run newest first whenever more than one is pending, and still 2 is first in line, 3
        second, 4 third (before lanes: 4, 3, 2)."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiters = [acquire(world, client, wait_seconds=4.0) for client in (2, 3, 4)]
        newest_first(world, waiters)
        assert [w.status for w in waiters] == [None, None, None]  # all three in line
        granted: list[str] = []
        lease = holder
        for _ in waiters:
            ending = release(world, lease)
            run_through(world, ending)
            world.drain()
            assert ending.status == 204
            (lease,) = [w for w in waiters if w.status == 200 and w.client not in granted]
            granted.append(lease.client)
        assert granted == ["2", "3", "4"]
        assert verdict(world) == []

    def test_a_release_is_answered_after_the_waiter_it_handed_the_key_to(
        self, world: World
    ) -> None:
        """The releasing client cannot ask again before the waiter it handed its slot to has
        its answer (before: the release was answered first, in the same turn as its commit)."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiter = acquire(world, 2, wait_seconds=4.0)
        run_through(world, waiter)
        heard: list[Request] = []
        world.answer_hooks.append(heard.append)
        ending = release(world, holder)
        run_through(world, ending)
        world.drain()
        assert (waiter.status, ending.status) == (200, 204)
        assert heard == [waiter, ending]
        assert waiter.payload["owner_token"] == owner(2)
        assert verdict(world) == []
