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
from tests.explorer.test_schedules import ELECTION, KEY, open_world
from volcano_server.locks import _rules, _transactions, _watching


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        made, reader = open_world(request.param, stack)
        CHECKS[made] = Checks(made, reader, [KEY, ELECTION], elections=[ELECTION])
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
        50 ms later through the same server, whose lane holds its transaction back behind the
        release's for at most 1 s (`_lanes`), then lets it run (its patience ran out); the
        release then hands the key to it. The lease must not be dated from the release's
        clock read (it was 50 ms early on PostgreSQL before the fix). Through the other
        server, as this test went once lanes landed, the waiter's request only ever got a
        reservation, and the stale clock read went unseen (issue 34)."""
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
        waiter = acquire(world, 2, "s1", wait_seconds=4.0)
        if world.backend == "postgres":  # held in the lane behind the stalled release
            assert not [p for p in world.pending if p.request is waiter]
        world.advance(1.0)  # past the lane's patience
        run_through(world, waiter)  # blocks on the key's row lock, or joins the line
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []


class TestTheJudgesReckoning:
    def test_an_unanswered_shorter_acquire_is_the_latest_word(self, world: World) -> None:
        """Issue 34 (the explorer's TwoHolders on SQLite, `--explore`): b holds the key until
        t=2.5, then acquires it again with ttl 1 and closes its connection before the answer;
        the server shortened the lease to t=1 and hands the key to a at t=1. b counts on no
        more than its latest request gave (promise 1: `first send + ttl` of the latest request
        that gave or renewed the lease): the judge counted only answers heard, and reported
        two holders where the server kept its word."""
        holder = acquire(world, 2, "s2")
        run_through(world, holder)
        shorter = world.send("2", "s1", "acquire", KEY, {**holder.body, "ttl_seconds": 1.0})
        world.close(shorter)
        run_through(world, shorter)
        waiter = acquire(world, 1, "s1", ttl_seconds=1.0, wait_seconds=4.0)
        run_through(world, waiter)
        world.advance(1.1)
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []


class TestLapsedReservation:
    def test_a_waiter_whose_reservation_lapsed_is_served_first(self, world: World) -> None:
        """Issue 34: b waits through s2; a's release through s1 reserves the key for b, and s2
        does not take it in time (its poll or NOTIFY never runs): the reservation lapses. c
        then asks through s1. b, first in line, connected, its server alive, must not be
        passed over: c is refused (b reserved again), and b is granted the key. Before the
        fix, c got it (PassedOver, once the check saw `reserved` rows) and b heard 409."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiter = acquire(world, 2, "s2", wait_seconds=4.0)
        run_through(world, waiter)
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        run_through(world, world.send("1", "s1", "release", KEY, body, request_id=rid(84)))
        assert [state for _q, _o, state, _s in CHECKS[world].reader.waiters(KEY)] == ["reserved"]
        world.advance(2.1)  # past the reservation (2 s), within s2's heartbeat (3 s)
        rival = acquire(world, 3, "s1")
        run_through(world, rival)
        assert rival.status == 409
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []


class TestLostCommit:
    def test_a_change_whose_commit_was_lost_wakes_the_watchers_here(self, world: World) -> None:
        """Issue 34 (the explorer's unexplained `WatcherBehind`, looked into): s2 is alone
        (s1 was killed and its heartbeat has lapsed, so on SQLite s2 polls nobody), a watcher
        waits on s2 from version 1, and a release through s2 commits but loses its answer (the
        connection drops during COMMIT). Before the fix, s2 took the failure for a rollback,
        woke none of its watchers, and the watcher went on waiting from version 1 with the
        key at 2 until its wait ran out; now the keys such a transaction would have moved are
        read again for their watchers here, at once."""
        world.kill_server("s1")
        world.advance(3.5)  # past s1's heartbeat lifetime (3 s)
        world.drain()
        holder = acquire(world, 1, "s2")
        run_through(world, holder)
        first = watch(world, "w", KEY, after=0, server="s2")
        world.drain()
        assert (first.status, first.payload["version"]) == (200, 1)
        watcher = watch(world, "w", KEY, after=1, server="s2")
        world.drain()
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        release = world.send("1", "s2", "release", KEY, body, request_id=rid(85))
        pending = world.work_of(release)
        world.run(pending, "lost")
        while pending in world.paused():
            world.resume(pending)
        world.drain()
        assert release.status == 503
        assert (watcher.status, watcher.payload["version"]) == (200, 2)
        CHECKS[world].watcher_agrees("w", KEY)
        assert verdict(world) == []


class TestReplayTellsNow:
    """Issue 34: a replay tells the lease as it is now, never the expiry stored with it. b takes
    the key with request id X (ttl 2.5), shortens the same lease with request id Y (ttl 1), then
    repeats X: told the stored t=2.5 (before the fix), b counted on the key until 2.5 while the
    server let it expire at 1.5 and granted c the key at 1.6 (TwoHolders; the explorer found
    it in 44 steps)."""

    @staticmethod
    def shortened(world: World, first: Request, shorter: dict[str, object], op: str) -> Request:
        """Shorten b's lease at t=0.5 with `op` (a new request id), repeat `first`, and let c
        take the key once the shortened lease has expired; returns the repeat."""
        world.advance(0.5)
        run_through(world, world.send("2", "s1", op, KEY, shorter, request_id=rid(80)))
        again = world.send("2", "s2", first.op, KEY, first.body, request_id=first.request_id)
        run_through(world, again)
        assert (again.status, again.replayed) == (200, True)
        world.advance(1.1)
        rival = acquire(world, 3, "s2")
        run_through(world, rival)
        assert rival.status == 200
        return again

    def test_an_acquire_replayed_tells_the_expiry_of_now(self, world: World) -> None:
        """The acquire's replay tells the shortened expiry (t=1.5) and ttl 1."""
        first = acquire(world, 2, ttl_seconds=2.5)
        run_through(world, first)
        again = self.shortened(world, first, {**first.body, "ttl_seconds": 1.0}, "acquire")
        assert again.payload["ttl_seconds"] == 1.0
        assert verdict(world) == []

    def test_a_renewal_replayed_tells_the_expiry_of_now(self, world: World) -> None:
        """The same with renewals: X renews for 2.5 s, Y for 1 s, X again."""
        holder = acquire(world, 2, ttl_seconds=2.5)
        run_through(world, holder)
        body = {"owner_token": owner(2), "fencing_token": holder.payload["fencing_token"]}
        first = world.send(
            "2", "s1", "renew", KEY, {**body, "ttl_seconds": 2.5}, request_id=rid(81)
        )
        run_through(world, first)
        again = self.shortened(world, first, {**body, "ttl_seconds": 1.0}, "renew")
        assert again.payload["ttl_seconds"] == 1.0
        assert verdict(world) == []

    def test_a_batch_replayed_tells_each_expiry_of_now(self, world: World) -> None:
        """The same with a batch renewal: each lease of its results as it is now."""
        holder = acquire(world, 2, ttl_seconds=2.5)
        run_through(world, holder)
        token = holder.payload["fencing_token"]
        entry = {"key": KEY, "owner_token": owner(2), "fencing_token": token, "ttl_seconds": 2.5}
        first = world.send("2", "s1", "renew_many", KEY, {"leases": [entry]}, request_id=rid(82))
        run_through(world, first)
        shorter = {"owner_token": owner(2), "fencing_token": token, "ttl_seconds": 1.0}
        again = self.shortened(world, first, shorter, "renew")
        assert again.payload["results"][0]["lease"]["ttl_seconds"] == 1.0
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

    def test_its_owner_told_again_in_the_same_microsecond_keeps_it(self, world: World) -> None:
        """Issue 34: b's client left as the key was handed to it; b's owner acquires again
        (a new request id, the same ttl) in the same microsecond, and is told the lease. The
        server must not then end it as undelivered: before the fix the two leases were equal
        (same token, same expiry), undeliver ended the one just told, and c got the key while
        b held it (TwoHolders)."""
        waiter, _ = self.granted_to_a_gone_waiter(world)
        undeliver = world.pending[0]
        again = acquire(world, 2, "s2", ttl_seconds=waiter.body["ttl_seconds"])
        run_through(world, again)
        assert again.status == 200
        world.run(undeliver)
        while undeliver in world.paused():
            world.resume(undeliver)
        rival = acquire(world, 3, server="s2")
        run_through(world, rival)
        assert rival.status == 409
        assert verdict(world) == []

    def test_a_grant_whose_commit_was_lost_is_told_to_its_waiter(self, world: World) -> None:
        """Issue 34 (the explorer's LeaseNobodyHeard): a's release hands the key to b, waiting
        here, and commits, but the server hears the database was lost during COMMIT: it put
        b back in line as if nothing had happened. The server must ask the database and tell
        b of the lease it holds (before the fix, b heard 409 lock_held when its wait ran out,
        and the key stayed held in b's name, by nobody who heard of it, until its ttl)."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiter = acquire(world, 2, wait_seconds=1.5)
        run_through(world, waiter)
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        release = world.send("1", "s1", "release", KEY, body, request_id=rid(85))
        handing_over = world.work_of(release)
        world.run(handing_over, "lost")
        while handing_over in world.paused():
            world.resume(handing_over)
        world.settle()
        assert release.status == 503
        world.advance(1.5)
        world.drain()
        assert waiter.status == 200
        assert verdict(world) == []

    def test_a_grant_whose_commit_was_lost_is_ended_when_its_client_leaves(
        self, world: World
    ) -> None:
        """The same lost commit, and then b's client leaves: the lease it never heard of is
        ended at once, and c gets the key."""
        holder = acquire(world, 1)
        run_through(world, holder)
        waiter = acquire(world, 2, wait_seconds=4.0)
        run_through(world, waiter)
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        release = world.send("1", "s1", "release", KEY, body, request_id=rid(86))
        handing_over = world.work_of(release)
        world.run(handing_over, "lost")
        while handing_over in world.paused():
            world.resume(handing_over)
        world.settle()
        world.close(waiter)
        world.drain()
        rival = acquire(world, 3, "s2")
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

    def test_a_stalled_renewal_never_brings_an_expired_lease_back(self, world: World) -> None:
        """Issue 34: a renewal reads the clock under the key's lock and stalls past the
        lease's expiry; meanwhile a reader sees the key free, at version v+1. The renewal must
        not then commit with its stale clock (before the fix the lease was live again at
        version v: VersionWentBack): its commit is checked against the lease's old expiry on
        the database clock, rolled back, and run again, and it hears 409. On SQLite the
        renewal runs at once, before the expiry, and is granted."""
        holder = acquire(world, 1, ttl_seconds=1.0)
        run_through(world, holder)
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        renewal = world.send(
            "1", "s1", "renew", KEY, {**body, "ttl_seconds": 2.5}, request_id=rid(83)
        )
        world.run(world.work_of(renewal))  # PostgreSQL: stops at its clock read, row locked
        world.advance(1.5)
        reading = world.send("9", "s2", "get", KEY)
        run_through(world, reading)
        CHECKS[world].after_step()  # the key's version as a reader sees it now
        if world.backend == "postgres":
            assert reading.payload["held"] is False
        while world.paused():
            world.resume(world.paused()[0])
        world.settle()
        assert renewal.status == (409 if world.backend == "postgres" else 200)
        assert verdict(world) == []

    def test_an_answer_counts_the_delay_of_its_commit_clock_read(self, world: World) -> None:
        """Issue 34: the round trip that reads the clock right after a grant's COMMIT is
        answered 0.8 s late (ttl 0.3 s); meanwhile c is granted the key through the other
        server. The answer is judged true at the time it is sent, counting every delay since
        the clock read was asked for: 409 on PostgreSQL (before the fix, 200 with the old
        lease: UntrueAnswer). SQLite's clock read is local: there the grant is answered at
        once, and c takes the key after its expiry."""
        holder = acquire(world, 1, ttl_seconds=0.3)
        granting = world.work_of(holder)
        world.run(granting)
        if world.backend == "postgres":
            world.resume(granting)  # past its opening clock read: it stops at the commit's
            assert granting in world.paused()
        world.advance(0.8)
        rival = acquire(world, 3, "s2")
        run_through(world, rival)
        assert rival.status == 200
        while granting in world.paused():
            world.resume(granting)
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


def watch(world: World, client: str, key: str, after: int, server: str = "s1") -> Request:
    """A watch of `key` from version `after`, waiting up to 4 s."""
    return world.send(client, server, "watch", key, {"after_version": after, "wait_seconds": 4.0})


def campaign(world: World, client: int, server: str = "s1", **body: object) -> Request:
    """A candidate's campaign for the election, its name as its label, run to its end."""
    payload = {"owner_token": owner(client), "ttl_seconds": 2.5, "label": f"member-{client}"}
    request = world.send(
        str(client),
        server,
        "acquire",
        ELECTION,
        {**payload, **body},
        request_id=rid(len(world.requests)),
    )
    run_through(world, request)
    return request


def resign(world: World, leader: Request, server: str = "s1", *, by: int | None = None) -> Request:
    """The leader releases its term (or, `by`, another candidate names that term)."""
    lease = leader.payload
    who = owner(by) if by is not None else lease["owner_token"]
    body = {"owner_token": who, "fencing_token": lease["fencing_token"]}
    request = world.send(leader.client, server, "release", ELECTION, body)
    run_through(world, request)
    return request


def kinds(world: World) -> set[str]:
    return {line.split(":", 1)[0] for line in verdict(world)}


class TestTheJudgeOfWatches:
    """The checks of watch versions, on a server broken on purpose (issue 34: the explorer's
    world gains watches that name any version)."""

    def test_a_watch_answered_with_the_version_it_named_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A server that answers every read to every watcher (`delivers` always true) tells a
        watch the very version it named, long before its wait ran out: VersionNotPassed."""
        monkeypatch.setattr(_watching, "delivers", lambda *_args, **_kw: True)
        run_through(world, acquire(world, 1))
        world.drain()
        viewer = watch(world, "v", KEY, after=1)
        world.drain()
        assert (viewer.status, viewer.payload["version"]) == (200, 1)
        assert "VersionNotPassed" in kinds(world)

    def test_a_watch_waits_while_the_version_is_the_one_it_named(self, world: World) -> None:
        """The honest server: the watch naming the key's version stays open."""
        run_through(world, acquire(world, 1))
        world.drain()
        viewer = watch(world, "v", KEY, after=1)
        world.drain()
        assert viewer.in_flight
        assert verdict(world) == []

    def _an_older_read(self, world: World) -> Request:
        """s1 read the key at version 1 for a watcher; a release through s2 moves it to 2
        (s1 has not heard: no poll, no NOTIFY delivered); a watch naming 2 asks s1."""
        holder = acquire(world, 1, "s1")
        run_through(world, holder)
        first = watch(world, "w", KEY, after=0)
        world.drain()
        assert (first.status, first.payload["version"]) == (200, 1)
        body = {"owner_token": owner(1), "fencing_token": holder.payload["fencing_token"]}
        run_through(world, world.send("1", "s2", "release", KEY, body))
        return watch(world, "v", KEY, after=2)

    def test_a_watch_told_of_an_older_read_than_it_named_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A server that answers a new watcher from its last read whenever that read's version
        differs from the one named (not only when it is newer) tells it version 1 after it
        named 2, which the key had reached: VersionWentBack."""
        honest = _watching.Watches._join

        def hasty(self: Any, keyed: Any, watcher: Any) -> None:
            if keyed.last is not None and keyed.last.version != watcher.after_version:
                watcher.answer.set_result(keyed.last)
                return
            honest(self, keyed, watcher)

        monkeypatch.setattr(_watching.Watches, "_join", hasty)
        viewer = self._an_older_read(world)
        world.settle()
        assert (viewer.status, viewer.payload["version"]) == (200, 1)
        found = verdict(world)
        assert any(
            line.startswith("VersionWentBack: ") and "below the version 2" in line for line in found
        ), found

    def test_a_watch_naming_a_newer_version_than_the_last_read_waits(self, world: World) -> None:
        """The honest server reads the key again for that watch, and waits for a change."""
        viewer = self._an_older_read(world)
        world.drain()
        assert viewer.in_flight
        assert verdict(world) == []

    def _a_resignation_watched(self, world: World) -> Request:
        """a leads; the observer hears it, watches on from version 1; a resigns."""
        leader = campaign(world, 1)
        first = watch(world, "o", ELECTION, after=0)
        world.drain()
        assert (first.status, first.payload["version"]) == (200, 1)
        observer = watch(world, "o", ELECTION, after=1)
        world.drain()
        resign(world, leader)
        world.drain()
        return observer

    def test_a_state_naming_an_ended_term_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A read whose holders lag its version (as if read apart from it: the holders of the
        read before) tells the observer version 2 with the term that ended at version 2:
        TermAfterItEnded."""
        honest = _watching.key_view
        before: dict[str, Any] = {}

        def lagging(summary: Any, now: int, key: str) -> Any:
            previous, before[key] = before.get(key), summary
            if previous is not None and summary is not None:
                summary = attrs.evolve(
                    summary,
                    holders=previous.holders,
                    holder_count=previous.holder_count,
                    highest_live=previous.highest_live,
                )
            return honest(summary, now, key)

        monkeypatch.setattr(_watching, "key_view", lagging)
        observer = self._a_resignation_watched(world)
        assert (observer.status, len(observer.payload["holders"])) == (200, 1)
        assert "TermAfterItEnded" in kinds(world)

    def test_a_change_made_here_that_wakes_no_watcher_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A server whose own transactions wake no watcher (`_wake` does nothing) leaves the
        observer waiting from version 1 with the key at 2: WatcherBehind, the check the
        explorer makes once nothing changes any more."""
        monkeypatch.setattr(_watching.Watches, "_wake", lambda *_args: None)
        observer = self._a_resignation_watched(world)
        assert observer.in_flight
        CHECKS[world].watcher_agrees("o", ELECTION)
        assert "WatcherBehind" in kinds(world)

    def test_the_observer_hears_the_resignation(self, world: World) -> None:
        """The honest server: version 2, nobody leads, and the observer agrees with the key."""
        observer = self._a_resignation_watched(world)
        assert (observer.status, observer.payload["version"]) == (200, 2)
        assert observer.payload["holders"] == []
        CHECKS[world].watcher_agrees("o", ELECTION)
        assert verdict(world) == []


class TestTheJudgeOfElections:
    """The checks of an election (a limit-1 key whose candidates carry their names as labels,
    watched by an observer), on a server broken on purpose."""

    def test_a_leader_deposed_behind_its_back_is_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A release blind to the owner token lets b end a's term: the observer hears that
        nobody leads, the key's current state, while a leads by its own reckoning:
        TwoLeaders."""

        def blind(row: Any, now: int, _owner: str, fencing_token: int) -> Any:
            live = [] if row is None else row.live_leases(now)
            return next((x for x in live if x.fencing_token == fencing_token), None)

        monkeypatch.setattr(_rules, "_matching", blind)
        leader = campaign(world, 1)
        first = watch(world, "o", ELECTION, after=0)
        world.drain()
        observer = watch(world, "o", ELECTION, after=first.payload["version"])
        world.drain()
        assert resign(world, leader, by=2).status == 204
        world.drain()
        assert (observer.status, observer.payload["holders"]) == (200, [])
        found = verdict(world)
        assert any(
            line.startswith("TwoLeaders: ") and "1 leads in term 1" in line for line in found
        ), found

    def test_two_leaders_in_one_state_and_a_term_gone_back_are_caught(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rules that grant past the limit elect b beside a: one state names two leaders
        (TwoLeaders), and once b resigns the observer hears term 1 after term 2
        (TermWentBack)."""
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
        campaign(world, 1)
        second = campaign(world, 2)
        assert second.status == 200
        both = watch(world, "o", ELECTION, after=0)
        world.drain()
        assert len(both.payload["holders"]) == 2
        observer = watch(world, "o", ELECTION, after=both.payload["version"])
        world.drain()
        resign(world, second)
        world.drain()
        assert [h["fencing_token"] for h in observer.payload["holders"]] == [1]
        assert {"TwoLeaders", "TermWentBack"} <= kinds(world)

    def test_one_leader_after_another_is_not_a_violation(self, world: World) -> None:
        """The honest rules: b's campaign is refused while a leads; a resigns, b is elected;
        the observer hears a, then b, and nothing is violated."""
        leader = campaign(world, 1)
        assert campaign(world, 2).status == 409
        first = watch(world, "o", ELECTION, after=0)
        world.drain()
        observer = watch(world, "o", ELECTION, after=first.payload["version"])
        world.drain()
        resign(world, leader)
        world.drain()
        observer = watch(world, "o", ELECTION, after=observer.payload["version"])
        world.drain()
        successor = campaign(world, 2)
        world.drain()
        assert successor.status == 200
        assert [h["label"] for h in observer.payload["holders"]] == ["member-2"]
        CHECKS[world].watcher_agrees("o", ELECTION)
        assert verdict(world) == []
