"""Request ids make mutating calls idempotent: stored outcomes, replay, reuse, retention."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.databases import is_postgres, scalar
from tests.support.raw import wait_for
from tests.support.server import Project, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.storage import Storage
from volcano_server.storage._sqlite import SQLiteStorage

from .conftest import Locks, new_id


class TestReplay:
    def test_acquire_replay_returns_the_stored_answer(self, locks: Locks, key: str) -> None:
        """The same acquire with the same request id gets the same body, marked replayed."""
        rid, owner = new_id(), new_id()
        first = locks.acquire(key, owner, request_id=rid)
        again = locks.acquire(key, owner, request_id=rid)
        assert again.status_code == 200
        assert again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["x-request-id"] == rid
        assert "idempotent-replayed" not in first.headers

    def test_replay_changes_nothing(self, locks: Locks, key: str) -> None:
        """Replaying an acquire after the lease was released does not take the lock again."""
        rid, owner = new_id(), new_id()
        lease = locks.acquire(key, owner, request_id=rid).json()
        locks.release(key, owner, lease["fencing_token"])
        assert locks.acquire(key, owner, request_id=rid).headers["idempotent-replayed"] == "true"
        assert locks.get(key).json()["held"] is False


class TestReplayOfAnEndedLease:
    """A stored lease is replayed only while it is live (issue 19: never a lease the server has
    ended); otherwise the repeat is 409 lease_not_held, marked replayed, and changes nothing."""

    @staticmethod
    def refused(response: httpx.Response, token: int) -> None:
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "lease_not_held"
        assert f"fencing token {token}" in response.json()["error"]["message"]
        assert response.headers["idempotent-replayed"] == "true"

    def test_after_release(self, locks: Locks, key: str) -> None:
        """The holder released; a repeat of its acquire is told the lease ended."""
        rid, owner = new_id(), new_id()
        lease = locks.acquire(key, owner, request_id=rid).json()
        locks.release(key, owner, lease["fencing_token"])
        self.refused(locks.acquire(key, owner, request_id=rid), lease["fencing_token"])
        assert locks.get(key).json()["held"] is False

    def test_after_expiry(self, locks: Locks, key: str) -> None:
        """The lease expired; a repeat of its acquire is told so, not given the old body."""
        rid, owner = new_id(), new_id()
        lease = locks.acquire(key, owner, ttl=0.2, request_id=rid).json()
        wait_for(lambda: not locks.state(key)["held"], "the lease expired")
        self.refused(locks.acquire(key, owner, ttl=0.2, request_id=rid), lease["fencing_token"])

    def test_after_force_release_and_a_new_holder(self, locks: Locks, key: str) -> None:
        """Force-released and taken by another owner: neither an acquire nor a renew repeat
        claims the old lease."""
        rid, renew_rid, owner = new_id(), new_id(), new_id()
        lease = locks.acquire(key, owner, request_id=rid).json()
        token = lease["fencing_token"]
        assert locks.renew(key, owner, token, 30, request_id=renew_rid).status_code == 200
        locks.force_release(key)
        assert locks.acquire(key, new_id()).status_code == 200
        self.refused(locks.acquire(key, owner, request_id=rid), token)
        self.refused(locks.renew(key, owner, token, 30, request_id=renew_rid), token)

    def test_a_live_lease_is_replayed_after_a_renewal(self, locks: Locks, key: str) -> None:
        """Still live (renewed since): the lease comes back as it is now, renewed (issue 34:
        never the stored expiry, which a shorter renewal would have made a promise the server
        does not keep)."""
        rid, owner = new_id(), new_id()
        first = locks.acquire(key, owner, request_id=rid)
        token = first.json()["fencing_token"]
        renewed = locks.renew(key, owner, token, 60)
        assert renewed.status_code == 200
        again = locks.acquire(key, owner, request_id=rid)
        assert (again.status_code, again.json()) == (200, renewed.json())
        assert again.headers["Idempotent-Replayed"] == "true"

    def test_each_operation_replays(self, locks: Locks, key: str) -> None:
        """Renew, release and force release each replay their stored status and body."""
        owner = new_id()
        fence = locks.acquire(key, owner).json()["fencing_token"]
        calls = [
            lambda rid: locks.renew(key, owner, fence, 60, request_id=rid),
            lambda rid: locks.release(key, owner, fence, request_id=rid),
            lambda rid: locks.force_release(key, request_id=rid),
        ]
        for call in calls:
            rid = new_id()
            first = call(rid)
            again = call(rid)
            assert (again.status_code, again.content) == (first.status_code, first.content)
            assert again.headers["idempotent-replayed"] == "true"

    def test_conflicts_are_stored_too(self, locks: Locks, key: str) -> None:
        """A 409 lock_held is an outcome: replayed with its Retry-After after the lock frees."""
        holder = new_id()
        fence = locks.acquire(key, holder).json()["fencing_token"]
        rid, rival = new_id(), new_id()
        refused = locks.acquire(key, rival, request_id=rid)
        locks.release(key, holder, fence)
        again = locks.acquire(key, rival, request_id=rid)
        assert again.status_code == 409
        assert again.content == refused.content
        assert again.headers["retry-after"] == refused.headers["retry-after"]
        assert again.headers["idempotent-replayed"] == "true"

    def test_concurrent_duplicates_run_once(self, live_server: LiveServer, key: str) -> None:
        """Eight copies of one request sent at once: one runs, the rest replay its answer."""
        rid, owner = new_id(), new_id()

        def send(_: int) -> tuple[bytes, bool]:
            with live_server.http(live_server.project) as http:
                response = Locks(http).acquire(key, owner, request_id=rid)
                return response.content, "idempotent-replayed" in response.headers

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(send, range(8)))
        assert len({body for body, _ in results}) == 1
        assert sorted(replayed for _, replayed in results) == [False] + [True] * 7


class TestReuse:
    def test_different_body_is_request_id_reused(self, locks: Locks, key: str) -> None:
        """The same request id with another body: 409 request_id_reused, nothing done."""
        rid = new_id()
        locks.acquire(key, new_id(), ttl=30, request_id=rid)
        response = locks.acquire(key, new_id(), ttl=30, request_id=rid)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "request_id_reused"

    def test_different_key_or_operation_is_reused(self, locks: Locks, key: str) -> None:
        """The request id binds the key and the operation as well as the body."""
        rid, owner = new_id(), new_id()
        locks.acquire(key, owner, request_id=rid)
        assert (
            locks.acquire(key + "-2", owner, request_id=rid).json()["error"]["code"]
            == "request_id_reused"
        )
        assert (
            locks.force_release(key, request_id=rid).json()["error"]["code"] == "request_id_reused"
        )
        assert locks.get(key).json()["held"] is True

    def test_different_credential_is_reused(self, live_server: LiveServer, key: str) -> None:
        """Another service key of the same project may not replay someone else's request id."""
        second_key = create_project(live_server.database_url, live_server.project.name)
        rid, owner = new_id(), new_id()
        with live_server.http(live_server.project) as a, live_server.http(second_key) as b:
            assert Locks(a).acquire(key, owner, request_id=rid).status_code == 200
            response = Locks(b).acquire(key, owner, request_id=rid)
        assert response.json()["error"]["code"] == "request_id_reused"

    def test_projects_have_separate_request_ids(self, live_server: LiveServer, key: str) -> None:
        """The same request id in two projects is two requests."""
        rid = new_id()
        with live_server.http(live_server.project) as a, live_server.http(live_server.other) as b:
            assert Locks(a).acquire(key, new_id(), request_id=rid).status_code == 200
            second = Locks(b).acquire(key, new_id(), request_id=rid)
        assert second.status_code == 200
        assert "idempotent-replayed" not in second.headers

    def test_request_ids_compare_byte_for_byte(self, locks: Locks, key: str) -> None:
        """An id in another letter case is another id: the request runs (and meets the lock)."""
        rid = "7C9E6679-7425-40DE-944B-E07FC1F90AE7".replace("7C9E6679", new_id()[:8].upper())
        locks.acquire(key, new_id(), request_id=rid)
        response = locks.acquire(key, new_id(), request_id=rid.lower())
        assert response.json()["error"]["code"] == "lock_held"

    def test_rejected_requests_are_not_stored(self, locks: Locks, key: str) -> None:
        """A 422 is not an outcome: the request id can then be used for a valid request."""
        rid = new_id()
        assert locks.acquire(key, new_id(), ttl=0, request_id=rid).status_code == 422
        assert locks.acquire(key, new_id(), ttl=30, request_id=rid).status_code == 200

    def test_reads_are_not_stored(self, locks: Locks, key: str) -> None:
        """A get does not claim its request id."""
        rid = new_id()
        locks.get(key, request_id=rid)
        assert locks.acquire(key, new_id(), request_id=rid).status_code == 200


