"""Waiting for a lock over real HTTP, on both backends: a fair queue and a server-driven hand-off.

Each waiter is a request of its own, on its own connection, in a thread. Whether a waiter has
joined the queue is read from the database (its `lock_waiters` row), never guessed by sleeping.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, fresh_database, running_server
from tests.support.databases import execute, heartbeats_stalled, is_postgres, queued, scalar
from tests.support.raw import Locks, Waiter, new_id, wait_for
from volcano_server._config import WaitingSettings

LIFETIME = WaitingSettings().heartbeat_lifetime


def in_line(live_server: LiveServer, key: str) -> int:
    """How many callers wait in the key's queue, read from the database."""
    return queued(live_server.database_url, key)


def start_waiting(live_server: LiveServer, key: str, **kwargs: Any) -> Waiter:
    """A waiting acquire of the main project, on a connection of its own."""
    return Waiter(live_server.http(live_server.project), key, **kwargs)


def queue_up(live_server: LiveServer, key: str, count: int, **kwargs: Any) -> list[Waiter]:
    """`count` waiters, each in line before the next one asks."""
    waiters = []
    for _ in range(count):
        waiters.append(start_waiting(live_server, key, **kwargs))
        wait_for(lambda: in_line(live_server, key) == len(waiters), f"{len(waiters)} in line")
    return waiters


def hold(locks: Locks, key: str, ttl: float = 30) -> tuple[str, dict[str, Any]]:
    """Acquire `key` for a fresh owner; (owner token, lease)."""
    owner = new_id()
    response = locks.acquire(key, owner, ttl)
    assert response.status_code == 200, response.text
    return owner, response.json()


