"""The measured workloads: one acquire+release cycle (or its floor) repeated for a while.

Every workload runs in a worker process of its own, so client processes never share a GIL with
each other or with the servers. Each returns cycles per second over its timed window, after a
short warm-up; several workers start together at an agreed wall-clock instant.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import attrs

WARMUP_SECONDS = 0.3


@attrs.frozen
class Job:
    """One worker's share of one measurement."""

    variant: str
    urls: tuple[str, ...]
    anon: str = attrs.field(repr=False)
    service: str = attrs.field(repr=False)
    seconds: float
    worker: int
    start_at: float  # time.time() at which timing starts in every worker


_cpu_per_cycle = [0.0]
"""The CPU seconds (user + system, this process) per cycle of the last timed window."""


def run_job(job: Job) -> float:
    """Cycles per second of `job.variant` (runs in a worker process)."""
    runner = VARIANTS[job.variant]
    return runner(job)


def run_job_with_cpu(job: Job) -> tuple[float, float]:
    """Cycles per second of `job.variant`, and the client's CPU seconds per cycle."""
    rate = run_job(job)
    return rate, _cpu_per_cycle[0]


def _timed(job: Job, cycle: Callable[[int], None]) -> float:
    warm_until = time.perf_counter() + WARMUP_SECONDS
    n = 0
    while time.perf_counter() < warm_until:
        cycle(n)
        n += 1
    time.sleep(max(0.0, job.start_at - time.time()))
    count = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + job.seconds
    while True:
        cycle(count)
        count += 1
        now = time.perf_counter()
        if now >= deadline:
            _cpu_per_cycle[0] = (time.process_time() - cpu) / count
            return count / (now - started)


async def _timed_async(job: Job, cycle: Callable[[int], Any]) -> float:
    warm_until = time.perf_counter() + WARMUP_SECONDS
    n = 0
    while time.perf_counter() < warm_until:
        await cycle(n)
        n += 1
    await asyncio.sleep(max(0.0, job.start_at - time.time()))
    count = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + job.seconds
    while True:
        await cycle(count)
        count += 1
        now = time.perf_counter()
        if now >= deadline:
            _cpu_per_cycle[0] = (time.process_time() - cpu) / count
            return count / (now - started)


def _key(job: Job) -> str:
    return f"bench-{job.worker}-{job.variant}-{uuid.uuid4().hex[:6]}"


def _sdk_headers(job: Job) -> dict[str, str]:
    import volcano

    return {
        "apikey": job.anon,
        "Authorization": f"Bearer {job.service}",
        "User-Agent": f"volcano-python/{volcano.__version__}",
    }


def healthz(job: Job) -> float:
    """The HTTP floor: two GET /healthz per cycle with a bare httpx.Client."""
    import httpx

    clients = [httpx.Client(base_url=url) for url in job.urls]

    def cycle(n: int) -> None:
        client = clients[n % len(clients)]
        client.get("/healthz")
        client.get("/healthz")

    try:
        return _timed(job, cycle)
    finally:
        for client in clients:
            client.close()


def raw_httpx(job: Job) -> float:
    """acquire + release sent with a bare httpx.Client: the SDK's headers and bodies."""
    import httpx

    clients = [httpx.Client(base_url=url, headers=_sdk_headers(job)) for url in job.urls]
    key = _key(job)

    def cycle(n: int) -> None:
        client = clients[n % len(clients)]
        owner = str(uuid.uuid4())
        response = client.post(
            f"/v1/locks/{key}/acquire",
            json={"owner_token": owner, "ttl_seconds": 30},
            headers={"X-Request-Id": str(uuid.uuid4())},
        )
        fence = response.json()["fencing_token"]
        released = client.post(
            f"/v1/locks/{key}/release",
            json={"owner_token": owner, "fencing_token": fence},
            headers={"X-Request-Id": str(uuid.uuid4())},
        )
        if released.status_code != 204:
            raise RuntimeError(f"release answered {released.status_code}")

    try:
        return _timed(job, cycle)
    finally:
        for client in clients:
            client.close()


def sdk(job: Job, *, plain: bool = False) -> float:
    """acquire + release with volcano.Client (`plain`: given a plain httpx.Client, as a caller's
    own client is: httpx's transport, through its `send`)."""
    import httpx

    import volcano

    clients = [
        volcano.Client(
            anon_key=job.anon,
            service_key=job.service,
            api_url=url,
            http_client=httpx.Client() if plain else None,
        )
        for url in job.urls
    ]
    key = _key(job)

    def cycle(n: int) -> None:
        locks = clients[n % len(clients)].locks
        lease = locks.acquire(key, ttl=30)
        locks.release(key, lease)

    try:
        return _timed(job, cycle)
    finally:
        for client in clients:
            client.close()


