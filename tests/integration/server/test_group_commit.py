"""When a request waits for its commit's fsync on the event loop, and when it hands that over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.raw import Locks, Waiter, new_id
from tests.support.server import Project, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.storage import Storage, open_storage


class Recorded:
    """A SQLite FULL server whose storage notes the `here` of every `synced` call."""

    def __init__(self, storage: Storage, url: str, project: Project, room: Any) -> None:
        self.heres: list[bool] = []
        self.room = room
        self.url = url
        self.project = project
        synced = storage.synced

        async def recorded(*, here: bool = False) -> None:
            self.heres.append(here)
            await synced(here=here)

        storage.synced = recorded  # type: ignore[method-assign]

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.project.headers(), timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Recorded]:
    database_url = f"sqlite:///{tmp_path / 'volcano.db'}"
    project = create_project(database_url, "tests")
    storage = open_storage(database_url, sqlite_synchronous="full")
    app = create_app(ServerConfig(database_url=database_url, access_log=False), storage=storage)
    with serve_in_thread(app) as url:
        yield Recorded(storage, url, project, app.state.waits)


class TestSyncHere:
    def test_a_release_with_waiters_parked_syncs_on_the_loop(self, server: Recorded) -> None:
        """Waiters parked in line do not count as others to serve, nor does the release held
        until the waiter it woke is answered: that waiter fsyncs on the loop (no thread
        hand-offs), and the release after it finds its commit on disk (on the loop too)."""
        key, owner = new_id(), new_id()
        with server.http() as http:
            lease = Locks(http).acquire(key, owner, 30).json()
            waiters = [Waiter(server.http(), key, wait=20) for _ in range(3)]
            deadline = time.monotonic() + 10
            while len(server.room) < 3:
                assert time.monotonic() < deadline, "the waiters did not queue"
                time.sleep(0.01)
            time.sleep(0.1)  # every waiter parked in line
            server.heres.clear()
            released = Locks(http).release(key, owner, lease["fencing_token"])
        assert released.status_code == 204
        deadline = time.monotonic() + 10
        while not any(w.response is not None and w.response.status_code == 200 for w in waiters):
            assert time.monotonic() < deadline, "nobody was handed the lock"
            time.sleep(0.01)
        assert server.heres[:2] == [True, True]
