"""Shared locks over real HTTP, on both backends: any number of shared holders or one exclusive
holder, one fencing sequence across both modes, and a line in which a waiting exclusive request
is never overtaken by later shared ones."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS, LiveServer
from tests.support.databases import fresh_postgres_database
from tests.support.raw import Locks, Waiter, new_id, wait_for
from volcano_server.storage import open_storage

from .test_waiting import in_line, start_waiting


def take(
    locks: Locks, key: str, *, shared: bool = True, ttl: float = 30
) -> tuple[str, dict[str, Any]]:
    """A lease of `key` for a fresh owner, shared unless `shared` is False: (owner, lease)."""
    owner = new_id()
    response = locks.acquire(key, owner, ttl, shared=shared)
    assert response.status_code == 200, response.text
    return owner, response.json()


def line_up(live_server: LiveServer, key: str, modes: str, **kwargs: Any) -> list[Waiter]:
    """One waiter per letter of `modes` (s: shared, x: exclusive), each in line before the next
    one asks."""
    waiters: list[Waiter] = []
    ahead = in_line(live_server, key)
    for mode in modes:
        waiters.append(start_waiting(live_server, key, shared=mode == "s", **kwargs))
        count = ahead + len(waiters)
        wait_for(lambda: in_line(live_server, key) == count, f"{count} in line")  # noqa: B023
    return waiters


def answered(waiter: Waiter) -> bool:
    return waiter.response is not None or waiter.error is not None


def modes(locks: Locks, key: str) -> list[tuple[int, str]]:
    """(fencing token, mode) of each holder of `key`, by token."""
    return sorted((h["fencing_token"], h["mode"]) for h in locks.state(key)["holders"])


class TestHolders:
    def test_shared_holders_hold_at_once_each_with_the_next_token(
        self, locks: Locks, key: str
    ) -> None:
        """Three shared acquires are all granted, tokens 1, 2, 3; get shows each one shared."""
        leases = [take(locks, key)[1] for _ in range(3)]
        assert [lease["fencing_token"] for lease in leases] == [1, 2, 3]
        state = locks.state(key)
        assert (state["held"], state["limit"], state["fencing_token"]) == (True, 1, 3)
        assert modes(locks, key) == [(1, "shared"), (2, "shared"), (3, "shared")]
        assert not any(lease["owner_token"] in str(state) for lease in leases)

    def test_an_exclusive_acquire_is_refused_while_any_shared_holder_holds(
        self, locks: Locks, key: str
    ) -> None:
        """An exclusive acquire of a key held shared is 409 lock_held with a Retry-After."""
        take(locks, key, ttl=20)
        refused = locks.acquire(key, new_id())
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "lock_held"
        assert "held shared" in refused.json()["error"]["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 20

    def test_a_shared_acquire_is_refused_while_an_exclusive_holder_holds(
        self, locks: Locks, key: str
    ) -> None:
        """A shared acquire of a key held exclusive is 409 lock_held."""
        take(locks, key, shared=False)
        refused = locks.acquire(key, new_id(), shared=True)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "lock_held"
        assert modes(locks, key) == [(1, "exclusive")]

    def test_tokens_increase_across_both_modes(self, locks: Locks, key: str) -> None:
        """Shared, then exclusive, then shared again: one sequence of fencing tokens."""
        readers = [take(locks, key) for _ in range(2)]
        for owner, lease in readers:
            assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        writer, lease = take(locks, key, shared=False)
        assert lease["fencing_token"] == 3
        assert locks.release(key, writer, 3).status_code == 204
        assert take(locks, key)[1]["fencing_token"] == 4

    def test_the_holders_own_lease_keeps_its_mode(self, locks: Locks, key: str) -> None:
        """A shared holder acquiring again, shared, gets its lease back (same token)."""
        owner, lease = take(locks, key)
        take(locks, key)
        again = locks.acquire(key, owner, 60, shared=True)
        assert again.status_code == 200
        assert again.json()["fencing_token"] == lease["fencing_token"]
        assert modes(locks, key) == [(1, "shared"), (2, "shared")]

    @pytest.mark.parametrize("first", ["shared", "exclusive"])
    def test_a_mode_change_by_the_same_owner_is_mode_mismatch(
        self, locks: Locks, key: str, first: str
    ) -> None:
        """The owner of a live lease asking for the other mode is 409 mode_mismatch; its lease
        stays as it was."""
        owner, lease = take(locks, key, shared=first == "shared")
        refused = locks.acquire(key, owner, shared=first != "shared")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "mode_mismatch"
        assert f"holds {key} {first}" in error["message"]
        assert modes(locks, key) == [(lease["fencing_token"], first)]

    def test_renewal_and_the_fence_check_serve_shared_leases(self, locks: Locks, key: str) -> None:
        """A shared lease renews (keeping its token and mode) and passes the fence check."""
        owner, lease = take(locks, key)
        renewed = locks.renew(key, owner, lease["fencing_token"], 60)
        assert renewed.status_code == 200
        assert renewed.json()["fencing_token"] == lease["fencing_token"]
        assert modes(locks, key) == [(1, "shared")]
        assert locks.check(key, 1).json()["live"] is True

    def test_force_release_ends_every_holder(self, locks: Locks, key: str) -> None:
        """Force release removes all the shared leases and says how many."""
        for _ in range(3):
            take(locks, key)
        result = locks.force_release(key).json()
        assert (result["released_count"], result["fencing_token"]) == (3, 3)
        assert locks.state(key)["holders"] == []
        assert take(locks, key, shared=False)[1]["fencing_token"] == 4

    def test_listing_shows_each_holders_mode(self, locks: Locks, key: str) -> None:
        """The list of keys reports each holder's mode, as get does."""
        take(locks, key)
        take(locks, key)
        listed = locks.http.get("/v1/locks", params={"prefix": key}).json()["locks"]
        assert [[h["mode"] for h in state["holders"]] for state in listed] == [["shared", "shared"]]