def raw_httpx_async(job: Job) -> float:
    """acquire + release sent with a bare httpx.AsyncClient."""
    import httpx

    async def main() -> float:
        clients = [httpx.AsyncClient(base_url=url, headers=_sdk_headers(job)) for url in job.urls]
        key = _key(job)

        async def cycle(n: int) -> None:
            client = clients[n % len(clients)]
            owner = str(uuid.uuid4())
            response = await client.post(
                f"/v1/locks/{key}/acquire",
                json={"owner_token": owner, "ttl_seconds": 30},
                headers={"X-Request-Id": str(uuid.uuid4())},
            )
            fence = response.json()["fencing_token"]
            released = await client.post(
                f"/v1/locks/{key}/release",
                json={"owner_token": owner, "fencing_token": fence},
                headers={"X-Request-Id": str(uuid.uuid4())},
            )
            if released.status_code != 204:
                raise RuntimeError(f"release answered {released.status_code}")

        try:
            return await _timed_async(job, cycle)
        finally:
            for client in clients:
                await client.aclose()

    return asyncio.run(main())


def sdk_async(job: Job, *, plain: bool = False) -> float:
    """acquire + release with volcano.AsyncClient (`plain`: see `sdk`)."""
    import httpx

    import volcano

    async def main() -> float:
        clients = [
            volcano.AsyncClient(
                anon_key=job.anon,
                service_key=job.service,
                api_url=url,
                http_client=httpx.AsyncClient() if plain else None,
            )
            for url in job.urls
        ]
        key = _key(job)

        async def cycle(n: int) -> None:
            locks = clients[n % len(clients)].locks
            lease = await locks.acquire(key, ttl=30)
            await locks.release(key, lease)

        try:
            return await _timed_async(job, cycle)
        finally:
            for client in clients:
                await client.close()

    return asyncio.run(main())


def raw_http_client(job: Job) -> float:
    """acquire + release with the standard library's http.client: the floor of Python HTTP."""
    connections = []
    for url in job.urls:
        parts = urlsplit(url)
        connections.append(http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port))
    headers = {**_sdk_headers(job), "Content-Type": "application/json"}
    key = _key(job)

    def post(
        conn: http.client.HTTPConnection, path: str, body: dict[str, Any]
    ) -> tuple[int, bytes]:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={**headers, "X-Request-Id": str(uuid.uuid4())},
        )
        response = conn.getresponse()
        return response.status, response.read()

    def cycle(n: int) -> None:
        conn = connections[n % len(connections)]
        owner = str(uuid.uuid4())
        _, body = post(conn, f"/v1/locks/{key}/acquire", {"owner_token": owner, "ttl_seconds": 30})
        fence = json.loads(body)["fencing_token"]
        status, _ = post(
            conn, f"/v1/locks/{key}/release", {"owner_token": owner, "fencing_token": fence}
        )
        if status != 204:
            raise RuntimeError(f"release answered {status}")

    try:
        return _timed(job, cycle)
    finally:
        for conn in connections:
            conn.close()


def kazoo_lock(job: Job) -> float:
    """kazoo's Lock acquire + release on the ZooKeeper at `job.urls[0]` (host:port): the peer
    client of the peers section (bench/_durable.py)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=job.urls[0], timeout=30)
    client.start(timeout=30)
    lock = client.Lock(f"/bench/{_key(job)}", f"worker-{job.worker}")

    def cycle(_: int) -> None:
        if not lock.acquire(timeout=10):
            raise RuntimeError("the kazoo lock was held")
        lock.release()

    try:
        return _timed(job, cycle)
    finally:
        client.stop()
        client.close()


def redis_lock(job: Job) -> float:
    """redis-py's Lock acquire + release against the local Redis (127.0.0.1:6379)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    name = _key(job)

    def cycle(_: int) -> None:
        lock = client.lock(name, timeout=30)
        if not lock.acquire(blocking=False):
            raise RuntimeError("redis lock was held")
        lock.release()

    try:
        return _timed(job, cycle)
    finally:
        client.close()


VARIANTS: dict[str, Callable[[Job], float]] = {
    "healthz": healthz,
    "raw_httpx": raw_httpx,
    "sdk": sdk,
    "raw_httpx_async": raw_httpx_async,
    "sdk_async": sdk_async,
    "sdk_plain_httpx": lambda job: sdk(job, plain=True),
    "sdk_async_plain_httpx": lambda job: sdk_async(job, plain=True),
    "raw_http_client": raw_http_client,
    "kazoo_lock": kazoo_lock,
    "redis": redis_lock,
}