class TestHandOff:
    def test_release_hands_over_to_the_waiter(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A release gives the key to the queued waiter, with the next fencing token."""
        owner, lease = hold(locks, key)
        (waiter,) = queue_up(live_server, key, 1)
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        granted = waiter.lease
        assert granted["owner_token"] == waiter.owner
        assert granted["fencing_token"] == lease["fencing_token"] + 1
        assert locks.state(key)["fencing_token"] == granted["fencing_token"]

    def test_force_release_hands_over_to_the_waiter(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A force release gives the key to the queued waiter."""
        _, lease = hold(locks, key)
        (waiter,) = queue_up(live_server, key, 1)
        assert locks.force_release(key).json()["released"] is True
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1

    def test_expiry_hands_over_by_a_server_timer(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """An unrenewed lease's expiry hands the key over with no request to notice it."""
        _, lease = hold(locks, key, ttl=0.5)
        (waiter,) = queue_up(live_server, key, 1, ttl=7)
        granted = waiter.lease  # nobody else sends a request meanwhile
        assert granted["fencing_token"] == lease["fencing_token"] + 1
        assert granted["ttl_seconds"] == 7

    def test_ttl_counts_from_the_grant(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """The waiter's lease ends ttl after it was granted, not after it asked."""
        _, lease = hold(locks, key, ttl=1)
        (waiter,) = queue_up(live_server, key, 1, ttl=5)
        granted = waiter.lease
        held_until = _seconds(lease["expires_at"])
        assert _seconds(granted["expires_at"]) >= held_until + 5

    def test_waiters_are_served_in_order_of_arrival(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Five waiters get the key one after another, in the order they queued."""
        owner, lease = hold(locks, key)
        waiters = queue_up(live_server, key, 5)
        fence = lease["fencing_token"]
        assert locks.release(key, owner, fence).status_code == 204
        for expected, waiter in enumerate(waiters, start=fence + 1):
            granted = waiter.lease
            assert granted["fencing_token"] == expected
            assert locks.release(key, waiter.owner, expected).status_code == 204
        answered = [waiter.answered_at for waiter in waiters]
        assert answered == sorted(answered)  # type: ignore[type-var]

    def test_a_free_key_is_granted_without_waiting(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A waiting acquire of a free key is answered at once, like any acquire."""
        response = locks.acquire(key, new_id(), 30, wait=30)
        assert response.status_code == 200
        assert in_line(live_server, key) == 0


class TestSteppedOver:
    """Another server judged this one dead (its heartbeat lapsed in an outage) and stepped over
    or purged the row of a request this server still holds open: its own server puts it back
    at its place, and it is served in its turn."""

    def test_a_request_stepped_over_is_put_back_at_its_place(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """The first waiter's row is marked away, as a server that judged this one dead does;
        the release's hand-off here puts it back first: it gets the next token, and the
        waiter behind it the one after."""
        owner, lease = hold(locks, key)
        first, second = queue_up(live_server, key, 2)
        stepped_over = "UPDATE lock_waiters SET state = 'away', until_us = 0 WHERE owner_token = ?"
        assert execute(live_server.database_url, stepped_over, (first.owner,)) == 1
        fence = lease["fencing_token"]
        assert locks.release(key, owner, fence).status_code == 204
        assert first.lease["fencing_token"] == fence + 1
        assert locks.release(key, first.owner, fence + 1).status_code == 204
        assert second.lease["fencing_token"] == fence + 2

    def test_a_request_purged_while_its_heartbeat_lapsed_is_put_back_at_its_place(
        self, database_url: str, tmp_path_factory: pytest.TempPathFactory, key: str
    ) -> None:
        """The first waiter's row is deleted, as a purge by a server that judged this one dead
        does, and this server cannot write its heartbeat for a lifetime; once it beats again it
        puts the row back at its place, and the waiter is served before the one behind it."""
        backend = "postgres" if is_postgres(database_url) else "sqlite"
        with (
            fresh_database(backend, tmp_path_factory) as url,
            running_server(url) as server,
            server.http(server.project) as http,
        ):
            locks = Locks(http)
            owner, lease = hold(locks, key)
            first, second = queue_up(server, key, 2)
            purged = "DELETE FROM lock_waiters WHERE owner_token = ?"
            assert execute(url, purged, (first.owner,)) == 1
            with heartbeats_stalled(url):
                time.sleep(LIFETIME + 1)  # past a lifetime without a beat written
            wait_for(lambda: in_line(server, key) == 2, "the first waiter back in line")
            fence = lease["fencing_token"]
            assert locks.release(key, owner, fence).status_code == 204
            assert first.lease["fencing_token"] == fence + 1
            assert locks.release(key, first.owner, fence + 1).status_code == 204
            assert second.lease["fencing_token"] == fence + 2


class TestNoBarging:
    def test_a_newcomer_does_not_pass_a_queued_waiter(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """After a release with a waiter queued, an acquire without a wait gets 409."""
        owner, lease = hold(locks, key)
        (waiter,) = queue_up(live_server, key, 1)
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        late = locks.acquire(key, new_id(), 30)
        assert late.status_code == 409
        assert late.json()["error"]["code"] == "lock_held"
        assert int(late.headers["Retry-After"]) >= 1
        assert waiter.lease["owner_token"] == waiter.owner

    def test_a_newcomer_does_not_pass_an_expired_holders_waiter(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Around an expiry, a polling newcomer never gets the key ahead of the waiter."""
        _, lease = hold(locks, key, ttl=0.5)
        (waiter,) = queue_up(live_server, key, 1)
        newcomer = new_id()
        while waiter.response is None:
            response = locks.acquire(key, newcomer, 30)
            assert response.status_code == 409, response.text
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1

    def test_the_holders_own_token_is_not_a_newcomer(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """The live holder acquiring again (a lost answer's retry) keeps its lease."""
        owner, lease = hold(locks, key)
        queue_up(live_server, key, 1)
        again = locks.acquire(key, owner, 30)
        assert again.status_code == 200
        assert again.json()["fencing_token"] == lease["fencing_token"]


class TestWaitRunsOut:
    def test_409_when_the_wait_runs_out(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A wait that runs out is 409 lock_held with Retry-After, and leaves the queue."""
        hold(locks, key, ttl=30)
        started = time.monotonic()
        response = locks.acquire(key, new_id(), 30, wait=0.3)
        assert time.monotonic() - started >= 0.3
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "lock_held"
        assert 1 <= int(response.headers["Retry-After"]) <= 30
        assert in_line(live_server, key) == 0

    def test_a_waiter_that_gave_up_is_never_granted(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """After a wait ran out, a release leaves the key free rather than granting it."""
        owner, lease = hold(locks, key)
        assert locks.acquire(key, new_id(), 30, wait=0.2).status_code == 409
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        state = locks.state(key)
        assert state["held"] is False
        assert state["fencing_token"] == lease["fencing_token"]

    def test_the_outcome_is_stored_under_the_request_id(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Repeating a waiting acquire that ran out replays its 409 at once."""
        hold(locks, key)
        owner, request_id = new_id(), new_id()
        first = locks.acquire(key, owner, 30, wait=0.2, request_id=request_id)
        started = time.monotonic()
        again = locks.acquire(key, owner, 30, wait=0.2, request_id=request_id)
        assert time.monotonic() - started < 0.2 + 5  # no second wait of its own is required
        assert again.status_code == 409
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.content == first.content


class TestIdempotency:
    def test_a_granted_wait_is_replayed(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Repeating a waiting acquire that was granted replays the same lease."""
        owner, lease = hold(locks, key)
        (waiter,) = queue_up(live_server, key, 1)
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        granted = waiter.result()
        again = locks.acquire(key, waiter.owner, 30, wait=20, request_id=waiter.request_id)
        assert again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.content == granted.content

    def test_a_different_wait_is_a_different_request(self, locks: Locks, key: str) -> None:
        """The same request id with another wait_seconds is request_id_reused."""
        owner, request_id = new_id(), new_id()
        assert locks.acquire(key, owner, 30, wait=5, request_id=request_id).status_code == 200
        reused = locks.acquire(key, owner, 30, wait=6, request_id=request_id)
        assert reused.status_code == 409
        assert reused.json()["error"]["code"] == "request_id_reused"


class TestPlaceInLine:
    def test_a_retry_with_the_same_request_id_keeps_one_place(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A retried waiting acquire (same request id and token) keeps the original's place."""
        owner, lease = hold(locks, key)
        first = start_waiting(live_server, key, wait=0.5)
        wait_for(lambda: in_line(live_server, key) == 1)
        second = start_waiting(live_server, key)
        wait_for(lambda: in_line(live_server, key) == 2)
        first.result()  # its wait ran out: it is away, its place kept
        retry = start_waiting(live_server, key, owner=first.owner, request_id=new_id())
        wait_for(lambda: in_line(live_server, key) == 2)
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert retry.lease["fencing_token"] == lease["fencing_token"] + 1
        assert second.response is None  # still waiting behind the one that came back
        assert (
            scalar(
                live_server.database_url,
                "SELECT count(*) FROM lock_waiters WHERE key = ?",
                (key,),
            )
            == 1
        )

    def test_a_duplicate_of_a_queued_request_takes_over_its_place(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """The same request sent again while the first still waits takes over the same place."""
        owner, lease = hold(locks, key)
        first = start_waiting(live_server, key)
        wait_for(lambda: in_line(live_server, key) == 1)
        behind = start_waiting(live_server, key)
        wait_for(lambda: in_line(live_server, key) == 2)
        duplicate = start_waiting(live_server, key, owner=first.owner, request_id=first.request_id)
        superseded = first.result()
        assert superseded.status_code == 409
        assert in_line(live_server, key) == 2
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert duplicate.lease["fencing_token"] == lease["fencing_token"] + 1
        assert behind.response is None


class TestDisconnect:
    def test_a_waiter_whose_client_disconnects_leaves_at_once(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A client that gives up (closes its connection) leaves the line at once."""
        owner, lease = hold(locks, key)
        with (
            live_server.http(live_server.project, timeout=0.3) as impatient,
            pytest.raises(httpx.ReadTimeout),
        ):
            Locks(impatient).acquire(key, new_id(), 30, wait=30)
        wait_for(lambda: in_line(live_server, key) == 0, "the disconnected waiter left")
        (waiter,) = queue_up(live_server, key, 1)
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1

    def test_a_killed_waiter_does_not_hold_up_the_next(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A waiting process killed with SIGKILL is never granted; the next waiter is."""
        owner, lease = hold(locks, key)
        script = textwrap.dedent(
            f"""
            import httpx, uuid
            httpx.post({live_server.url + f"/v1/locks/{key}/acquire"!r},
                       headers={live_server.project.headers()!r},
                       json={{"owner_token": str(uuid.uuid4()), "ttl_seconds": 30,
                              "wait_seconds": 60}}, timeout=120)
            """
        )
        process = subprocess.Popen([sys.executable, "-c", script])
        try:
            wait_for(lambda: in_line(live_server, key) == 1, "the process is in line")
            waiter = start_waiting(live_server, key)
            wait_for(lambda: in_line(live_server, key) == 2)
        finally:
            process.kill()
            process.wait(10)
        wait_for(lambda: in_line(live_server, key) == 1, "the killed waiter left")
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1


class TestValidation:
    @pytest.mark.parametrize("wait", [-1, 60.5, "10", None, True])
    def test_bad_wait_seconds_is_422(self, locks: Locks, key: str, wait: object) -> None:
        """wait_seconds must be a number from 0 to 60."""
        response = locks.http.post(
            f"/v1/locks/{key}/acquire",
            json={"owner_token": new_id(), "ttl_seconds": 30, "wait_seconds": wait},
        )
        assert response.status_code == 422
        assert "wait_seconds" in response.json()["error"]["message"]

    def test_zero_is_no_wait(self, locks: Locks, key: str) -> None:
        """wait_seconds 0 answers at once, as without it."""
        hold(locks, key)
        response = locks.acquire(key, new_id(), 30, wait=0)
        assert response.status_code == 409


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp).timestamp()
