"""Elections through faults: a leader killed with kill -9, a leader cut off past its ttl, a
leader cancelled (asyncio), and an election whose answer comes too late to lead on.

Each hands over to the next candidate in line, with a higher term; an observer sees each leader
once and never two at once; a deposed leader's guard is LOST no later than its lease ends.
Leases here last two seconds, so each test takes a few.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.databases import process_database
from tests.support.proxy import FaultProxy
from tests.support.raw import Locks, wait_for
from tests.support.sdk import TLS, Candidate, Kind, Sdk
from tests.support.server import ServerProcess, create_project

TTL = 2.0

CHILD = """
import sys, time, volcano
with volcano.Client() as client:
    with client.elections.campaign(sys.argv[1], label="child", ttl=float(sys.argv[2])) as lead:
        print(lead.term, flush=True)
        time.sleep(600)
"""


@pytest.fixture
def direct(client_kind: Kind, target: LiveServer) -> Iterator[Callable[[], Sdk]]:
    """Clients of `client_kind` straight to the server (no proxy)."""
    made: list[Sdk] = []

    def make() -> Sdk:
        sdk = Sdk(client_kind, target.project.client_args(target.url))
        made.append(sdk)
        return sdk

    yield make
    for sdk in made:
        sdk.close()


@pytest.fixture
def raw(target: LiveServer) -> Iterator[Locks]:
    with target.http(target.project, verify=TLS) as http:
        yield Locks(http)


def in_line(raw: Locks, key: str, count: int) -> None:
    wait_for(lambda: raw.state(key)["waiters"] == count, f"{count} in line")


def observed(leaders: Any, until: volcano.Leader) -> list[volcano.Leader | None]:
    """What the observer reports, up to and including `until`."""
    seen = [leaders.next()]
    while seen[-1] != until:
        seen.append(leaders.next())
    return seen


class TestCrash:
    def test_a_killed_leader_is_replaced_when_its_lease_ends(
        self, direct: Callable[[], Sdk], raw: Locks, target: LiveServer, key: str
    ) -> None:
        """kill -9 of the leading process: the candidate in line is elected once the lease
        expires, with a higher term; the observer sees the child, then the candidate."""
        leaders = direct().observe(key)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, key, str(TTL)],
            env=target.project.child_env(target.url),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            term = int(child.stdout.readline())
            assert leaders.next() in (None, volcano.Leader("child", term))
            survivor = Candidate(direct(), key, "survivor", ttl=10)
            in_line(raw, key, 1)
            child.kill()
            child.wait(10)
            elected = survivor.lead()
            assert elected.term > term
            seen = observed(leaders, volcano.Leader("survivor", elected.term))
            assert [s for s in seen if s is not None][-2:] in (
                [volcano.Leader("child", term), volcano.Leader("survivor", elected.term)],
                [volcano.Leader("survivor", elected.term)],
            )
            survivor.step_down()
        finally:
            child.kill()
            child.wait(10)
            if child.stdout is not None:
                child.stdout.close()
            leaders.close()


class TestRestart:
    def test_a_candidate_waits_out_a_restart_of_the_server(
        self, client_kind: Kind, database_url: str, tmp_path: Path, key: str
    ) -> None:
        """kill -9 of the server while a candidate waits in line, and a restart 1.5 s later on
        the same database and port: the candidate's campaign outlives the refused connections,
        and it is elected when the leader resigns, with a higher term."""
        db = process_database(database_url, tmp_path / "restart.db")
        project = create_project(db, f"restart-{uuid.uuid4().hex[:8]}")
        server = ServerProcess(db, "--no-access-log").start()
        made: list[Sdk] = []

        def sdk() -> Sdk:
            made.append(Sdk(client_kind, project.client_args(server.url)))
            return made[-1]

        try:
            leader = Candidate(sdk(), key, "leader", ttl=10)
            term = leader.lead().term
            candidate = Candidate(sdk(), key, "candidate", ttl=10)
            with httpx.Client(base_url=server.url, headers=project.headers()) as http:
                in_line(Locks(http), key, 1)
            server.kill()
            time.sleep(1.5)  # the candidate's next requests are refused meanwhile
            server.start()
            assert candidate.error is None
            assert not candidate.elected.is_set()
            leader.step_down()
            assert candidate.lead().term > term
            candidate.step_down()
        finally:
            for client in made:
                client.close()
            server.kill()


class TestPartition:
    def test_a_leader_cut_off_past_its_ttl_is_lost_before_the_next_is_elected(
        self,
        sdk: Sdk,
        direct: Callable[[], Sdk],
        proxy: FaultProxy,
        raw: Locks,
        key: str,
    ) -> None:
        """The leader's link is cut: its guard turns LOST by its own deadline, which is no
        later than the server's expiry that elects the next candidate (higher term); the
        observer never sees the two at once."""
        leaders = direct().observe(key)
        try:
            assert leaders.next() is None
            deposed = Candidate(sdk, key, "cut-off", ttl=TTL)
            old = deposed.lead()
            assert leaders.next() == volcano.Leader("cut-off", old.term)
            next_one = Candidate(direct(), key, "next", ttl=10)
            in_line(raw, key, 1)
            proxy.partition()
            elected = next_one.lead()
            assert sdk.read(lambda: old.lost), "the deposed leader's guard still says it leads"
            assert isinstance(sdk.read(lambda: old.lost_reason), volcano.LockLostError)
            assert elected.term > old.term
            seen = observed(leaders, volcano.Leader("next", elected.term))
            assert all(s is None for s in seen[:-1])  # a vacancy at most, never two leaders
            proxy.heal()
            deposed.step_down()
            next_one.step_down()
        finally:
            proxy.heal()
            leaders.close()


class TestTooLate:
    def test_an_election_answered_after_the_ttl_is_not_returned(
        self, sdk: Sdk, proxy: FaultProxy, raw: Locks, key: str
    ) -> None:
        """The answer electing the candidate is held past the lease's ttl: the campaign does
        not lead on it (the lease has expired), campaigns again, and returns a live leadership
        with a later term."""
        proxy.on("POST", r"/acquire$").delay_response(1.5)
        with sdk.campaign(key, label="late", ttl=1.0) as leadership:
            assert sdk.read(lambda: leadership.state) is volcano.GuardState.HELD
            assert leadership.term == 2
            assert raw.state(key)["holders"][0]["fencing_token"] == 2


@pytest.mark.parametrize("client_kind", ["async"])
class TestCancel:
    def test_a_cancelled_leader_resigns_after_its_block_has_ended(
        self, client_kind: Kind, target: LiveServer, raw: Locks, key: str
    ) -> None:
        """Cancelling the leading task resigns; the next candidate is elected at once (long
        before the ttl) and only once the cancelled leader's block has ended."""

        async def scenario() -> None:
            async with (
                httpx.AsyncClient(verify=TLS) as http,
                volcano.AsyncClient(
                    **target.project.client_args(target.url), http_client=http
                ) as client,
            ):
                ended: list[float] = []
                elected = asyncio.Event()

                async def lead() -> None:
                    async with client.elections.campaign(key, label="first", ttl=30):
                        elected.set()
                        try:
                            await asyncio.Event().wait()
                        finally:
                            ended.append(time.monotonic())

                leader = asyncio.ensure_future(lead())
                await elected.wait()
                waiting = asyncio.ensure_future(
                    client.elections.campaign(key, label="second", ttl=30).__aenter__()
                )
                await asyncio.to_thread(in_line, raw, key, 1)
                leader.cancel()
                second = await asyncio.wait_for(waiting, 10)
                elected_at = time.monotonic()
                assert ended
                assert ended[0] <= elected_at
                assert second.term == 2
                await second.__aexit__(None, None, None)
                with pytest.raises(asyncio.CancelledError):
                    await leader

        asyncio.run(scenario())