@attrs.define
class ShiftedClock:
    """The storage clock, skipped ahead by `offset_us`."""

    offset_us: int = 0

    def __call__(self) -> int:
        return time.time_ns() // 1000 + self.offset_us


@attrs.frozen
class ClockServer:
    url: str
    database_url: str
    clock: ShiftedClock
    project: Project


@pytest.fixture
def clock_server(database_url: str, tmp_path: Path) -> Iterator[ClockServer]:
    """A server whose storage clock a test can move forward.

    SQLite: a file of its own. PostgreSQL: the session's database (this test's outcomes are
    counted by project), its clock shifted through the storage's test-only offset.
    """
    storage: Storage
    clock = ShiftedClock()
    if is_postgres(database_url):
        from volcano_server.storage._postgres import PostgresStorage

        url = database_url
        project = create_project(url, f"clock-{uuid.uuid4().hex[:8]}")
        storage = PostgresStorage(url, clock_offset_us=lambda: clock.offset_us)
    else:
        path = tmp_path / "clock.db"
        url = f"sqlite:///{path}"
        project = create_project(url, "clock")
        storage = SQLiteStorage(path, clock=clock)
    config = ServerConfig(
        database_url=url, access_log=False, purge_interval_seconds=0.05, purge_batch=7
    )
    with serve_in_thread(create_app(config, storage=storage)) as base:
        yield ClockServer(base, url, clock, project)


