"""PostgresStorage's transaction shape: two round trips per operation, and what they prefetch."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from volcano_server.storage._postgres import PostgresStorage

from .conftest import caller, service

pytestmark = pytest.mark.postgres

Storages = Callable[..., PostgresStorage]


def new_id() -> str:
    return str(uuid.uuid4())


class RoundTrips:
    """Counts the queries a write transaction sends: each one is waited for, a round trip.

    Only the calling thread's: the session's in-thread server on PostgreSQL (tests/conftest.py)
    beats every second with a write transaction of its own, which would be counted at random.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._thread = threading.get_ident()
        execute = psycopg.ClientCursor.execute

        def counted(cursor: psycopg.ClientCursor[Any], *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self._thread:
                self.count += 1
            return execute(cursor, *args, **kwargs)

        monkeypatch.setattr(psycopg.ClientCursor, "execute", counted)

    def of(self, operation: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
        before = self.count
        result = operation(*args, **kwargs)
        return result, self.count - before


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    return RoundTrips(monkeypatch)


class TestRoundTrips:
    @pytest.mark.parametrize("replayable", [True, False])
    def test_each_operation_takes_two_round_trips(
        self, storages: Storages, project_id: int, trips: RoundTrips, replayable: bool
    ) -> None:
        """Acquire (of a new key, a free key, a held key), renew and release each take one round
        trip to lock and read, and one for the writes with COMMIT."""
        locks = service(storages())
        key, owner, other = new_id(), new_id(), new_id()

        def call(request: str) -> Any:
            return caller(project_id, request, replayable=replayable)

        first, n_first = trips.of(locks.acquire, call(new_id()), key, owner, 30)
        lease = json.loads(first.body)
        held, n_held = trips.of(locks.acquire, call(new_id()), key, other, 30)
        renewed, n_renew = trips.of(
            locks.renew, call(new_id()), key, owner, lease["fencing_token"], 30
        )
        released, n_release = trips.of(
            locks.release, call(new_id()), key, owner, lease["fencing_token"]
        )
        again, n_again = trips.of(locks.acquire, call(new_id()), key, other, 30)
        assert [first.status, held.status, renewed.status, released.status, again.status] == [
            200,
            409,
            200,
            204,
            200,
        ]
        assert [n_first, n_held, n_renew, n_release, n_again] == [2, 2, 2, 2, 2]

    def test_a_replay_takes_two_round_trips(
        self, storages: Storages, project_id: int, trips: RoundTrips
    ) -> None:
        """A repeated request id is answered from its stored outcome in the same two trips."""
        locks = service(storages())
        request = caller(project_id, new_id())
        first = locks.acquire(request, "replayed", "owner", 30)
        replay, n = trips.of(locks.acquire, request, "replayed", "owner", 30)
        assert (replay.body, replay.replayed, n) == (first.body, True, 2)


class TestLinePrefetch:
    def test_a_long_line_is_read_in_full(self, storages: Storages, project_id: int) -> None:
        """More waiters than the first round trip reads: `queued` asks for the rest, in order."""
        storage = storages()
        with storage.write() as tx:
            tx.load_lock(project_id, "long")
            seqs = [tx.add_waiter(project_id, "long", f"w{n}", 30, "server") for n in range(20)]
        with storage.write(key=(project_id, "long")) as tx:
            tx.now_us()
            assert [w.seq for w in tx.queued(project_id, "long", 20)] == seqs
            assert [w.seq for w in tx.queued(project_id, "long", 3)] == seqs[:3]

    def test_the_line_read_ahead_follows_this_transactions_changes(
        self, storages: Storages, project_id: int
    ) -> None:
        """After a waiter changes, `queued` reads the line again instead of the first trip's."""
        storage = storages()
        with storage.write() as tx:
            tx.load_lock(project_id, "moving")
            first = tx.add_waiter(project_id, "moving", "first", 30, "server")
            second = tx.add_waiter(project_id, "moving", "second", 30, "server")
        with storage.write(key=(project_id, "moving")) as tx:
            assert [w.seq for w in tx.queued(project_id, "moving", 16)] == [first, second]
            tx.update_waiter(first, state="away", until_us=0, server_id="server", ttl_seconds=30)
            assert [w.seq for w in tx.queued(project_id, "moving", 16)] == [second]

    def test_a_waiters_mode_is_read_with_the_line_either_way(
        self, storages: Storages, project_id: int
    ) -> None:
        """A waiter's mode comes back from the first round trip's line and from a query alike,
        and so does a lease's."""
        storage = storages()
        with storage.write() as tx:
            tx.load_lock(project_id, "modes")
            tx.add_waiter(project_id, "modes", "reader", 30, "server", shared=True)
            tx.add_waiter(project_id, "modes", "writer", 30, "server")
        with storage.write(key=(project_id, "modes")) as tx:
            prefetched = [w.shared for w in tx.queued(project_id, "modes", 16)]
            tx.delete_waiter(project_id, "modes", "nobody")  # the line is read again next
            asked = [w.shared for w in tx.queued(project_id, "modes", 16)]
        assert prefetched == asked == [True, False]
        locks = service(storage)
        locks.acquire(caller(project_id, new_id()), "modes-held", "owner", 30, shared=True)
        with storage.write(key=(project_id, "modes-held")) as tx:
            row = tx.load_lock(project_id, "modes-held")
        with storage.read() as reader:
            (listed,) = reader.list_locks(
                project_id, prefix="modes-held", after="", limit=5, holders=5
            )
        assert row is not None
        assert [x.shared for x in row.leases] == [x.shared for x in listed.holders] == [True]

    def test_server_alive_is_judged_at_the_transactions_now(
        self, storages: Storages, project_id: int
    ) -> None:
        """A waiter's server is alive while its heartbeat runs past the transaction's clock;
        until when it ran comes with it (0: no heartbeat), in the first round trip's line and
        when read on its own."""
        storage = storages()
        with storage.write() as tx:
            now = tx.now_us()
            tx.load_lock(project_id, "beats")
            tx.touch_server("alive-server", now + 60_000_000)
            tx.touch_server("dead-server", now - 1)
            tx.add_waiter(project_id, "beats", "a", 30, "alive-server")
            tx.add_waiter(project_id, "beats", "b", 30, "dead-server")
            tx.add_waiter(project_id, "beats", "c", 30, "unknown-server")
        with storage.write(key=(project_id, "beats")) as tx:
            line = tx.queued(project_id, "beats", 16)
            found = tx.find_waiter(project_id, "beats", "b")
        assert [(w.server_id, w.server_alive, w.server_until_us) for w in line] == [
            ("alive-server", True, now + 60_000_000),
            ("dead-server", False, now - 1),
            ("unknown-server", False, 0),
        ]
        assert found is not None
        assert found.server_until_us == now - 1


class TestPlaceholder:
    def test_a_hinted_key_never_taken_leaves_no_row(
        self, storages: Storages, pg_url: str, project_id: int
    ) -> None:
        """Locking a new key in the first round trip places a row that COMMIT does not keep."""
        storage = storages()
        with storage.write(key=(project_id, "never")) as tx:
            tx.now_us()
            assert tx.load_lock(project_id, "never") is None
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM locks WHERE project_id = %s", (project_id,)
            ).fetchone()
        assert rows == (0,)


class TestClientSideBinding:
    @pytest.mark.parametrize(
        "key", ["100%s", "a%(x)s'; DROP TABLE locks; --", "back\\slash'quote\"", "ünï☃"]
    )
    def test_awkward_text_is_stored_as_sent(
        self, storages: Storages, project_id: int, key: str
    ) -> None:
        """Statements are bound on this side: quotes, percent signs and backslashes in keys,
        owner tokens and request ids come back exactly, and a replay finds its request id."""
        locks = service(storages())
        owner = f"{key}-owner%s"
        request = caller(project_id, f"{key}-request")
        acquired = locks.acquire(request, key, owner, 30)
        lease = json.loads(acquired.body)
        replay = locks.acquire(request, key, owner, 30)
        released = locks.release(caller(project_id, new_id()), key, owner, lease["fencing_token"])
        state = json.loads(locks.get(caller(project_id, new_id()), key).body)
        assert (acquired.status, lease["key"], released.status) == (200, key, 204)
        assert (replay.replayed, replay.body) == (True, acquired.body)
        assert (state["key"], state["held"], state["fencing_token"]) == (key, False, 1)
