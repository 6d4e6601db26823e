"""Contention: N worker processes looping acquire / hold / release on one key, per lock system.

Systems, measured in one run side by side (`SYSTEMS`):
- `volcano_wait`: the SDK's `acquire(wait=)` against the reference server (the server's queue
  hands the lock over);
- `volcano_poll_10ms`: what a user had to write before waiting existed: acquire, sleep 10 ms
  on LockHeldError, try again;
- `redis_py_lock`: redis-py's `Lock` (blocking, polls every 0.1 s) on the local Redis;
- `python_redis_lock`: python-redis-lock (wakes waiters with BLPOP) on the local Redis;
- `pg_advisory_lock`: PostgreSQL session advisory locks on the local PostgreSQL.

And for semaphores (a key with `limit` holders; bench/_semaphore.py runs them):
- `volcano_semaphore`: the SDK's `acquire(limit=, wait=)`;
- `kazoo_semaphore`: kazoo's `Semaphore(max_leases=)` on a local ZooKeeper (bench/_peers.py).

And for shared locks (readers and writers on one key; bench/_shared.py runs them), each worker
a reader or a writer by its job's `shared`:
- `volcano_rw`: the SDK's `acquire(shared=, wait=)`;
- `kazoo_rw`: kazoo's `ReadLock` / `WriteLock` on a local ZooKeeper.

Each worker notes, by CLOCK_MONOTONIC (one clock for every process on the machine), when it
asked, when it got the lock and when it began to release it. From those: grants per second;
handoff (from a holder beginning its release to the next holder having the lock; with `limit`
N, from the release that freed a slot to the grant that took it) p50 and p99; the longest and
the mean wait for the lock; grants per worker and their spread.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

SYSTEMS = (
    "volcano_wait",
    "volcano_poll_10ms",
    "redis_py_lock",
    "python_redis_lock",
    "pg_advisory_lock",
)


@attrs.frozen
class Job:
    """One worker's part of a run."""

    system: str
    worker: int
    key: str
    hold: float
    start_at: float  # monotonic
    end_at: float  # monotonic
    url: str = ""  # the Volcano server this worker talks to
    anon: str = attrs.field(default="", repr=False)
    service: str = attrs.field(default="", repr=False)
    postgres_url: str = ""
    limit: int = 1  # holders at once (the semaphores)
    peer: str = ""  # host:port of the peer server (ZooKeeper)
    shared: bool = False  # a reader (the shared locks), else a writer


# (asked, granted, release began), monotonic seconds
Event = tuple[float, float, float]


def run_job(job: Job) -> list[Event]:
    """Loop acquire / hold / release until `job.end_at`; the events of every grant."""
    with _SESSIONS[job.system](job) as session:
        acquire, release = session
        events: list[Event] = []
        _sleep_until(job.start_at)
        while True:
            asked = time.monotonic()
            left = job.end_at - asked
            if left <= 0 or not acquire(left):
                return events
            granted = time.monotonic()
            if job.hold:
                _sleep_until(granted + job.hold)
            releasing = time.monotonic()
            release()
            events.append((asked, granted, releasing))


def _sleep_until(instant: float) -> None:
    while (left := instant - time.monotonic()) > 0:
        time.sleep(min(left, 0.0005) if left < 0.002 else left - 0.001)


Session = tuple[Callable[[float], bool], Callable[[], None]]


@contextlib.contextmanager
def _volcano(job: Job, *, poll: float | None) -> Iterator[Session]:
    import volcano

    with volcano.Client(anon_key=job.anon, service_key=job.service, api_url=job.url) as client:
        lease: list[volcano.LockLease] = []

        def acquire(left: float) -> bool:
            if poll is None:
                try:
                    lease.append(client.locks.acquire(job.key, ttl=30, wait=left))
                except volcano.LockHeldError:
                    return False
                return True
            end = time.monotonic() + left
            while time.monotonic() < end:
                try:
                    lease.append(client.locks.acquire(job.key, ttl=30))
                except volcano.LockHeldError:
                    time.sleep(poll)
                else:
                    return True
            return False

        def release() -> None:
            client.locks.release(job.key, lease.pop())

        client.locks.get(job.key)  # connect and load the generated client before the start
        yield acquire, release


