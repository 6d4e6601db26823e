"""Waiting across several servers on one database: one queue, hand-offs between servers.

On PostgreSQL a server tells another through NOTIFY; on SQLite, servers sharing a file poll.
Every test takes a lease through one server and waits through another, with waits shorter than
the lease's ttl, so only a hand-off between servers (not an expiry) can answer in time.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.databases import process_database, scalar
from tests.support.raw import Locks, new_id, wait_for
from tests.support.server import ServerProcess, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app

from .test_waiting import hold, in_line, start_waiting

pytestmark = pytest.mark.slow


@attrs.frozen
class Pair:
    """Two servers on one database, and a LiveServer view of each."""

    a: LiveServer
    b: LiveServer


@pytest.fixture(scope="module")
def pair(live_server: LiveServer) -> Iterator[Pair]:
    """A second in-thread server on the session server's database."""
    app = create_app(ServerConfig(database_url=live_server.database_url, access_log=False))
    with serve_in_thread(app) as url:
        yield Pair(live_server, attrs.evolve(live_server, url=url))


@pytest.fixture
def a(pair: Pair) -> Iterator[Locks]:
    """Raw lock calls through server A."""
    with pair.a.http(pair.a.project) as http:
        yield Locks(http)


class TestAcrossServers:
    def test_a_release_through_one_server_wakes_a_waiter_on_another(
        self, pair: Pair, a: Locks, key: str
    ) -> None:
        """The waiter held by B gets the key released through A, long before any expiry."""
        owner, lease = hold(a, key, ttl=60)
        waiter = start_waiting(pair.b, key, wait=15)
        wait_for(lambda: in_line(pair.a, key) == 1)
        assert a.release(key, owner, lease["fencing_token"]).status_code == 204
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1

    def test_waiters_on_two_servers_keep_one_order(self, pair: Pair, a: Locks, key: str) -> None:
        """Waiters queued alternately through A and B are served in arrival order."""
        owner, lease = hold(a, key, ttl=60)
        waiters = []
        for index in range(4):
            waiters.append(start_waiting(pair.b if index % 2 else pair.a, key, wait=20))
            wait_for(lambda: in_line(pair.a, key) == len(waiters))
        fence = lease["fencing_token"]
        assert a.release(key, owner, fence).status_code == 204
        for expected, waiter in enumerate(waiters, start=fence + 1):
            assert waiter.lease["fencing_token"] == expected
            assert a.release(key, waiter.owner, expected).status_code == 204

    def test_a_slot_freed_through_one_server_goes_to_a_waiter_on_another(
        self, pair: Pair, a: Locks, key: str
    ) -> None:
        """A limit-2 key, both slots held through A, one waiter through B: the slot released
        through A is B's waiter's at once, and the other holder keeps its slot."""
        holders = []
        for _ in range(2):
            owner = new_id()
            response = a.acquire(key, owner, 60, limit=2)
            assert response.status_code == 200, response.text
            holders.append((owner, response.json()))
        waiter = start_waiting(pair.b, key, wait=15, limit=2)
        wait_for(lambda: in_line(pair.a, key) == 1)
        owner, lease = holders[0]
        assert a.release(key, owner, lease["fencing_token"]).status_code == 204
        assert waiter.lease["fencing_token"] == 3
        state = a.state(key)
        assert sorted(h["fencing_token"] for h in state["holders"]) == [2, 3]
        assert state["waiters"] == 0

    def test_a_run_of_shared_waiters_on_two_servers_is_served_together(
        self, pair: Pair, a: Locks, key: str
    ) -> None:
        """Behind an exclusive holder on A: shared waiters through B, A, B, then an exclusive
        one through B and a shared one through A. The release through A grants the three shared
        ones at once (B's by reservation); the exclusive one gets the key from the last of
        them, and the shared one behind it waits for that."""
        owner, lease = hold(a, key, ttl=60)
        waiters = []
        for index, mode in enumerate("sssxs"):
            through = pair.b if index in (0, 2, 3) else pair.a
            waiters.append(start_waiting(through, key, wait=20, shared=mode == "s"))
            wait_for(lambda: in_line(pair.a, key) == len(waiters))
        assert a.release(key, owner, lease["fencing_token"]).status_code == 204
        readers, writer, last = waiters[:3], waiters[3], waiters[4]
        fence = lease["fencing_token"]
        assert sorted(w.lease["fencing_token"] for w in readers) == [
            fence + 1,
            fence + 2,
            fence + 3,
        ]
        holders = a.state(key)["holders"]
        assert sorted((h["fencing_token"], h["mode"]) for h in holders) == [
            (fence + n, "shared") for n in (1, 2, 3)
        ]
        for reader in readers:
            assert a.state(key)["waiters"] == 2
            assert a.release(key, reader.owner, reader.lease["fencing_token"]).status_code == 204
        assert writer.lease["fencing_token"] == fence + 4
        assert a.state(key)["waiters"] == 1
        assert a.release(key, writer.owner, fence + 4).status_code == 204
        assert last.lease["fencing_token"] == fence + 5

    def test_no_newcomer_on_one_server_passes_a_waiter_on_another(
        self, pair: Pair, a: Locks, key: str
    ) -> None:
        """Around an expiry, a newcomer polling A never gets the key ahead of B's waiter."""
        _, lease = hold(a, key, ttl=0.5)
        waiter = start_waiting(pair.b, key, wait=15)
        wait_for(lambda: in_line(pair.a, key) == 1)
        newcomer = new_id()
        while waiter.response is None:
            assert a.acquire(key, newcomer, 30).status_code == 409
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1

    def test_a_request_superseded_through_another_server_is_never_granted_later(
        self, pair: Pair, a: Locks, key: str
    ) -> None:
        """A waits for an owner token, then B waits for the same one and takes over its place,
        and is granted: A's request, superseded there, is not put back in line when its place
        is gone (it heard of no lapse of its own heartbeat); it hears 409 at its wait's end
        and the key stays free after B's lease is released."""
        holder, lease = hold(a, key, ttl=60)
        owner = new_id()
        older = start_waiting(pair.a, key, wait=4, owner=owner)
        wait_for(lambda: in_line(pair.a, key) == 1)
        held_by = "SELECT server_id FROM lock_waiters WHERE owner_token = ?"
        first_server = scalar(pair.a.database_url, held_by, (owner,))
        newer = start_waiting(pair.b, key, wait=15, owner=owner)
        wait_for(lambda: scalar(pair.a.database_url, held_by, (owner,)) != first_server)
        fence = lease["fencing_token"]
        assert a.release(key, holder, fence).status_code == 204
        assert newer.lease["fencing_token"] == fence + 1
        assert a.release(key, owner, fence + 1).status_code == 204  # a hand-off through A
        assert older.result().status_code == 409
        assert a.state(key)["held"] is False


