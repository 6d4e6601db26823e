"""Many with_lock guards in one process, one key's renewals slowed on purpose.

`python bench/_guards.py URL ANON SERVICE KIND COUNT TTL HOLD DELAY [SERVER_PID]` enters COUNT
guards (ttl TTL seconds) one after another on one `Client` (KIND "sync") or `AsyncClient`
("async"), holds them HOLD seconds, and prints one JSON object: losses, threads, CPU, and the
worst time any lease had left by the server's expiry (sampled each second while held). With
DELAY > 0 the renewals of key `guard-slow` wait DELAY seconds in the client's transport before
they are sent, as a slow network path to one key would make them: renewals that wait on each
other stall every guard. A batch of renewals (`POST /v1/leases/renew`) that names that key waits
with it, and so do the other leases it carries. With DELAY 0 there is no slow key.

With SERVER_PID (the server process, on this machine) it also reports the server's CPU over
the hold. Client and server CPU are divided by the leases renewed during the hold; the client's
own sampling (reading every guard once a second) is timed apart and left out.

Only the public API is used, and nothing of this repository is imported, so the same file
measures an older SDK too: run it by path with that SDK first on `PYTHONPATH`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import sys
import threading
import time
from typing import Any

import httpx

import volcano

SLOW_KEY = "guard-slow"
SLOW_MARK = f'"{SLOW_KEY}"'.encode()
SAMPLE_EVERY = 1.0
BATCH_PATH = "/v1/leases/renew"


class _Counting:
    """Counts requests and renewals, and picks out those of SLOW_KEY, to hold them back."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        self.renew_requests = 0
        self.renewals = 0
        self.slowed = 0
        self._lock = threading.Lock()

    def note(self, request: httpx.Request) -> bool:
        """Count `request`; True when it is to be held back."""
        path = request.url.path
        renewals, slow = 0, False
        if path == BATCH_PATH:
            renewals = len(json.loads(request.content)["leases"])
            slow = self.delay > 0 and SLOW_MARK in request.content
        elif path.endswith("/renew"):
            renewals = 1
            slow = self.delay > 0 and path.endswith(f"/{SLOW_KEY}/renew")
        with self._lock:
            self.requests += 1
            self.renew_requests += renewals > 0
            self.renewals += renewals
            self.slowed += slow
        return slow

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.requests, self.renew_requests, self.renewals


class SlowTransport(httpx.HTTPTransport):
    def __init__(self, counting: _Counting) -> None:
        super().__init__()
        self.counting = counting

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.counting.note(request):
            time.sleep(self.counting.delay)
        return super().handle_request(request)


class AsyncSlowTransport(httpx.AsyncHTTPTransport):
    def __init__(self, counting: _Counting) -> None:
        super().__init__()
        self.counting = counting

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.counting.note(request):
            await asyncio.sleep(self.counting.delay)
        return await super().handle_async_request(request)


