"""Leaving the queue: a cancelled asyncio acquire and a Ctrl-C'd sync one close their connection,
and the server takes them out of line at once (not when their wait would have run out)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.databases import queued
from tests.support.raw import Locks, new_id, wait_for
from tests.support.server import DEFAULT_SIGNALS

pytestmark = pytest.mark.anyio


def hold(server: Locks, key: str) -> None:
    assert server.acquire(key, new_id(), 60).status_code == 200


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until `condition` holds; fail after 10 s (a bound only)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"not within 10 s: {what}")


class TestLeavingTheQueue:
    async def test_cancelling_a_waiting_acquire_leaves_the_queue(
        self, aclient: volcano.AsyncClient, server: Locks, live_server: LiveServer, key: str
    ) -> None:
        """task.cancel() on acquire(wait=) takes the caller out of line at once."""
        hold(server, key)
        task = asyncio.create_task(aclient.locks.acquire(key, ttl=30, wait=50))
        await eventually(lambda: queued(live_server.database_url, key) == 1, "in line")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: queued(live_server.database_url, key) == 0, "out of line")

    def test_ctrl_c_in_a_waiting_acquire_leaves_the_queue(
        self, server: Locks, live_server: LiveServer, key: str
    ) -> None:
        """SIGINT to a process blocked in acquire(wait=) takes it out of line at once."""
        hold(server, key)
        project = live_server.project
        script = textwrap.dedent(
            f"""
            import volcano
            client = volcano.Client(anon_key={project.anon_key!r},
                                    service_key={project.service_key!r},
                                    api_url={live_server.url!r})
            client.locks.acquire({key!r}, ttl=30, wait=50)
            """
        )
        process = subprocess.Popen(
            [*DEFAULT_SIGNALS, sys.executable, "-c", script], stderr=subprocess.PIPE, text=True
        )
        try:
            wait_for(lambda: queued(live_server.database_url, key) == 1, "in line")
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
        finally:
            process.kill()
            process.communicate()
        assert "KeyboardInterrupt" in stderr
        wait_for(lambda: queued(live_server.database_url, key) == 0, "out of line")