@contextlib.contextmanager
def _volcano_semaphore(job: Job) -> Iterator[Session]:
    import volcano

    with volcano.Client(anon_key=job.anon, service_key=job.service, api_url=job.url) as client:
        lease: list[volcano.LockLease] = []

        def acquire(left: float) -> bool:
            try:
                lease.append(client.locks.acquire(job.key, ttl=30, limit=job.limit, wait=left))
            except volcano.LockHeldError:
                return False
            return True

        def release() -> None:
            client.locks.release(job.key, lease.pop())

        client.locks.get(job.key)  # connect and load the generated client before the start
        yield acquire, release


@contextlib.contextmanager
def _volcano_rw(job: Job) -> Iterator[Session]:
    import volcano

    with volcano.Client(anon_key=job.anon, service_key=job.service, api_url=job.url) as client:
        lease: list[volcano.LockLease] = []

        def acquire(left: float) -> bool:
            try:
                lease.append(client.locks.acquire(job.key, ttl=30, shared=job.shared, wait=left))
            except volcano.LockHeldError:
                return False
            return True

        def release() -> None:
            client.locks.release(job.key, lease.pop())

        client.locks.get(job.key)  # connect and load the generated client before the start
        yield acquire, release


@contextlib.contextmanager
def _kazoo_rw(job: Job) -> Iterator[Session]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout

    client = KazooClient(hosts=job.peer, timeout=30)
    client.start(timeout=30)
    try:
        recipe = client.ReadLock if job.shared else client.WriteLock
        lock = recipe(f"/bench/{job.key}", f"worker-{job.worker}")

        def acquire(left: float) -> bool:
            try:
                return bool(lock.acquire(timeout=left))
            except LockTimeout:
                return False

        client.ensure_path("/bench")  # connected and warm before the start
        yield acquire, lock.release
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _kazoo_semaphore(job: Job) -> Iterator[Session]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout

    client = KazooClient(hosts=job.peer, timeout=30)
    client.start(timeout=30)
    try:
        semaphore = client.Semaphore(f"/bench/{job.key}", max_leases=job.limit)

        def acquire(left: float) -> bool:
            try:
                return bool(semaphore.acquire(timeout=left))
            except LockTimeout:
                return False

        client.ensure_path("/bench")  # connected and warm before the start
        yield acquire, semaphore.release
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _redis_py(job: Job) -> Iterator[Session]:
    import redis

    with redis.Redis() as connection:
        lock = connection.lock(f"bench:{job.key}", timeout=30)
        connection.ping()
        yield (lambda left: bool(lock.acquire(blocking_timeout=left))), lock.release


@contextlib.contextmanager
def _python_redis_lock(job: Job) -> Iterator[Session]:
    import redis
    import redis_lock

    with redis.Redis() as connection:
        lock = redis_lock.Lock(connection, f"bench:{job.key}", expire=30)
        connection.ping()
        yield (lambda left: bool(lock.acquire(timeout=max(1, math.ceil(left))))), lock.release


@contextlib.contextmanager
def _pg_advisory(job: Job) -> Iterator[Session]:
    import psycopg

    with psycopg.connect(job.postgres_url, autocommit=True) as conn:
        # The same number in every worker process (str hashes are salted per process).
        number = int.from_bytes(hashlib.sha256(job.key.encode()).digest()[:8], "big") >> 1

        def acquire(left: float) -> bool:
            conn.execute(f"SET lock_timeout = {max(1, round(left * 1000))}")
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (number,))
            except psycopg.errors.LockNotAvailable:
                return False
            return True

        def release() -> None:
            conn.execute("SELECT pg_advisory_unlock(%s)", (number,))

        yield acquire, release


@contextlib.contextmanager
def _kazoo_lock(job: Job) -> Iterator[Session]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout

    client = KazooClient(hosts=job.peer, timeout=30)
    client.start(timeout=30)
    try:
        lock = client.Lock(f"/bench/{job.key}", f"worker-{job.worker}")

        def acquire(left: float) -> bool:
            try:
                return bool(lock.acquire(timeout=left))
            except LockTimeout:
                return False

        client.ensure_path("/bench")  # connected and warm before the start
        yield acquire, lock.release
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _etcd_lock(job: Job) -> Iterator[Session]:
    """etcd's lock service over its v3 JSON gateway: one lease per worker (a session, as etcd's
    own clients keep), then per grant `/v3/lock/lock` (a key put under the lease, waiting for
    every key of lower revision to go) and `/v3/lock/unlock` (the key deleted)."""
    import base64

    import httpx

    name = base64.b64encode(f"/bench/{job.key}".encode()).decode()
    with httpx.Client(base_url=f"http://{job.peer}", timeout=30) as http:
        # 60 s: longer than any run, so no keepalive is needed while one lasts.
        lease = http.post("/v3/lease/grant", json={"TTL": 60}).json()["ID"]
        held: list[str] = []

        def acquire(left: float) -> bool:
            try:
                answer = http.post(
                    "/v3/lock/lock", json={"name": name, "lease": lease}, timeout=left
                )
            except httpx.TimeoutException:
                return False
            answer.raise_for_status()
            held.append(answer.json()["key"])
            return True

        def release() -> None:
            http.post("/v3/lock/unlock", json={"key": held.pop()}).raise_for_status()

        try:
            yield acquire, release
        finally:
            with contextlib.suppress(httpx.HTTPError):  # its keys go with it
                http.post("/v3/lease/revoke", json={"ID": lease})


