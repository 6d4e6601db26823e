"""What the schedule explorer found, pinned: each schedule it shrank, replayed step by step on
both backends (on SQLite a transaction cannot stop between its clock read and its lock, so the
same steps run there without the pause)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.conftest import BACKENDS
from tests.explorer._checks import Checks
from tests.explorer._world import Request, World
from tests.explorer.test_schedules import KEY, open_world


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        made, reader = open_world(request.param, stack)
        CHECKS[made] = Checks(made, reader, [KEY])
        stack.callback(CHECKS.pop, made)
        for server in ("s1", "s2"):
            made.start_server(server)
        made.drain()
        yield made


CHECKS: dict[World, Checks] = {}


def owner(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def rid(n: int) -> str:
    return f"00000000-0000-4000-9000-{n:012d}"


def acquire(world: World, client: int, server: str = "s1", **body: object) -> Request:
    payload = {"owner_token": owner(client), "ttl_seconds": 2.5, **body}
    return world.send(
        str(client), server, "acquire", KEY, payload, request_id=rid(len(world.requests))
    )


def verdict(world: World) -> list[str]:
    """Every violation of the lease promise in the world's history, once all work is done."""
    checks = CHECKS[world]
    checks.after_step()
    world.drain()
    checks.after_step()
    checks.at_the_end()
    return [f"{kind.__name__}: {text}" for kind, text in checks.violations]


def run_through(world: World, request: Request) -> None:
    """Run the request's transaction to its end (past its clock read, on PostgreSQL)."""
    pending = world.work_of(request)
    world.run(pending)
    while pending in world.paused():
        world.resume(pending)


class TestFound:
    def test_a_repeat_after_expiry_is_not_told_it_holds_the_lease(self, world: World) -> None:
        """Finding 1 in its shortest form: acquire with a request id, let the lease expire,
        repeat the request id: the answer must not be the stored lease (now 409)."""
        first = acquire(world, 1, ttl_seconds=1.0)
        run_through(world, first)
        world.advance(1.0)
        again = world.send("1", "s1", "acquire", KEY, first.body, request_id=first.request_id)
        run_through(world, again)
        assert again.status == 409
        assert again.payload["error"]["code"] == "lease_not_held"
        assert verdict(world) == []

    def test_a_grant_is_never_dated_before_its_request(self, world: World) -> None:
        """Finding 2: a release reads the clock, stalls before it locks the key; a waiter joins
        50 ms later; the release then hands the key to it. The lease must not be dated from the
        release's clock read (it was 50 ms early on PostgreSQL before the fix)."""
        holder = acquire(world, 1)
        run_through(world, holder)
        lease = holder.payload
        release = world.send(
            "1",
            "s1",
            "release",
            KEY,
            {"owner_token": owner(1), "fencing_token": lease["fencing_token"]},
            request_id=rid(90),
        )
        world.run(world.work_of(release))  # PostgreSQL: stops at its clock read
        world.advance(0.05)
        waiter = acquire(world, 2, wait_seconds=4.0)
        run_through(world, waiter)
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []
