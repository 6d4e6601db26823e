"""volcano.integrations.asgi against a real reference server: while_leader's job runs on the
elected instance only, is cancelled when the leadership is lost, and moves on when its leader
leaves, fails or dies; and a Starlette app with an APScheduler job under uvicorn on two
ports, the second taking the job over when the first is killed with kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

import volcano
from tests.conftest import LiveServer
from tests.integration.frameworks.conftest import APPS, Process, figure, python, wait_until
from tests.support.proxy import FaultProxy
from tests.support.server import Project
from volcano.integrations.asgi import scheduler_while_leader, while_leader

STEP = 30.0  # seconds any one awaited step may take before the test fails


async def eventually(condition: Callable[[], Awaitable[bool] | bool], what: str) -> None:
    """Poll `condition` (plain or async) every 20 ms until true; fail after STEP seconds."""
    deadline = time.monotonic() + STEP
    while time.monotonic() < deadline:
        value = condition()
        if await value if isinstance(value, Awaitable) else value:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


class Jobs:
    """Jobs that record what happens to them: started (name, term), cancelled, finished."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def forever(self, name: str) -> Callable[[volcano.AsyncLeadership], Awaitable[None]]:
        async def job(leadership: volcano.AsyncLeadership) -> None:
            self.events.append(("start", name, leadership.term))
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.events.append(("cancelled", name, leadership.term))
                raise

        return job

    def started(self, name: str) -> list[int]:
        return [term for event, who, term in self.events if event == "start" and who == name]


@pytest.fixture
def clients(sqlite_server: LiveServer, project: Project) -> Callable[[], volcano.AsyncClient]:
    return lambda: volcano.AsyncClient(**project.client_args(sqlite_server.url))