class TestWithLimits:
    def test_shared_and_a_limit_in_one_request_is_refused(self, locks: Locks, key: str) -> None:
        """An acquire asking for both is 409 shared_with_limit (stored: its repeat is the
        replay), and changes nothing."""
        request_id = new_id()
        refused = locks.acquire(key, new_id(), limit=2, shared=True, request_id=request_id)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "shared_with_limit"
        assert locks.state(key)["version"] == 0
        body = refused.request.content
        again = locks.http.post(
            f"/v1/locks/{key}/acquire",
            content=body,
            headers={"content-type": "application/json", "x-request-id": request_id},
        )
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == refused.json()

    def test_a_shared_acquire_of_a_semaphore_is_refused(self, locks: Locks, key: str) -> None:
        """A shared acquire of a key in use as a semaphore is 409 shared_with_limit."""
        assert locks.acquire(key, new_id(), limit=3).status_code == 200
        refused = locks.acquire(key, new_id(), shared=True)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "shared_with_limit"
        assert "semaphore of limit 3" in refused.json()["error"]["message"]

    def test_a_limit_on_a_key_held_shared_is_refused(self, locks: Locks, key: str) -> None:
        """An acquire with a limit of a key held shared is 409 shared_with_limit."""
        take(locks, key)
        refused = locks.acquire(key, new_id(), limit=3)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "shared_with_limit"

    def test_a_key_changes_use_once_it_is_free(self, locks: Locks, key: str) -> None:
        """A semaphore's key, once free, may be taken shared, and then as a semaphore again."""
        owner = new_id()
        fence = locks.acquire(key, owner, limit=3).json()["fencing_token"]
        assert locks.release(key, owner, fence).status_code == 204
        reader, lease = take(locks, key)
        assert locks.state(key)["limit"] == 1
        assert locks.release(key, reader, lease["fencing_token"]).status_code == 204
        assert locks.acquire(key, new_id(), limit=3).status_code == 200