def stored_outcomes(server: ClockServer) -> int:
    """How many outcomes the database keeps for the server's project."""
    return int(
        scalar(
            server.database_url,
            "SELECT count(*) FROM request_outcomes o JOIN projects p ON p.id = o.project_id"
            " WHERE p.name = ?",
            (server.project.name,),
        )
    )


class TestRetention:
    def test_request_id_is_free_after_retention(self, clock_server: ClockServer) -> None:
        """Past the retention window (600 s by default) a request id is new again."""
        rid = new_id()
        live = LiveServer(clock_server.url, "", clock_server.project, clock_server.project)
        with live.http(clock_server.project) as http:
            locks = Locks(http)
            locks.acquire("retained", new_id(), ttl=1, request_id=rid)
            clock_server.clock.offset_us += 599 * 1_000_000
            assert (
                locks.acquire("retained", new_id(), request_id=rid).json()["error"]["code"]
                == "request_id_reused"
            )
            clock_server.clock.offset_us += 2 * 1_000_000
            response = locks.acquire("retained", new_id(), request_id=rid)
        assert response.status_code == 200
        assert "idempotent-replayed" not in response.headers

    def test_expired_outcomes_are_purged(self, clock_server: ClockServer) -> None:
        """The background purge deletes outcomes past retention in batches, keeps fresh ones."""
        live = LiveServer(clock_server.url, "", clock_server.project, clock_server.project)
        with live.http(clock_server.project) as http:
            locks = Locks(http)
            for n in range(30):
                locks.force_release(f"purge-{n}", request_id=new_id())
            assert stored_outcomes(clock_server) == 30
            clock_server.clock.offset_us += 601 * 1_000_000
            locks.force_release("purge-fresh", request_id=new_id())
            deadline = time.monotonic() + 10
            while stored_outcomes(clock_server) > 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert stored_outcomes(clock_server) == 1