class TestWhileLeader:
    def test_only_the_leader_runs_the_job_and_the_next_takes_over_when_it_leaves(
        self, clients
    ) -> None:
        """Two instances: the first elected runs the job, the second waits in line without
        it; when the first leaves (its job cancelled, then it resigns) the second runs it at
        once with a higher term."""
        jobs = Jobs()

        async def scenario() -> None:
            async with clients() as a, clients() as b:
                first = while_leader("jobs", jobs.forever("a"), client=a, ttl=5)
                second = while_leader("jobs", jobs.forever("b"), client=b, ttl=5)
                await first.__aenter__()
                await eventually(lambda: first.leading, "the first to lead")
                await second.__aenter__()
                await eventually(lambda: _waiters(a, "jobs", 1), "the second in line")
                assert not second.leading
                assert jobs.started("b") == []
                await first.__aexit__(None, None, None)
                await eventually(lambda: second.leading, "the second to lead")
                await eventually(lambda: jobs.started("b"), "the second's job")
                await second.__aexit__(None, None, None)
                assert await a.elections.leader("jobs") is None

        asyncio.run(scenario())
        assert jobs.events == [
            ("start", "a", 1),
            ("cancelled", "a", 1),
            ("start", "b", 2),
            ("cancelled", "b", 2),
        ]

    def test_a_lost_leadership_cancels_the_job_and_the_instance_campaigns_again(
        self, clients
    ) -> None:
        """A force release behind the leader's back: its next renewal is refused, the job is
        cancelled at once, and the instance campaigns again and runs it in a new term."""
        jobs = Jobs()

        async def scenario() -> None:
            async with clients() as a, while_leader("jobs", jobs.forever("a"), client=a, ttl=3):
                await eventually(lambda: jobs.started("a") == [1], "the job")
                await a.locks.force_release("jobs")
                await eventually(lambda: len(jobs.started("a")) == 2, "the job again")

        asyncio.run(scenario())
        assert jobs.events[:3] == [("start", "a", 1), ("cancelled", "a", 1), ("start", "a", 2)]

    def test_a_leader_cut_off_cancels_its_job_before_the_next_starts(
        self, clients, sqlite_server: LiveServer, project: Project
    ) -> None:
        """The leader's link to the lock server is cut: its job is cancelled when its lease
        may have run out, before the server hands the office to the next, whose job starts
        only then: the two jobs never run at once."""
        jobs = Jobs()

        async def scenario() -> None:
            with FaultProxy(upstream=sqlite_server.url) as proxy:
                cut_off = volcano.AsyncClient(
                    **{**project.client_args(sqlite_server.url), "api_url": proxy.url}, timeout=2
                )
                async with (
                    cut_off as a,
                    clients() as b,
                    while_leader("jobs", jobs.forever("a"), client=a, ttl=3),
                ):
                    await eventually(lambda: jobs.started("a"), "the first's job")
                    async with while_leader("jobs", jobs.forever("b"), client=b, ttl=3):
                        await eventually(lambda: _waiters(b, "jobs", 1), "the second in line")
                        proxy.partition()
                        await eventually(lambda: jobs.started("b"), "the second's job")
                    proxy.heal()

        asyncio.run(scenario())
        order = [(event, who) for event, who, _ in jobs.events]
        assert order[:3] == [("start", "a"), ("cancelled", "a"), ("start", "b")]

    def test_a_job_that_raises_resigns_and_is_logged(
        self, clients, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A job that raises: logged at ERROR with its traceback, and its instance resigns,
        so the next in line runs the job."""
        jobs = Jobs()

        async def failing(leadership: volcano.AsyncLeadership) -> None:
            raise RuntimeError("boom")

        async def scenario() -> None:
            async with (
                clients() as a,
                clients() as b,
                while_leader("jobs", failing, client=a, ttl=5, retry_delay=30),
            ):
                await eventually(lambda: _failed(caplog), "the failure to be logged")
                async with while_leader("jobs", jobs.forever("b"), client=b, ttl=5):
                    await eventually(lambda: jobs.started("b"), "the second's job")

        with caplog.at_level(logging.INFO, logger="volcano.integrations.asgi"):
            asyncio.run(scenario())
        failure = next(r for r in caplog.records if r.levelno == logging.ERROR)
        assert failure.getMessage() == "the job of 'jobs' raised; resigning (term 1)"
        assert failure.exc_info is not None
        assert str(failure.exc_info[1]) == "boom"

    def test_a_job_that_returns_resigns_and_campaigns_no_more(self, clients) -> None:
        """A job that returns: its instance resigns and does not campaign again."""
        done = asyncio.Event

        async def scenario() -> None:
            finished = done()

            async def once(leadership: volcano.AsyncLeadership) -> None:
                finished.set()

            async with clients() as a, while_leader("jobs", once, client=a, ttl=5) as leader:
                await asyncio.wait_for(finished.wait(), STEP)
                await eventually(lambda: not leader.leading, "the instance to resign")
                await eventually(lambda: _vacant(a, "jobs"), "the office to be vacant")

        asyncio.run(scenario())


class TestSchedulerWhileLeader:
    def test_the_scheduler_runs_jobs_only_while_leading_and_is_shut_down_on_exit(
        self, clients
    ) -> None:
        """The scheduler is started paused, resumed while this instance leads, paused when
        the leadership is lost, and shut down on exit (it was started here)."""
        ticks: list[int] = []
        scheduler = AsyncIOScheduler()

        async def scenario() -> None:
            scheduler.add_job(lambda: ticks.append(1), "interval", seconds=0.05)
            async with clients() as holder:
                other = await holder.locks.acquire("scheduler", ttl=30)
                leading = scheduler_while_leader("scheduler", scheduler, client=holder, ttl=3)
                async with leading as leader:
                    assert scheduler.running
                    await asyncio.sleep(0.5)  # time for ticks, were they not paused
                    assert ticks == []
                    assert not leader.leading
                    await holder.locks.release("scheduler", other)
                    await eventually(lambda: len(ticks) >= 3, "ticks once leading")
                    assert leader.leading
                # AsyncIOScheduler.shutdown takes effect on the loop's next turn.
                await eventually(lambda: not scheduler.running, "the scheduler shut down")

        asyncio.run(scenario())


async def _leading(http: httpx.AsyncClient) -> bool:
    return bool((await http.get("/leading")).json()["leading"])


def _failed(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.levelno == logging.ERROR for r in caplog.records)


async def _waiters(client: volcano.AsyncClient, key: str, count: int) -> bool:
    return (await client.locks.get(key)).waiters == count


async def _vacant(client: volcano.AsyncClient, key: str) -> bool:
    return await client.elections.leader(key) is None


class TestFastAPI:
    def test_a_fastapi_lifespan_runs_the_job_while_leading_and_resigns_on_shutdown(
        self, sqlite_server: LiveServer, project: Project, client: volcano.Client
    ) -> None:
        """FastAPI(lifespan=...) as the README shows it: the app runs the job once elected,
        says so from a route, and resigns when it shuts down."""
        from fastapi import FastAPI

        terms: list[int] = []

        async def job(leadership: volcano.AsyncLeadership) -> None:
            terms.append(leadership.term)
            await asyncio.Event().wait()

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with (
                volcano.AsyncClient(**project.client_args(sqlite_server.url)) as aclient,
                while_leader("api-jobs", job, client=aclient, ttl=5) as leader,
            ):
                app.state.leader = leader
                yield

        app = FastAPI(lifespan=lifespan)

        @app.get("/leading")
        async def leading() -> dict[str, bool]:
            return {"leading": app.state.leader.leading}

        async def serve() -> None:  # the lifespan as uvicorn runs it, requests over ASGI
            transport = httpx.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://app") as http,
            ):
                await eventually(lambda: _leading(http), "the app to lead")
                assert terms == [1]

        asyncio.run(serve())
        assert client.elections.leader("api-jobs") is None


class TestStarletteUnderUvicorn:
    pytestmark = pytest.mark.slow

    def test_one_instance_runs_the_scheduled_job_and_the_other_takes_over_after_kill_9(
        self, spawn, child_env: dict[str, str], tmp_path: Path, client: volcano.Client
    ) -> None:
        """The same app under uvicorn on two ports: only the elected one runs the
        APScheduler job; after kill -9 of its process the other runs it, within the ttl
        (3 s, +5 s), in a higher term."""
        log = tmp_path / "ticks.log"
        env = {**child_env, "VOLCANO_TEST_LOG": str(log), "VOLCANO_TEST_TTL": "3"}
        argv = python(
            "-m", "uvicorn", f"{APPS}.starlette_app:app", "--host", "127.0.0.1", "--port", "0",
        )  # fmt: skip
        servers: dict[int, tuple[Process, str]] = {}
        for name in ("a", "b"):
            process: Process = spawn(f"uvicorn-{name}", argv, env)
            url = process.wait_for(r"Uvicorn running on (http://\S+)").group(1)
            servers[process.pid] = (process, url)

        def statuses() -> dict[int, bool]:
            return {
                pid: httpx.get(f"{url}/status", timeout=10).json()["leading"]
                for pid, (_, url) in servers.items()
            }

        wait_until(lambda: any(statuses().values()), "a leader")
        (leader,) = [pid for pid, leading in statuses().items() if leading]
        (other,) = set(servers) - {leader}

        def ticks() -> list[tuple[int, int]]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [(int(line.split()[1]), int(line.split()[2])) for line in lines]

        wait_until(lambda: len(ticks()) >= 5, "the leader's ticks")
        assert {pid for pid, _ in ticks()} == {leader}
        killed = time.monotonic()
        servers[leader][0].kill()
        wait_until(lambda: other in {pid for pid, _ in ticks()}, "the other's ticks", timeout=3 + 5)
        figure(
            f"starlette+uvicorn+apscheduler kill -9: the other instance ran the job "
            f"{time.monotonic() - killed:.2f}s after the kill (ttl 3 s, job every 0.2 s)"
        )
        terms = dict(ticks())
        assert terms[other] > terms[leader]
        assert httpx.get(f"{servers[other][1]}/status", timeout=10).json()["leading"]
