"""volcano.integrations.celery's LockedTask in real Celery workers (prefork, the local Redis as
broker and result backend) against a real reference server: once at a time per key, taken
when the task starts, skip / retry / wait when held, the lost signal, and kill -9.

The behaviour tests share one pair of workers (concurrency 1 each) and one Volcano project,
each test with keys and logs of its own; the kill -9 test has a worker of its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from celery.result import AsyncResult

import volcano
from tests.conftest import LiveServer
from tests.integration.frameworks.conftest import (
    APPS,
    Process,
    environment,
    figure,
    python,
    stop_all,
    wait_until,
)
from tests.support.server import Project, create_project

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(sqlite_server: LiveServer) -> Project:
    """One Volcano project for the module's tests (and its shared workers)."""
    return create_project(sqlite_server.database_url, f"celery-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def celery_app(redis_url: str):
    from tests.integration.frameworks.apps import celery_app

    return celery_app


def new_queue() -> str:
    return f"volcano-tests-{uuid.uuid4().hex[:12]}"


def worker(queue: str, name: str, env: dict[str, str], log) -> Process:
    """A real worker on `queue` (prefork, concurrency 1: one task at a time), once ready."""
    argv = python(
        "-m", "celery", "-A", f"{APPS}.celery_app", "worker", "-Q", queue, "-c", "1",
        "-n", f"{name}-{queue}@%h", "--loglevel", "INFO",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    )  # fmt: skip
    process = Process(argv, {**env, "VOLCANO_TEST_QUEUE": queue}, log)
    process.wait_for(r" ready\.")
    return process


@pytest.fixture(scope="module")
def queue(
    celery_app, sqlite_server: LiveServer, project: Project, tmp_path_factory
) -> Iterator[str]:
    """The module's queue, served by a pair of workers for the module's tests."""
    name = new_queue()
    logs = tmp_path_factory.mktemp("workers")
    env = environment(sqlite_server, project)
    pair: list[Process] = []
    try:
        for letter in "ab":
            pair.append(worker(name, letter, env, logs / f"worker-{letter}.log"))
        yield name
    finally:
        stop_all(pair)
        celery_app.store.delete(name)


class Run:
    """A pair of task messages' shared log and release flag in Redis."""

    def __init__(self, celery_app, queue: str, name: str = "run") -> None:
        self.app = celery_app
        self.queue = queue
        self.log = f"{queue}:{name}:log"
        self.flag = f"{queue}:{name}:flag"

    def send(self, task, **options) -> AsyncResult:
        return task.apply_async((self.log, self.flag), queue=self.queue, **options)

    def lines(self) -> list[str]:
        return [line.decode() for line in self.app.store.lrange(self.log, 0, -1)]

    def starts(self) -> list[str]:
        return [line for line in self.lines() if line.startswith("start")]

    def release(self) -> None:
        self.app.store.set(self.flag, 1, ex=600)

    def cleanup(self) -> None:
        self.app.store.delete(self.log, self.flag)


@pytest.fixture
def run(celery_app, queue: str) -> Iterator[Run]:
    run = Run(celery_app, queue, uuid.uuid4().hex[:8])
    yield run
    run.cleanup()


def key_of(task, run: Run) -> str:
    return task.lock_key_for((run.log, run.flag), {})


class TestLockedTask:
    def test_the_same_task_sent_twice_at_once_runs_once(
        self, celery_app, run: Run, client: volcano.Client
    ) -> None:
        """Two workers get the same task with the same arguments at once: one runs the body
        under the lease, the other finds the key held and skips (succeeds with None)."""
        first, second = run.send(celery_app.skip_task), run.send(celery_app.skip_task)
        skipped = wait_until(
            lambda: [r for r in (first, second) if r.ready()], "the skipped one", timeout=60
        )
        assert len(skipped) == 1
        assert skipped[0].get(timeout=5) is None
        assert client.locks.get(key_of(celery_app.skip_task, run)).held
        run.release()
        ran = second if skipped[0] is first else first
        token = ran.get(timeout=60)
        assert [line.split()[:2] for line in run.lines()] == [
            ["start", str(token)],
            ["end", str(token)],
        ]
        assert run.lines()[-1] == f"end {token} held"
        assert not client.locks.get(key_of(celery_app.skip_task, run)).held

    def test_the_key_is_taken_when_the_task_starts_not_when_queued(
        self, celery_app, run: Run, client: volcano.Client
    ) -> None:
        """A task waiting in the queue (even reserved by a busy worker) holds no lease; it
        takes its key only once a worker starts it."""
        busy = Run(celery_app, run.queue, run.log + "-busy")
        holding = [run.send(celery_app.wait_task), busy.send(celery_app.wait_task)]
        wait_until(lambda: run.starts() and busy.starts(), "both workers to be busy")
        other = Run(celery_app, run.queue, run.log + "-other")
        queued = other.send(celery_app.skip_task)
        # Once the queue is empty a busy worker has the message (prefetched, not started).
        wait_until(lambda: celery_app.store.llen(run.queue) == 0, "a worker to reserve it")
        assert not client.locks.get(key_of(celery_app.skip_task, other)).held
        other.release()
        run.release()
        busy.release()
        assert all(result.get(timeout=60) >= 1 for result in holding)
        assert queued.get(timeout=60) >= 1  # it ran: it had not been skipped
        assert len(other.starts()) == 1
        other.cleanup()
        busy.cleanup()

    def test_retry_runs_after_the_holder_with_celerys_retry_and_retry_after(
        self, celery_app, run: Run, client: volcano.Client
    ) -> None:
        """With lock_on_held="retry", the task that finds the key held goes to RETRY (Celery's
        retry, countdown from the server's Retry-After) and runs once the holder is done,
        with a higher fencing token; the bodies never overlap."""
        first, second = run.send(celery_app.retry_task), run.send(celery_app.retry_task)
        wait_until(lambda: "RETRY" in (first.state, second.state), "one task to retry")
        retried_at = time.monotonic()
        run.release()
        tokens = sorted([first.get(timeout=60), second.get(timeout=60)])
        figure(
            f"celery retry: the retried task ran {time.monotonic() - retried_at:.2f}s after its "
            "refusal (ttl 3 s)"
        )
        lines = run.lines()
        assert [line.split()[0] for line in lines] == ["start", "end", "start", "end"]
        assert tokens[1] > tokens[0]
        assert lines[2].endswith(" 1")  # the retry: request.retries == 1
        assert not client.locks.get(key_of(celery_app.retry_task, run)).held

    def test_wait_queues_on_the_server_and_runs_after_the_holder(
        self, celery_app, run: Run, client: volcano.Client
    ) -> None:
        """With lock_wait, the second task waits in the key's line (lock_key names the key
        from the arguments) and runs the moment the first releases, with the next token."""
        key = f"tests-wait:{run.log}"
        assert celery_app.wait_task.lock_key_for((run.log, run.flag), {}) == key
        first, second = run.send(celery_app.wait_task), run.send(celery_app.wait_task)
        wait_until(lambda: client.locks.get(key).waiters == 1, "the second task in line")
        run.release()
        tokens = sorted([first.get(timeout=60), second.get(timeout=60)])
        assert tokens[1] == tokens[0] + 1
        assert [line.split()[0] for line in run.lines()] == ["start", "end", "start", "end"]

    def test_a_lost_lease_is_seen_by_the_body_and_fails_the_task(
        self, celery_app, run: Run, client: volcano.Client
    ) -> None:
        """A lease taken over while the body runs (a force release) turns self.lock lost (the
        body's wait_lost wakes) and the task fails with volcano.LockLostError."""
        result = run.send(celery_app.until_lost_task)
        wait_until(run.starts, "the task to start")
        client.locks.force_release(key_of(celery_app.until_lost_task, run))
        with pytest.raises(Exception, match=r"was lost while tests\.until_lost ran") as failure:
            result.get(timeout=60)
        assert type(failure.value).__name__ == "LockLostError"  # rebuilt by Celery's backend
        assert result.state == "FAILURE"
        assert run.lines()[-1].endswith("lost")

    def test_a_worker_killed_with_kill_9_frees_the_key_within_the_ttl(
        self, celery_app, client: volcano.Client, child_env: dict[str, str], tmp_path
    ) -> None:
        """kill -9 of the worker (its whole process group) mid-task: nobody renews, and the
        key is free once the ttl (3 s) has run out, never later (within ttl + 5 s)."""
        queue = new_queue()
        run = Run(celery_app, queue)
        killed_worker = worker(queue, "k", child_env, tmp_path / "worker-k.log")
        try:
            self._kill(celery_app, run, client, killed_worker)
        finally:
            killed_worker.stop()
            run.cleanup()
            celery_app.store.delete(queue)

    def _kill(self, celery_app, run: Run, client: volcano.Client, worker: Process) -> None:
        run.send(celery_app.short_ttl_task)
        wait_until(run.starts, "the task to start")
        key = key_of(celery_app.short_ttl_task, run)
        assert client.locks.get(key).held
        killed = time.monotonic()
        worker.kill()
        wait_until(lambda: not client.locks.get(key).held, "the key to be freed", timeout=3 + 5)
        freed = time.monotonic() - killed
        figure(f"celery kill -9: the key was free {freed:.2f}s after the kill (ttl 3 s)")
        assert len(run.starts()) == 1


class TestLockedTaskInProcess:
    def test_a_direct_call_and_apply_run_the_body_under_the_lock(
        self, sqlite_server, project, client: volcano.Client
    ) -> None:
        """task(...) and task.apply(...) (no worker) lock as a worker does, with the client
        built from app.conf; a held key then skips, fails, or (called directly, where Celery
        cannot retry) raises the refusal, as lock_on_held says, sending task_lock_held; a
        lease lost mid-body sends task_lock_lost, however the body ends."""
        from celery import Celery

        from volcano.integrations.celery import (
            LockedTask,
            task_lock_held,
            task_lock_lost,
            volcano_client,
        )

        held: list[tuple[str, str]] = []
        lost: list[tuple[str, str]] = []

        def on_held(sender, key, action, retry_after, **_) -> None:
            held.append((key, action))

        def on_lost(sender, key, reason, **_) -> None:
            lost.append((key, type(reason).__name__))

        app = Celery("in-process", set_as_current=False)
        app.conf.update(
            volcano_api_url=sqlite_server.url,
            volcano_anon_key=project.anon_key,
            volcano_service_key=project.service_key,
        )
        seen: list[tuple[int, bool]] = []

        def key(n: int) -> str:
            return f"direct:{n}"

        @app.task(base=LockedTask, bind=True, name="direct.job", lock_key=key)
        def job(self, n: int) -> int:
            seen.append((self.lock.lease.fencing_token, client.locks.get(self.lock.key).held))
            return n

        @app.task(base=LockedTask, bind=True, name="direct.fail", lock_key=key, lock_on_held="fail")
        def failing(self, n: int) -> int:
            return n

        @app.task(
            base=LockedTask, bind=True, name="direct.retry", lock_key=key, lock_on_held="retry"
        )
        def retrying(self, n: int) -> int:
            return n

        @app.task(base=LockedTask, bind=True, name="direct.lost", lock_key=key, lock_ttl=1)
        def losing(self, n: int) -> None:
            client.locks.force_release(self.lock.key)
            assert self.lock.wait_lost(timeout=30)
            self.lock.check()

        task_lock_held.connect(on_held, weak=False)
        task_lock_lost.connect(on_lost, weak=False)
        try:
            assert job(1) == 1
            assert job.apply((2,)).get() == 2
            assert seen == [(1, True), (1, True)]  # two keys (1 and 2), each first granted
            assert not client.locks.get("direct:1").held
            client.locks.acquire("direct:3", ttl=30)
            assert job(3) is None
            with pytest.raises(volcano.LockHeldError):
                failing(3)
            with pytest.raises(volcano.LockHeldError):
                retrying(3)
            assert seen == [(1, True), (1, True)]
            assert held == [("direct:3", "skip"), ("direct:3", "fail"), ("direct:3", "retry")]
            with pytest.raises(volcano.LockLostError):
                losing(5)
            assert lost == [("direct:5", "LeaseNotHeldError")]
        finally:
            task_lock_held.disconnect(on_held)
            task_lock_lost.disconnect(on_lost)
            volcano_client(app).close()