_SESSIONS: dict[str, Callable[[Job], contextlib.AbstractContextManager[Session]]] = {
    "volcano_wait": lambda job: _volcano(job, poll=None),
    "volcano_poll_10ms": lambda job: _volcano(job, poll=0.01),
    "redis_py_lock": _redis_py,
    "python_redis_lock": _python_redis_lock,
    "pg_advisory_lock": _pg_advisory,
    "volcano_semaphore": _volcano_semaphore,
    "kazoo_semaphore": _kazoo_semaphore,
    "volcano_rw": _volcano_rw,
    "kazoo_rw": _kazoo_rw,
    "kazoo_lock": _kazoo_lock,
    "etcd_lock": _etcd_lock,
}


@attrs.frozen
class Figures:
    """What one run of one system showed."""

    grants_per_s: float
    handoff_p50_ms: float
    handoff_p99_ms: float
    longest_wait_ms: float
    mean_wait_ms: float
    grants_per_worker: tuple[int, ...]
    out_of_order: float = 0.0
    """The share of grants that went to a request asked after another that was still waiting
    (0: first asked, first served)."""
    out_of_order_5ms: float = 0.0
    """The same, counting only requests asked more than 5 ms before: what is left once the
    order among requests that reach a busy server together (which it reads in any order) is
    set aside."""

    @property
    def spread(self) -> float:
        """(most - fewest) grants of a worker, over the mean: 0 is perfectly even."""
        counts = self.grants_per_worker
        mean = statistics.fmean(counts)
        return (max(counts) - min(counts)) / mean if mean else math.inf

    @classmethod
    def of(cls, per_worker: Sequence[list[Event]], seconds: float, limit: int = 1) -> Figures:
        """The figures of a run; with `limit` N, grant i (in time order) took the slot that
        release i-N freed (no more than N are ever held, so that release came first)."""
        grants = sorted(granted for events in per_worker for _, granted, _ in events)
        releases = sorted(released for events in per_worker for _, _, released in events)
        handoffs = [
            (granted - freed) * 1000
            for granted, freed in zip(grants[limit:], releases, strict=False)
        ]
        waits = [(granted - asked) * 1000 for events in per_worker for asked, granted, _ in events]
        requests = [(asked, granted) for events in per_worker for asked, granted, _ in events]
        return cls(
            grants_per_s=len(grants) / seconds,
            handoff_p50_ms=_percentile(handoffs, 50),
            handoff_p99_ms=_percentile(handoffs, 99),
            longest_wait_ms=max(waits, default=math.nan),
            mean_wait_ms=statistics.fmean(waits) if waits else math.nan,
            grants_per_worker=tuple(len(events) for events in per_worker),
            out_of_order=_out_of_order(requests),
            out_of_order_5ms=_out_of_order(requests, slack=0.005),
        )


def _out_of_order(requests: Sequence[tuple[float, float]], slack: float = 0.0) -> float:
    """The share of (asked, granted) requests granted while one asked more than `slack` seconds
    earlier still waited."""
    if not requests:
        return math.nan
    asked_in_grant_order = [asked for asked, _ in sorted(requests, key=lambda r: r[1])]
    overtaking, earliest_later = 0, math.inf  # the earliest ask among those granted later
    for asked in reversed(asked_in_grant_order):
        overtaking += earliest_later < asked - slack
        earliest_later = min(earliest_later, asked)
    return overtaking / len(requests)


