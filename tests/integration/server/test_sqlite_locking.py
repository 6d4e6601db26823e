"""SQLite runs on the event loop only while nothing has to wait; a locked file moves the work
to a worker thread, so the server keeps answering. And what reaches the disk before an answer."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.raw import Waiter
from tests.support.server import create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.http import _api
from volcano_server.http._auth import Authenticator
from volcano_server.locks._transactions import Transactions
from volcano_server.storage import Lease, LockRow, StoredOutcome
from volcano_server.storage._sqlite import SQLiteStorage

from .conftest import Locks, new_id


def granted(now_us: int) -> LockRow:
    """A key with one lease, a second long, as an acquire would save it."""
    return LockRow(1, "k", 1, 1, (Lease(1, new_id(), now_us + 10**6, 1.0),))


class TestWriteLockHeldElsewhere:
    def test_waits_for_the_lock_without_stalling_the_server(self, tmp_path: Path) -> None:
        """While another process holds the write lock, an acquire waits (in a worker thread) and
        succeeds once it is released, and /healthz answers meanwhile."""
        path = tmp_path / "locked.db"
        url = f"sqlite:///{path}"
        project = create_project(url, "locked")
        with serve_in_thread(create_app(ServerConfig(database_url=url, access_log=False))) as base:
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # what a second server process writing looks like
            result: list[httpx.Response] = []

            def acquire() -> None:
                with httpx.Client(base_url=base, headers=project.headers(), timeout=30) as http:
                    result.append(Locks(http).acquire("blocked", new_id()))

            waiter = threading.Thread(target=acquire)
            waiter.start()
            try:
                with httpx.Client(base_url=base, timeout=2) as http:
                    for _ in range(5):
                        assert http.get("/healthz").status_code == 200
                assert result == []  # still waiting for the lock
            finally:
                other.execute("COMMIT")
                other.close()
            waiter.join(timeout=30)
        assert [response.status_code for response in result] == [200]
        assert result[0].json()["fencing_token"] == 1

    def test_only_the_transaction_is_repeated_in_the_thread(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An acquire that would block on the loop runs its transaction again in a worker
        thread; authentication, parsing and validation ran once, before either attempt."""
        path = tmp_path / "once.db"
        url = f"sqlite:///{path}"
        project = create_project(url, "once")
        calls: dict[str, list[object]] = {"authenticate": [], "validate": [], "acquire": []}

        def counted(name: str, real: Callable[..., Any], record: Callable[..., object]) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls[name].append(record(*args, **kwargs))
                return real(*args, **kwargs)

            return wrapper

        monkeypatch.setattr(
            Authenticator,
            "authenticate",
            counted("authenticate", Authenticator.authenticate, lambda *_a, **_k: True),
        )
        monkeypatch.setattr(
            _api, "_validated", counted("validate", _api._validated, lambda *_a, **_k: True)
        )
        monkeypatch.setattr(
            Transactions,
            "acquire",
            counted("acquire", Transactions.acquire, lambda *_a, **kw: kw["may_block"]),
        )
        with serve_in_thread(create_app(ServerConfig(database_url=url, access_log=False))) as base:
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")  # the loop's attempt finds the file busy
            unlock = threading.Timer(0.3, lambda: other.execute("COMMIT"))
            unlock.start()
            try:
                with httpx.Client(base_url=base, headers=project.headers(), timeout=30) as http:
                    response = Locks(http).acquire("once", new_id())
            finally:
                unlock.join()
                other.close()
        assert response.status_code == 200
        assert calls == {"authenticate": [True], "validate": [True], "acquire": [False, True]}

    def test_gives_up_with_503_after_the_busy_timeout(self, tmp_path: Path) -> None:
        """A write lock held past the busy timeout (5 s) gets 503 with Retry-After, not a hang."""
        path = tmp_path / "stuck.db"
        url = f"sqlite:///{path}"
        project = create_project(url, "stuck")
        with serve_in_thread(create_app(ServerConfig(database_url=url, access_log=False))) as base:
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                with httpx.Client(base_url=base, headers=project.headers(), timeout=30) as http:
                    response = Locks(http).acquire("stuck", new_id())
            finally:
                other.execute("ROLLBACK")
                other.close()
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
        assert int(response.headers["retry-after"]) >= 1