class TestLine:
    def test_a_shared_newcomer_never_passes_a_waiting_exclusive_request(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Shared holders hold, an exclusive request waits: a shared acquire is refused at once
        (lock_held, others in line), and a waiting one lines up behind it."""
        reader, lease = take(locks, key)
        (writer,) = line_up(live_server, key, "x")
        refused = locks.acquire(key, new_id(), shared=True)
        assert refused.status_code == 409
        assert "others wait in line first" in refused.json()["error"]["message"]
        (late,) = line_up(live_server, key, "s")
        assert in_line(live_server, key) == 2
        assert locks.release(key, reader, lease["fencing_token"]).status_code == 204
        assert writer.lease["fencing_token"] == 2
        assert not answered(late)
        assert locks.release(key, writer.owner, 2).status_code == 204
        assert late.lease["fencing_token"] == 3

    def test_the_run_of_shared_waiters_at_the_head_is_served_together(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Behind an exclusive holder: s, s, s, x, s. Its release grants the three shared
        waiters at once; the exclusive one waits for all three; the last shared one waits for
        it."""
        owner, lease = take(locks, key, shared=False)
        first, second, third, writer, last = line_up(live_server, key, "sssxs")
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        readers = [first, second, third]
        assert [w.lease["fencing_token"] for w in readers] == [2, 3, 4]
        assert modes(locks, key) == [(2, "shared"), (3, "shared"), (4, "shared")]
        assert in_line(live_server, key) == 2
        for reader in readers:
            assert locks.state(key)["waiters"] == 2  # the writer still waits
            fence = reader.lease["fencing_token"]
            assert locks.release(key, reader.owner, fence).status_code == 204
        assert writer.lease["fencing_token"] == 5
        assert modes(locks, key) == [(5, "exclusive")]
        assert not answered(last)
        assert locks.force_release(key).json()["released_count"] == 1
        assert last.lease["fencing_token"] == 6

    def test_a_place_kept_from_an_earlier_wait_is_served_ahead_of_a_later_writer(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A reader whose wait ran out keeps its place; a shared holder and a writer waiting
        come after it; back within seconds, the reader is granted at once beside the shared
        holder (its place is ahead of the writer's), and the writer still waits."""
        writer_owner, first = take(locks, key, shared=False)
        reader = new_id()
        ran_out = locks.acquire(key, reader, shared=True, wait=0.3)
        assert ran_out.status_code == 409  # out of line, its place kept a few seconds
        assert locks.release(key, writer_owner, first["fencing_token"]).status_code == 204
        take(locks, key)  # a shared holder
        (writer,) = line_up(live_server, key, "x")
        back = start_waiting(live_server, key, owner=reader, shared=True, wait=50)
        # Granted as it rejoins, not at the end of its wait (when the give-up's last hand-off
        # would grant it too): well within the bound, far from the 50 s wait.
        wait_for(lambda: answered(back), "the reader granted at its kept place")
        assert back.lease["fencing_token"] == 3
        assert modes(locks, key) == [(2, "shared"), (3, "shared")]
        assert locks.state(key)["waiters"] == 1
        assert not answered(writer)

    def test_an_expiry_hands_the_key_to_the_run_of_shared_waiters(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """An exclusive lease that expires unrenewed is handed to the shared waiters in line."""
        take(locks, key, shared=False, ttl=0.5)
        waiters = line_up(live_server, key, "ss")
        assert [w.lease["fencing_token"] for w in waiters] == [2, 3]

    def test_an_exclusive_waiter_gets_the_key_from_the_last_shared_holder(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """An exclusive waiter behind two shared holders waits while either holds."""
        holders = [take(locks, key) for _ in range(2)]
        (writer,) = line_up(live_server, key, "x")
        (owner, lease), (last_owner, last_lease) = holders
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert locks.state(key)["waiters"] == 1
        assert not answered(writer)
        assert locks.release(key, last_owner, last_lease["fencing_token"]).status_code == 204
        assert writer.lease["fencing_token"] == 3
        assert modes(locks, key) == [(3, "exclusive")]


class TestUpgrade:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_leases_and_waiters_from_before_are_exclusive(
        self, backend: str, tmp_path: Path
    ) -> None:
        """A database from before shared locks, with a live lease and a waiter, is upgraded in
        place: both are exclusive, as every lease and waiter was."""
        with database_before_shared_locks(backend, tmp_path) as url:
            storage = open_storage(url)
            try:
                with storage.write() as tx:
                    row = tx.load_lock(1, "old-key")
                    line = tx.queued(1, "old-key", 16)
            finally:
                storage.close()
        assert row is not None
        assert [(x.fencing_token, x.shared) for x in row.leases] == [(3, False)]
        assert [(w.owner_token, w.shared) for w in line] == [("old-waiter", False)]


@contextlib.contextmanager
def database_before_shared_locks(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database at the schema version before shared locks, made by the backends' own
    migration steps, holding a live lease of "old-key" (token 3) and one waiter for it."""
    statements = (
        "INSERT INTO locks (project_id, key, fencing_token) VALUES (1, 'old-key', 3)",
        (
            "INSERT INTO leases (project_id, key, fencing_token, owner_token, expires_at_us,"
            " ttl_seconds, granted_at_us) VALUES (1, 'old-key', 3, 'old-owner',"
            " 4000000000000000, 30, 3999999970000000)"
        ),
        (
            "INSERT INTO lock_waiters (project_id, key, owner_token, ttl_seconds, server_id,"
            " state) VALUES (1, 'old-key', 'old-waiter', 30, 'old-server', 'waiting')"
        ),
    )
    if backend == "sqlite":
        from volcano_server.storage._sqlite import _upgrade

        path = tmp_path / "before.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            _upgrade(conn, str(path), target=6)
            for statement in statements:
                conn.execute(statement)
        yield f"sqlite:///{path}"
        return
    import psycopg

    from volcano_server.storage._postgres import _MIGRATIONS

    with fresh_postgres_database("volcano_before_shared") as url:
        with psycopg.connect(url) as conn:
            for version in range(1, 8):
                for statement in _MIGRATIONS[version]:
                    conn.execute(statement)
            conn.execute("CREATE TABLE volcano_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO volcano_schema (version) VALUES (7)")
            for statement in statements:
                conn.execute(statement)
        yield url
