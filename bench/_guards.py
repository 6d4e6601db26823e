"""Many with_lock guards in one process, one key's renewals slowed on purpose.

`python -m bench._guards URL ANON SERVICE KIND COUNT TTL HOLD DELAY` enters COUNT guards (ttl
TTL seconds) one after another on one `Client` (KIND "sync") or `AsyncClient` ("async"), holds
them HOLD seconds, and prints one JSON object: losses, threads, CPU, and the worst time any
lease had left by the server's expiry (sampled each second while held). The renewals of key
`guard-slow` wait DELAY seconds in the client's transport before they are sent, as a slow
network path to one key would make them: renewals that wait on each other stall every guard.

Only the public API is used, so the same file measures an older SDK too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
import threading
import time
from typing import Any

import httpx

import volcano

SLOW_KEY = "guard-slow"
SAMPLE_EVERY = 1.0


class _Counting:
    """Counts renewals and picks out those of SLOW_KEY, to hold them back."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.renewals = 0
        self.slowed = 0
        self._lock = threading.Lock()

    def note(self, request: httpx.Request) -> bool:
        """Count `request`; True when it is to be held back."""
        if not request.url.path.endswith("/renew"):
            return False
        slow = request.url.path.endswith(f"/{SLOW_KEY}/renew")
        with self._lock:
            self.renewals += 1
            self.slowed += slow
        return slow


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


class Run:
    """One run's plan, and what it saw: entry time, samples while held, threads and CPU."""

    def __init__(self, kind: str, count: int, ttl: float, hold: float, delay: float) -> None:
        self.kind, self.count, self.ttl, self.hold = kind, count, ttl, hold
        self.counting = _Counting(delay)
        self.threads_before = threading.active_count()
        self.started = time.monotonic()
        self.entered = self.held_from = self.cpu_from = 0.0
        self.worst_left = self.slow_worst_left = float("inf")
        self.lost_seen = self.samples = 0
        self.figures: dict[str, Any] = {}

    def lock_keys(self) -> list[str]:
        """The slow key first, then the others."""
        return [SLOW_KEY, *(f"guard-{n}" for n in range(self.count - 1))]

    def all_entered(self) -> None:
        self.entered = time.monotonic() - self.started
        self.cpu_from, self.held_from = time.process_time(), time.monotonic()

    def holding(self) -> bool:
        return time.monotonic() - self.held_from < self.hold

    def sample(self, guards: list[Any]) -> None:
        """The least time any lease has left by the server's expiry, and how many are lost."""
        now = time.time()
        slow, others = guards[0], guards[1:]
        self.worst_left = min(
            self.worst_left, min(g.lease.expires_at.timestamp() for g in others) - now
        )
        self.slow_worst_left = min(self.slow_worst_left, slow.lease.expires_at.timestamp() - now)
        self.lost_seen = max(self.lost_seen, sum(g.lost for g in guards))
        self.samples += 1

    def finish(self, guards: list[Any]) -> None:
        """Take the figures at the end of the hold, while every guard is still entered."""
        wall = time.monotonic() - self.held_from
        cpu = time.process_time() - self.cpu_from
        self.figures = {
            "kind": self.kind,
            "guards": self.count,
            "ttl_seconds": self.ttl,
            "slow_key_delay_seconds": self.counting.delay,
            "enter_seconds": self.entered,
            "held_seconds": wall,
            "lost_at_end": sum(g.lost for g in guards),
            "most_lost_in_a_sample": self.lost_seen,
            "worst_seconds_left": self.worst_left,
            "slow_key_worst_seconds_left": self.slow_worst_left,
            "samples": self.samples,
            "renewals": self.counting.renewals,
            "slow_key_renewals": self.counting.slowed,
            "renewals_per_second": self.counting.renewals / (self.entered + wall),
            "threads_before": self.threads_before,
            "threads_during": threading.active_count(),
            "cpu_seconds": cpu,
            "cpu_share_of_one_core": cpu / wall,
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
    run = Run(kind, int(sys.argv[5]), *map(float, sys.argv[6:9]))
    if kind == "sync":
        run_sync(run, url, anon, service)
    else:
        asyncio.run(run_async(run, url, anon, service))
    print(json.dumps(run.figures))


if __name__ == "__main__":
    main()