class TestServerKilled:
    def test_waiters_of_a_killed_server_block_others_only_briefly(
        self, live_server: LiveServer, tmp_path: Path, key: str
    ) -> None:
        """B dies (SIGKILL) holding the first waiter; A's waiter behind it gets the key soon.

        The dead server's waiter is passed over once its heartbeat (3 s) and any reservation
        made for it (2 s) run out: well within the 20 s this waiter waits, and long before the
        60 s lease it stood behind would have ended.
        """
        database = process_database(live_server.database_url, tmp_path / "shared.db")
        project = (
            live_server.project
            if database == live_server.database_url
            else create_project(database, "killed")
        )
        with contextlib.ExitStack() as stack:
            a_url = stack.enter_context(
                serve_in_thread(create_app(ServerConfig(database_url=database, access_log=False)))
            )
            a = attrs.evolve(live_server, url=a_url, database_url=database, project=project)
            a_locks = Locks(stack.enter_context(a.http(project)))
            b_process = stack.enter_context(ServerProcess(database, "--no-access-log"))
            b = attrs.evolve(a, url=b_process.url)
            owner, lease = hold(a_locks, key, ttl=60)
            doomed = start_waiting(b, key, wait=60)
            wait_for(lambda: in_line(a, key) == 1)
            survivor = start_waiting(a, key, wait=20)
            wait_for(lambda: in_line(a, key) == 2)
            b_process.kill()
            assert a_locks.release(key, owner, lease["fencing_token"]).status_code == 204
            granted = survivor.lease
            assert granted["owner_token"] == survivor.owner
            assert isinstance(doomed.outcome(), httpx.HTTPError)  # it died with its server


class TestShutdown:
    def test_sigterm_answers_waiters_at_once(
        self, live_server: LiveServer, tmp_path: Path, key: str
    ) -> None:
        """SIGTERM answers a queued request 503 right away, not when its minute is up."""
        database = process_database(live_server.database_url, tmp_path / "term.db")
        project = (
            live_server.project
            if database == live_server.database_url
            else create_project(database, "term")
        )
        with ServerProcess(database, "--no-access-log") as server:
            view = attrs.evolve(live_server, url=server.url, database_url=database, project=project)
            with view.http(project) as http:
                hold(Locks(http), key, ttl=60)
            pending = start_waiting(view, key, wait=60)
            wait_for(lambda: in_line(view, key) == 1)
            assert server.terminate() != 0  # uvicorn re-raises SIGTERM
            answer = pending.result(timeout=20)
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "unavailable"
        assert answer.headers["Retry-After"] == "1"


class TestMaxWait:
    def test_a_server_ends_waits_at_its_max_wait(
        self, live_server: LiveServer, tmp_path: Path, key: str
    ) -> None:
        """--max-wait 0.3: a request asking to wait 30 s gets 409 lock_held after 0.3 s."""
        database = f"sqlite:///{tmp_path / 'max-wait.db'}"
        project = create_project(database, "max-wait")
        with ServerProcess(database, "--no-access-log", "--max-wait", "0.3") as server:
            view = attrs.evolve(live_server, url=server.url, database_url=database, project=project)
            with view.http(project) as http:
                locks = Locks(http)
                hold(locks, key, ttl=60)
                started = time.monotonic()
                answer = locks.acquire(key, new_id(), 30, wait=30)
                took = time.monotonic() - started
        assert answer.status_code == 409
        assert answer.json()["error"]["code"] == "lock_held"
        assert 0.3 <= took < 20  # an upper bound only: far below the 30 s it asked for

    def test_max_wait_over_60_is_refused_at_start(self, tmp_path: Path) -> None:
        """The server refuses a --max-wait above the API's 60 s, in one line."""
        result = subprocess.run(
            [sys.executable, "-m", "volcano_server", "serve", "--max-wait", "61"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode != 0
        assert result.stderr.splitlines() == [
            "volcano-server: the longest wait must be more than 0 and at most 60 seconds, got 61"
        ]