def _percentile(values: Sequence[float], percent: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


class Pool:
    """Worker processes, spawned once (no state inherited)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))

    def run(
        self,
        make: Callable[[int, float, float], Job],
        workers: int,
        seconds: float,
        limit: int = 1,
        head_start: float = 1.5,
    ) -> Figures:
        per_worker = self.events(make, workers, seconds, head_start)
        return Figures.of(per_worker, seconds, limit)

    def events(
        self,
        make: Callable[[int, float, float], Job],
        workers: int,
        seconds: float,
        head_start: float = 1.5,
    ) -> list[list[Event]]:
        """Each worker's events of one run of the jobs `make` gives."""
        start_at = time.monotonic() + head_start  # every worker connected and warm first
        jobs = [make(worker, start_at, start_at + seconds) for worker in range(workers)]
        return list(self._pool.map(run_job, jobs))

    def close(self) -> None:
        self._pool.shutdown()


def run_system(
    pool: Pool,
    system: str,
    workers: int,
    hold: float,
    seconds: float,
    *,
    urls: Sequence[str] = (),
    anon: str = "",
    service: str = "",
    postgres_url: str = "",
    limit: int = 1,
    peer: str = "",
    head_start: float = 1.5,
) -> Figures:
    """One run of `workers` processes of `system` on a fresh key (with `limit` holders at
    once); with several Volcano servers, workers take turns among them."""
    key = f"contended-{uuid.uuid4().hex[:8]}"

    def make(worker: int, start_at: float, end_at: float) -> Job:
        return Job(
            system,
            worker,
            key,
            hold,
            start_at,
            end_at,
            url=urls[worker % len(urls)] if urls else "",
            anon=anon,
            service=service,
            postgres_url=postgres_url,
            limit=limit,
            peer=peer,
        )

    return pool.run(make, workers, seconds, limit, head_start)


def as_dict(figures: Figures) -> dict[str, Any]:
    """The figures, with the spread, for results.json."""
    return {**attrs.asdict(figures), "spread": figures.spread}


def queued_waiters(count: int) -> dict[str, float]:
    """A server's memory and threads with `count` requests waiting in one key's queue."""
    import asyncio
    import resource
    import tempfile

    import httpx

    from tests.support.databases import queued
    from tests.support.server import ServerProcess, create_project

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count * 2 + 100:  # the server (a child) inherits it, and both ends hold sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count * 4 + 1000), hard))
    with tempfile.TemporaryDirectory(prefix="volcano-bench-") as directory:
        database = f"sqlite:///{Path(directory) / 'waiters.db'}"
        project = create_project(database, "waiters")
        with ServerProcess(database, "--no-access-log") as server:
            assert server.process is not None
            pid = server.process.pid
            headers = project.headers()
            with httpx.Client(base_url=server.url, headers=headers) as http:
                held = http.post(
                    "/v1/locks/k/acquire",
                    json={"owner_token": str(uuid.uuid4()), "ttl_seconds": 600},
                )
                held.raise_for_status()
            before = _process_status(pid)

            async def fill_and_leave() -> tuple[dict[str, float], float]:
                limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
                async with httpx.AsyncClient(
                    base_url=server.url, headers=headers, limits=limits, timeout=120
                ) as http:
                    started = time.monotonic()
                    tasks = [
                        asyncio.create_task(
                            http.post(
                                "/v1/locks/k/acquire",
                                json={
                                    "owner_token": str(uuid.uuid4()),
                                    "ttl_seconds": 30,
                                    "wait_seconds": 60,
                                },
                            )
                        )
                        for _ in range(count)
                    ]
                    for _ in range(1200):  # at most a minute
                        if queued(database, "k") >= count:
                            break
                        await asyncio.sleep(0.05)
                    joined = time.monotonic() - started
                    await asyncio.sleep(1.0)  # settle, and let a heartbeat pass
                    during = _process_status(pid)
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                return during, joined

            during, joined = asyncio.run(fill_and_leave())
            for _ in range(200):
                if queued(database, "k") == 0:
                    break
                time.sleep(0.05)
            left = queued(database, "k")
            after = _process_status(pid)
    return {
        "waiters": count,
        "seconds_to_queue_all": joined,
        "rss_mb_before": before["rss_kb"] / 1024,
        "rss_mb_with_waiters": during["rss_kb"] / 1024,
        "rss_kb_per_waiter": (during["rss_kb"] - before["rss_kb"]) / count,
        "rss_mb_after_they_left": after["rss_kb"] / 1024,
        "threads_before": before["threads"],
        "threads_with_waiters": during["threads"],
        "still_queued_after_they_left": left,
    }


def _process_status(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "Threads"):
            fields[name] = float(value.split()[0])
    return {"rss_kb": fields["VmRSS"], "threads": fields["Threads"]}
