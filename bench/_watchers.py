"""1,000 watchers of one key on one server: its memory and threads, and how long a change takes
to reach the last of them.

One `volcano-server` child process (SQLite, and PostgreSQL when it is reachable) and, in this
process, 1,000 watchers of one key, each a chain of long polls
(`GET /v1/locks/{key}?after_version=V&wait_seconds=50`) on a connection of its own, parked on
the server, costing it no thread. The server's RSS and threads are read from /proc before the
watchers come and while they are parked. Then the key changes `changes` times (acquire,
release, ...), and for each change: the time from just before its request was sent to the
first, the median and the last watcher hearing of it.

Two kinds of watcher client, one run each:
- "raw": a minimal HTTP/1.1 client on asyncio streams, so the figures are the server's (this
  one process still reads all 1,000 answers, which the last figure includes);
- "sdk": one `volcano.AsyncClient` with 1,000 `client.locks.watch(key)` iterators on one httpx
  connection pool, as an application would write it.

    python -m bench._watchers [--watchers 1000] [--changes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx

import volcano
from tests.support.server import ServerProcess

from ._contention import _process_status
from ._servers import Keys, fresh_database, make_keys, postgres_available

KEY = "watched"
POLL_SECONDS = 50


class Heard:
    """What every watcher heard: (version, when) each, and who has heard of which version."""

    def __init__(self, watchers: int) -> None:
        self.watchers = watchers
        self.times: list[list[tuple[int, float]]] = [[] for _ in range(watchers)]
        self._counts: dict[int, int] = {}
        self._waiting: dict[int, asyncio.Event] = {}
        self.refusals = 0  # answers other than 200 (raw watchers; the SDK retries by itself)

    def note(self, index: int, version: int) -> None:
        self.times[index].append((version, time.monotonic()))
        self._counts[version] = self._counts.get(version, 0) + 1
        for after, event in self._waiting.items():
            if sum(n for v, n in self._counts.items() if v > after) >= self.watchers:
                event.set()

    async def all_past(self, version: int) -> None:
        """Return once every watcher has heard of a version above `version`."""
        event = self._waiting.setdefault(version, asyncio.Event())
        self.note_nothing()
        async with asyncio.timeout(300):
            await event.wait()

    def note_nothing(self) -> None:
        for after, event in self._waiting.items():
            if sum(n for v, n in self._counts.items() if v > after) >= self.watchers:
                event.set()

    def delays(self, version: int, sent: float) -> list[float]:
        return sorted(next(t for v, t in h if v > version) - sent for h in self.times)


async def _raw_watcher(url: str, keys: Keys, index: int, heard: Heard) -> None:
    """Long polls on one connection, parsed by hand (HTTP/1.1, Content-Length bodies)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = f"Host: {parts.netloc}\r\napikey: {keys.anon}\r\nAuthorization: Bearer {keys.service}"
    version: int | None = None
    try:
        while True:
            query = "" if version is None else f"?after_version={version}&wait_seconds=50"
            writer.write(f"GET /v1/locks/{KEY}{query} HTTP/1.1\r\n{head}\r\n\r\n".encode())
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            length = next(
                int(line.split(":", 1)[1])
                for line in lines
                if line.lower().startswith("content-length:")
            )
            state = json.loads(await reader.readexactly(length))
            if not lines[0].startswith("HTTP/1.1 200"):  # overloaded (503, 429): as the SDK does
                heard.refusals += 1
                await asyncio.sleep(0.2)
                continue
            if state["version"] != version:
                version = state["version"]
                heard.note(index, version)
    finally:
        writer.close()


async def _sdk_watchers(client: volcano.AsyncClient, heard: Heard) -> list[asyncio.Task[None]]:
    async def follow(index: int) -> None:
        async for state in client.locks.watch(KEY):
            heard.note(index, state.version)

    return [asyncio.create_task(follow(index)) for index in range(heard.watchers)]


