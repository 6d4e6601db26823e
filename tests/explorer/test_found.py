"""What the schedule explorer found, pinned: each schedule it shrank, replayed step by step on
both backends (on SQLite a transaction cannot stop between its clock read and its lock, so the
same steps run there without the pause)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from tests.conftest import BACKENDS
from tests.explorer._checks import Checks
from tests.explorer._world import Request, World
from tests.explorer.test_schedules import KEY, open_world
from volcano_server.locks import _rules, _transactions


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
        50 ms later (through another server: one server runs its transactions on a key in
        turn, `_lanes`); the release then hands the key to it. The lease must not be dated from
        the release's clock read (it was 50 ms early on PostgreSQL before the fix)."""
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
        waiter = acquire(world, 2, "s2", wait_seconds=4.0)
        run_through(world, waiter)
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []


class TestUndelivered:
    """Finding 1: a lease handed to a waiter whose client left is ended (the contract: no lease
    nobody receives), but the waiter's retry with its request id may come first."""

    @staticmethod
    def granted_to_a_gone_waiter(world: World) -> tuple[Request, Request]:
        """b waits; b's client closes as a's release hands it the key: (b's wait, a's release).
        The server is about to end b's lease (its undeliver transaction is pending)."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiter = acquire(world, 2, wait_seconds=4.0)
        run_through(world, waiter)
        token = holder.payload["fencing_token"]
        body = {"owner_token": owner(1), "fencing_token": token}
        release = world.send("1", "s1", "release", KEY, body, request_id=rid(91))
        handing_over = world.work_of(release)
        # Closed just before the hand-off commits: the server hears of it at its next turn,
        # before the woken waiter's request runs again.
        world.close(waiter)
        world.run(handing_over, settle=False)  # PostgreSQL: stops at its clock read
        while handing_over in world.paused():
            world.resume(handing_over)
        world.settle()
        assert release.status == 204
        assert len(world.pending) == 1  # the transaction that ends b's undelivered lease
        return waiter, release

    def test_a_repeat_that_came_first_keeps_the_lease(self, world: World) -> None:
        """b's retry is replayed the lease before the server ends it: the server must then
        leave it to b (before the fix it ended it, and c got the key while b held it)."""
        waiter, _ = self.granted_to_a_gone_waiter(world)
        undeliver = world.pending[0]
        retry = world.send("2", "s2", "acquire", KEY, waiter.body, request_id=waiter.request_id)
        run_through(world, retry)
        assert (retry.status, retry.replayed) == (200, True)
        world.run(undeliver)
        while undeliver in world.paused():
            world.resume(undeliver)
        rival = acquire(world, 3, server="s2")
        run_through(world, rival)
        assert rival.status == 409
        assert verdict(world) == []

    def test_a_lease_its_client_left_is_ended_and_a_repeat_told_so(self, world: World) -> None:
        """The server ends b's lease first: b's retry hears 409 lease_not_held (not the stored
        lease), and c gets the key."""
        waiter, _ = self.granted_to_a_gone_waiter(world)
        world.drain()
        retry = world.send("2", "s2", "acquire", KEY, waiter.body, request_id=waiter.request_id)
        run_through(world, retry)
        assert (retry.status, retry.replayed) == (409, True)
        assert "the client left" in retry.payload["error"]["message"]
        rival = acquire(world, 3, server="s2")
        run_through(world, rival)
        assert rival.status == 200
        assert verdict(world) == []


class TestStalled:
    def test_a_lease_that_expired_in_a_stall_is_not_answered(self, world: World) -> None:
        """A transaction reads the clock under the key's lock, then stalls longer than the ttl:
        its answer must not tell of a lease that has already ended (on PostgreSQL it is 409;
        SQLite cannot stall between its clock read and its commit here)."""
        holder = acquire(world, 1, ttl_seconds=1.0)
        world.run(world.work_of(holder))  # PostgreSQL: stops at its clock read
        world.advance(1.5)
        while world.paused():
            world.resume(world.paused()[0])
        world.settle()
        assert holder.status == (409 if world.backend == "postgres" else 200)
        assert verdict(world) == []


class TestTheJudge:
    """The checks themselves, on a server broken on purpose: a judge that cannot fail would
    pass every schedule."""

    def test_a_third_holder_of_a_limit_2_key_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rules that grant past a key's limit (its row still says 2) break 'at most limit
        holders': the explorer reports TwoHolders, from the answers and from the database."""
        honest = _transactions.decide_acquire

        def past_the_limit(row: Any, now: int, **kwargs: Any) -> Any:
            decision = honest(row, now, **kwargs)
            if row is None or not decision.held_by_another:
                return decision
            granted = honest(
                attrs.evolve(row, limit=row.limit + 1), now, **{**kwargs, "limit": row.limit + 1}
            )
            return attrs.evolve(granted, row=attrs.evolve(granted.row, limit=row.limit))

        monkeypatch.setattr(_transactions, "decide_acquire", past_the_limit)
        for client in (1, 2, 3):
            run_through(world, request := acquire(world, client, limit=2))
            assert request.status == 200
        found = verdict(world)
        assert any(line.startswith("TwoHolders: ") and "limit 2" in line for line in found), found

    def test_two_holders_of_a_limit_2_key_are_not_a_violation(self, world: World) -> None:
        """The honest rules: two holders of a limit-2 key at once, a third refused, no
        violation."""
        for client in (1, 2):
            run_through(world, request := acquire(world, client, limit=2))
            assert request.status == 200
        run_through(world, third := acquire(world, 3, limit=2))
        assert third.status == 409
        assert verdict(world) == []

    def test_an_exclusive_grant_beside_shared_holders_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rules blind to modes (any lease fits beside shared ones) break 'never an exclusive
        holder beside a shared one': ExclusiveNotAlone, from the answers and the database."""
        honest = _rules.has_room

        def blind(row: Any, now: int, *, shared: bool, limit: int | None = None) -> bool:
            return honest(row, now, shared=True, limit=limit)

        monkeypatch.setattr(_rules, "has_room", blind)
        run_through(world, reader := acquire(world, 1, shared=True))
        run_through(world, writer := acquire(world, 2))
        assert (reader.status, writer.status) == (200, 200)
        found = verdict(world)
        kinds = [line for line in found if line.startswith("ExclusiveNotAlone: ")]
        assert any("still hold it" in line for line in kinds), found
        assert any("live leases" in line for line in kinds), found

    def test_a_shared_newcomer_passing_a_waiting_writer_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rules that let a shared acquire past the line (as if nobody waited) break 'waiters
        in arrival order': PassedOver, a newcomer barging past the exclusive waiter."""
        honest = _transactions.decide_acquire

        def barging(row: Any, now: int, **kwargs: Any) -> Any:
            return honest(row, now, **{**kwargs, "line_waits": False})

        monkeypatch.setattr(_transactions, "decide_acquire", barging)
        run_through(world, acquire(world, 1, shared=True))
        run_through(world, writer := acquire(world, 2, wait_seconds=4.0))
        assert writer.in_flight
        run_through(world, late := acquire(world, 3, shared=True))
        assert late.status == 200
        found = verdict(world)
        assert any(line.startswith("PassedOver: ") and "barging" in line for line in found), found

    def test_readers_at_the_head_served_together_are_not_a_violation(self, world: World) -> None:
        """The honest rules: behind an exclusive holder, two shared waiters, an exclusive one
        and a shared one; the release grants the two shared ones together, the others wait
        (the shared one refused at once while the writer waits), and nothing is violated."""
        run_through(world, holder := acquire(world, 1))
        waiting = [
            acquire(world, 2, shared=True, wait_seconds=4.0),
            acquire(world, 3, shared=True, wait_seconds=4.0),
            acquire(world, 4, wait_seconds=4.0),
        ]
        for request in waiting:
            run_through(world, request)
        run_through(world, barging := acquire(world, 5, shared=True))
        assert barging.status == 409
        body = {name: holder.payload[name] for name in ("owner_token", "fencing_token")}
        run_through(world, world.send(holder.client, "s1", "release", KEY, body))
        world.drain()
        assert [request.status for request in waiting] == [200, 200, None]
        assert verdict(world) == []