class TestDurability:
    """Which commits reach the disk before they are answered: the WAL's fsyncs, counted."""

    @staticmethod
    def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
        calls: list[int] = []
        real = os.fdatasync
        monkeypatch.setattr(
            "volcano_server.storage._sqlite.os.fdatasync", lambda fd: calls.append(fd) or real(fd)
        )
        return calls

    def test_a_lease_is_on_disk_before_its_answer(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A transaction that saves a lock row fsyncs the WAL once, after its commit."""
        storage = SQLiteStorage(tmp_path / "d.db")
        try:
            calls = self.syncs(monkeypatch)
            with storage.write() as tx:
                tx.save_lock(granted(tx.now_us()), None)
            assert len(calls) == 1
            with storage.write() as tx:
                tx.save_outcome(1, new_id(), StoredOutcome(b"", 409, b"{}", 1, tx.now_us()))
            assert len(calls) == 2
        finally:
            storage.close()

    def test_queue_and_heartbeat_rows_skip_the_fsync(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Waiter and heartbeat rows commit without an fsync: their requests die with a crash."""
        storage = SQLiteStorage(tmp_path / "q.db")
        try:
            calls = self.syncs(monkeypatch)
            with storage.write() as tx:
                tx.add_waiter(1, "k", new_id(), 1.0, "server")
                tx.touch_server("server", tx.now_us() + 10**6)
            assert calls == []
        finally:
            storage.close()

    def test_normal_never_fsyncs_after_a_commit(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--sqlite-synchronous normal leaves every commit in the page cache."""
        storage = SQLiteStorage(tmp_path / "n.db", synchronous="normal")
        try:
            calls = self.syncs(monkeypatch)
            with storage.write() as tx:
                tx.save_lock(granted(tx.now_us()), None)
            assert calls == []
        finally:
            storage.close()

    def test_a_handed_over_lease_is_answered_after_its_fsync(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A release on the event loop hands the key to a queued waiter; neither the release
        nor the waiter is answered until the syncer's fsync of that commit has returned."""
        path = tmp_path / "handed.db"
        url = f"sqlite:///{path}"
        project = create_project(url, "handed")
        gate = threading.Event()
        gate.set()
        real = os.fdatasync

        def gated(fd: int) -> None:
            assert gate.wait(30)
            real(fd)

        monkeypatch.setattr("volcano_server.storage._syncer.os.fdatasync", gated)
        app = create_app(ServerConfig(database_url=url, access_log=False))
        with (
            serve_in_thread(app) as base,
            httpx.Client(base_url=base, headers=project.headers(), timeout=30) as http,
        ):
            holder = new_id()
            fence = Locks(http).acquire("handed", holder).json()["fencing_token"]
            waiter = Waiter(httpx.Client(base_url=base, headers=project.headers()), "handed")
            self.until_queued(path)
            gate.clear()  # the next fsync hangs until the gate opens
            released: list[httpx.Response] = []
            releaser = threading.Thread(
                target=lambda: released.append(Locks(http).release("handed", holder, fence))
            )
            releaser.start()
            time.sleep(0.5)
            assert self.waiters(path) == 0  # the hand-off is committed ...
            assert released == []  # ... but nobody heard of it before the fsync
            assert waiter.response is None
            gate.set()
            releaser.join(30)
            outcome = waiter.outcome()
        assert [response.status_code for response in released] == [204]
        assert isinstance(outcome, httpx.Response)
        assert outcome.status_code == 200
        assert outcome.json()["fencing_token"] == fence + 1

    @staticmethod
    def waiters(path: Path) -> int:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            count: int = conn.execute("SELECT count(*) FROM lock_waiters").fetchone()[0]
            return count

    def until_queued(self, path: Path) -> None:
        for _ in range(300):
            if self.waiters(path):
                return
            time.sleep(0.01)
        raise AssertionError("the waiter never joined the queue")