@contextlib.contextmanager
def _server(backend: str, watchers: int) -> Iterator[tuple[ServerProcess, Keys]]:
    with fresh_database(backend) as database:
        keys = make_keys(database)
        share = str(watchers * 2)
        with ServerProcess(database, "--no-access-log", "--max-waiters-per-project", share) as s:
            yield s, keys


async def _measure(
    server: ServerProcess,
    client: volcano.AsyncClient,
    heard: Heard,
    start: Callable[[], Awaitable[list[asyncio.Task[None]]]],
    changes: int,
) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    before = _process_status(pid)
    began = time.monotonic()
    tasks = await start()
    await heard.all_past(-1)
    joined = time.monotonic() - began
    await asyncio.sleep(1.0)  # every second poll parked; a heartbeat passes
    during = _process_status(pid)
    latencies = []
    lease: volcano.LockLease | None = None
    for number in range(changes):
        version = (await client.locks.get(KEY)).version
        sent = time.monotonic()
        if lease is None:
            lease = await client.locks.acquire(KEY, ttl=60, label=f"change-{number}")
        else:
            await client.locks.release(KEY, lease)
            lease = None
        await heard.all_past(version)
        delays = heard.delays(version, sent)
        latencies.append(
            {"first": delays[0], "median": statistics.median(delays), "last": delays[-1]}
        )
        await asyncio.sleep(0.5)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "watchers": heard.watchers,
        "seconds_to_join": joined,
        "rss_mb_before": before["rss_kb"] / 1024,
        "rss_mb_with_watchers": during["rss_kb"] / 1024,
        "rss_kb_per_watcher": (during["rss_kb"] - before["rss_kb"]) / heard.watchers,
        "threads_before": before["threads"],
        "threads_with_watchers": during["threads"],
        "refused_answers": heard.refusals,
        "change_to_first_ms": 1000 * statistics.median(x["first"] for x in latencies),
        "change_to_median_ms": 1000 * statistics.median(x["median"] for x in latencies),
        "change_to_last_ms": 1000 * statistics.median(x["last"] for x in latencies),
        "change_to_last_ms_max": 1000 * max(x["last"] for x in latencies),
        "changes": latencies,
    }


def many_watchers(
    watchers: int = 1000, changes: int = 5, backend: str = "sqlite", kind: str = "raw"
) -> dict[str, Any]:
    """The server's cost of `watchers` parked watches, and how fast `changes` reach them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < watchers * 2 + 100:  # the server (a child) inherits it; both ends hold sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, watchers * 4 + 1000), hard))

    async def measured() -> dict[str, Any]:
        with _server(backend, watchers) as (server, keys):
            limits = httpx.Limits(max_connections=watchers + 20)
            async with (
                httpx.AsyncClient(limits=limits) as http,
                volcano.AsyncClient(
                    anon_key=keys.anon, service_key=keys.service, api_url=server.url,
                    http_client=http,
                ) as client,
            ):  # fmt: skip
                heard = Heard(watchers)

                async def start() -> list[asyncio.Task[None]]:
                    if kind == "sdk":
                        return await _sdk_watchers(client, heard)
                    return [
                        asyncio.create_task(_raw_watcher(server.url, keys, index, heard))
                        for index in range(watchers)
                    ]

                return await _measure(server, client, heard, start, changes)

    return asyncio.run(measured())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._watchers")
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=5)
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    backends = ["sqlite", "postgres"] if postgres_available() else ["sqlite"]
    result: dict[str, Any] = {"load_average_before": os.getloadavg()}
    for backend in backends:
        for kind in ("raw", "sdk"):
            print(f"... {options.watchers} {kind} watchers on one server ({backend})", flush=True)
            figures = many_watchers(options.watchers, options.changes, backend, kind)
            result[f"{backend}/{kind}"] = figures
            print(json.dumps({k: v for k, v in figures.items() if k != "changes"}), flush=True)
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
