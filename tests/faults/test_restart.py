"""A guard's renewal across a restart of the server (issue 34): a real server process, killed
and started again on its port, behind the real fault proxy.

The renewal sent as the server dies never comes back (the proxy holds it, as a request into a
host that vanished does): the guard must give it up in time to try again once the server is
back, before its deadline, and not wait for that one answer until the lease has run out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveServer
from tests.support.proxy import FaultProxy
from tests.support.raw import wait_for
from tests.support.sdk import PATIENCE, Sdk
from tests.support.server import ServerProcess, create_project


@pytest.fixture
def process(tmp_path: Path) -> Iterator[tuple[ServerProcess, LiveServer]]:
    """A `volcano-server` process on SQLite, and how the suite's fixtures name it."""
    database = f"sqlite:///{tmp_path / 'restart.db'}"
    project, other = create_project(database, "restart"), create_project(database, "other")
    with ServerProcess(database, "--no-access-log") as server:
        yield server, LiveServer(server.url, database, project, other)


@pytest.fixture
def target(process: tuple[ServerProcess, LiveServer]) -> LiveServer:
    return process[1]


class TestRestart:
    TTL = 24.0
    """Renewal due 8 s after the acquire's send, the last third from 16 s, the last call 2 s
    before the deadline: the restart has more than 12 s to complete (a server process takes
    up to 6 s to start at load 15)."""
    TIMEOUT = 20.0
    """The client's timeout: longer than the two thirds of the ttl left at the first renewal."""

    def test_a_renewal_lost_in_a_restart_is_tried_again_before_the_deadline(
        self,
        make_sdk: Callable[..., Sdk],
        process: tuple[ServerProcess, LiveServer],
        proxy: FaultProxy,
        key: str,
    ) -> None:
        """The first renewal goes into the dying server and hangs; the server is killed and
        started again. With a client timeout longer than the time left, that attempt
        used to wait until the deadline: the guard was lost though the server was back. Now it
        is given up at the last call, 2 s before the deadline, another is sent to the restarted
        server, and the guard
        is held past its first lease's deadline, then releases."""
        server, _ = process
        sdk = make_sdk(timeout=self.TIMEOUT)
        proxy.on("POST", r"/renew$").blackhole()
        guard = sdk.with_lock(key, ttl=self.TTL)
        sdk.enter(guard)
        deadline = sdk.log.lease_deadline(self.TTL)
        proxy.wait_until(
            lambda records: any(r.path.endswith("/renew") for r in records),
            PATIENCE,
            "the renewal into the dying server",
        )
        server.kill()
        server.start(port=server.port)
        back = time.monotonic()
        assert back < deadline - 4.0, (
            f"the restart took too long: back {deadline - back:.1f} s before the deadline"
        )
        # The hung attempt is given up at the last call, 2 s before the deadline: on a quick
        # restart that is well after PATIENCE, so wait up to the deadline itself.
        wait_for(
            lambda: len(sdk.log.successes("renew")) >= 1,
            "a renewal after the restart",
            max(PATIENCE, deadline - time.monotonic()),
        )
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.2)
        assert not sdk.read(lambda: guard.lost), sdk.read(lambda: guard.lost_reason)
        renewed = sdk.log.successes("renew")[0]
        assert renewed.at > back
        sdk.exit(guard)
        assert not sdk.read(lambda: guard.lost)