def server_cpu(pid: int | None) -> float:
    """Seconds of CPU the process `pid` has used (user + system, all threads); 0 without one."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Run:
    """One run's plan, and what it saw: entry time, samples while held, threads and CPU."""

    def __init__(
        self, kind: str, count: int, ttl: float, hold: float, delay: float, pid: int | None
    ) -> None:
        self.kind, self.count, self.ttl, self.hold = kind, count, ttl, hold
        self.server_pid = pid
        self.counting = _Counting(delay)
        self.threads_before = threading.active_count()
        self.started = time.monotonic()
        self.entered = self.held_from = self.cpu_from = self.server_from = 0.0
        self.counts_from = (0, 0, 0)
        self.sampling_cpu = 0.0
        self.worst_left = self.slow_worst_left = float("inf")
        self.lost_seen = self.samples = 0
        self.figures: dict[str, Any] = {}

    @property
    def slow(self) -> bool:
        return self.counting.delay > 0

    def lock_keys(self) -> list[str]:
        """The slow key first (when there is one), then the others."""
        if not self.slow:
            return [f"guard-{n}" for n in range(self.count)]
        return [SLOW_KEY, *(f"guard-{n}" for n in range(self.count - 1))]

    def all_entered(self) -> None:
        self.entered = time.monotonic() - self.started
        self.counts_from = self.counting.snapshot()
        self.server_from = server_cpu(self.server_pid)
        self.cpu_from, self.held_from = time.process_time(), time.monotonic()

    def holding(self) -> bool:
        return time.monotonic() - self.held_from < self.hold

    def sample(self, guards: list[Any]) -> None:
        """The least time any lease has left by the server's expiry, and how many are lost."""
        began = time.thread_time()
        now = time.time()
        others = guards[1:] if self.slow else guards
        self.worst_left = min(
            self.worst_left, min(g.lease.expires_at.timestamp() for g in others) - now
        )
        if self.slow:
            slow_left = guards[0].lease.expires_at.timestamp() - now
            self.slow_worst_left = min(self.slow_worst_left, slow_left)
        self.lost_seen = max(self.lost_seen, sum(g.lost for g in guards))
        self.samples += 1
        self.sampling_cpu += time.thread_time() - began

    def finish(self, guards: list[Any]) -> None:
        """Take the figures at the end of the hold, while every guard is still entered."""
        wall = time.monotonic() - self.held_from
        cpu = time.process_time() - self.cpu_from - self.sampling_cpu
        server = server_cpu(self.server_pid) - self.server_from
        requests, renew_requests, renewals = (
            now - then for now, then in zip(self.counting.snapshot(), self.counts_from, strict=True)
        )
        others = guards[1:] if self.slow else guards
        self.figures = {
            "kind": self.kind,
            "guards": self.count,
            "ttl_seconds": self.ttl,
            "slow_key_delay_seconds": self.counting.delay,
            "enter_seconds": self.entered,
            "held_seconds": wall,
            "lost_at_end": sum(g.lost for g in guards),
            "lost_besides_slow_key": sum(g.lost for g in others),
            "slow_key_lost": bool(self.slow and guards[0].lost),
            "most_lost_in_a_sample": self.lost_seen,
            "worst_seconds_left": self.worst_left,
            "slow_key_worst_seconds_left": self.slow_worst_left if self.slow else None,
            "samples": self.samples,
            "renewals": self.counting.renewals,
            "slow_key_requests": self.counting.slowed,
            "renewals_per_second": self.counting.renewals / (self.entered + wall),
            "held_requests_per_second": requests / wall,
            "held_renew_requests": renew_requests,
            "held_renewals": renewals,
            "held_renewals_per_second": renewals / wall,
            "threads_before": self.threads_before,
            "threads_during": threading.active_count(),
            "cpu_seconds": cpu,
            "sampling_cpu_seconds": self.sampling_cpu,
            "cpu_share_of_one_core": cpu / wall,
            "client_cpu_ms_per_renewal": 1000 * cpu / renewals if renewals else None,
            "server_cpu_seconds": server if self.server_pid else None,
            "server_cpu_ms_per_renewal": (
                1000 * server / renewals if renewals and self.server_pid else None
            ),
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }


def run_sync(run: Run, url: str, anon: str, service: str) -> None:
    http = httpx.Client(transport=SlowTransport(run.counting))
    client = volcano.Client(anon_key=anon, service_key=service, api_url=url, http_client=http)
    with client, http, contextlib.ExitStack() as stack:
        guards = [
            stack.enter_context(client.locks.with_lock(k, ttl=run.ttl)) for k in run.lock_keys()
        ]
        run.all_entered()
        while run.holding():
            time.sleep(SAMPLE_EVERY)
            run.sample(guards)
        run.finish(guards)


async def run_async(run: Run, url: str, anon: str, service: str) -> None:
    async with (
        httpx.AsyncClient(transport=AsyncSlowTransport(run.counting)) as http,
        volcano.AsyncClient(
            anon_key=anon, service_key=service, api_url=url, http_client=http
        ) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        guards = [
            await stack.enter_async_context(client.locks.with_lock(k, ttl=run.ttl))
            for k in run.lock_keys()
        ]
        run.all_entered()
        while run.holding():
            await asyncio.sleep(SAMPLE_EVERY)
            run.sample(guards)
        run.finish(guards)


def main() -> None:
    url, anon, service, kind = sys.argv[1:5]
    count, (ttl, hold, delay) = int(sys.argv[5]), map(float, sys.argv[6:9])
    pid = int(sys.argv[9]) if len(sys.argv) > 9 else None
    run = Run(kind, count, ttl, hold, delay, pid)
    if kind == "sync":
        run_sync(run, url, anon, service)
    else:
        asyncio.run(run_async(run, url, anon, service))
    print(json.dumps(run.figures))


if __name__ == "__main__":
    main()
