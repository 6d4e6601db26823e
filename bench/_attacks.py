"""The attacks of issues 11 and 20, each a function run in an attacker process of its own.

Every attack runs against `127.0.0.1:port` until `seconds` pass, then stops by itself, and
counts what happened into a dict it returns (answers by status, connections cut, ...). Many
sockets at once are driven by asyncio; a handful by threads.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import resource
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["ATTACKS", "Attack"]

Counts = collections.Counter[str]
Run = Callable[[Counts], Coroutine[Any, Any, None]]  # one client's part, counting outcomes
Attack = Callable[[int, float, dict[str, str]], dict[str, int]]

UNFINISHED_BODY = b"POST /v1/locks/k/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
FORGED_PATH = b"GET /v1/locks/a%0Aforged%0D%1b[31m HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
NO_KEYS = b"GET /v1/locks/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


def status_of(answer: bytes) -> str:
    """The status of the first answer in `answer`, or "no answer" (closed without one)."""
    return answer[9:12].decode("latin-1") if answer.startswith(b"HTTP/1.1 ") else "no answer"


class Tally:
    """Counts kept by many threads at once."""

    def __init__(self) -> None:
        self._counts: Counts = collections.Counter()
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def issue_11(port: int, seconds: float, _keys: dict[str, str]) -> dict[str, int]:
    """200 slowloris connections (half a head, a line now and then), ten 50 MB headers, 20
    silent or unfinished requests and log-forging paths, each resent whenever cut."""
    stop = threading.Event()
    counts = Tally()

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)

    def slowloris() -> None:
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(PARTIAL_HEAD)
                    while not stop.wait(1.0):
                        sock.sendall(b"x-a: b\r\n")
            except OSError:
                counts.add("slowloris cut")
                stop.wait(0.05)

    def huge_head() -> None:
        chunk = b"a" * 65_536
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(b"GET /v1/locks/k HTTP/1.1\r\nHost: x\r\napikey: ")
                    for _ in range(800):  # 50 MB
                        if stop.is_set():
                            break
                        sock.sendall(chunk)
            except OSError:
                counts.add("huge head cut")

    def silent_or_unfinished(slot: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError), connect() as sock:
                if slot % 2:
                    sock.sendall(UNFINISHED_BODY)
                sock.recv(1024)  # until the server answers 408 or closes
            counts.add("silent or unfinished")

    def forged_path() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError), connect() as sock:
                sock.sendall(FORGED_PATH)
                sock.recv(4096)
            counts.add("forged")
            stop.wait(0.01)

    workers = [slowloris] * 200 + [huge_head] * 10 + [forged_path] * 2
    threads = [threading.Thread(target=work, daemon=True) for work in workers]
    threads += [
        threading.Thread(target=silent_or_unfinished, args=(n,), daemon=True) for n in range(20)
    ]
    _run_threads(threads, seconds, stop)
    return counts.snapshot()


def b1_pipelining(port: int, seconds: float, _keys: dict[str, str]) -> dict[str, int]:
    """Ten connections each sending 50,000 pipelined GET /healthz (1.8 MB) at once and never
    reading an answer; each is opened again when the server cuts it."""
    stop = threading.Event()
    counts = Tally()
    flood = HEALTHZ * 50_000

    def pipeline() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
                    sock.sendall(flood)
                    counts.add("sent whole")
                    while not stop.wait(0.5):  # never read; wait for the server to cut it
                        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                            counts.add("reset by the server")
                            break
            except OSError:
                counts.add("cut while sending")
            stop.wait(0.1)

    threads = [threading.Thread(target=pipeline, daemon=True) for _ in range(10)]
    _run_threads(threads, seconds, stop)
    return counts.snapshot()


def b2_header_fields(port: int, seconds: float, _keys: dict[str, str]) -> dict[str, int]:
    """100 connections each sending, again and again, GET /healthz with 3,150 header fields of
    `a:b` (15.8 KB, under the 16 KiB head cap), reading each answer."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"a:b\r\n" * 3_150 + b"\r\n"

    async def one(counts: Counts) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                writer.write(request)
                answer = await reader.read(4096)
                counts[status_of(answer)] += 1
                if not answer or b"connection: close" in answer:
                    return
        finally:
            writer.close()

    return _run_async(lambda counts: _repeat(one, counts), 100, seconds)


def b3_one_projects_waiters(port: int, seconds: float, keys: dict[str, str]) -> dict[str, int]:
    """One project (the attacker's keys) holds a key and opens 10,600 waiting acquires on it,
    each on a connection of its own; a waiter whose request ends asks again 10 s later."""
    key = f"contested-{uuid.uuid4().hex[:8]}"
    credentials = f"apikey: {keys['apikey']}\r\nAuthorization: {keys['Authorization']}\r\n"

    def acquire(wait: float, ttl: float) -> bytes:
        body = json.dumps(
            {"owner_token": str(uuid.uuid4()), "ttl_seconds": ttl, "wait_seconds": wait}
        ).encode()
        head = (
            f"POST /v1/locks/{key}/acquire HTTP/1.1\r\nHost: x\r\n{credentials}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(acquire(0, 3_600))  # held for the whole attack: every waiter waits
        counts: Counts = collections.Counter({"holder " + status_of(sock.recv(4096)): 1})

    async def one(counts: Counts) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(acquire(60, 30))
            counts[status_of(await reader.read(4096))] += 1
        finally:
            writer.close()
        await asyncio.sleep(10)

    counts.update(_run_async(lambda c: _repeat(one, c), 10_600, seconds, ramp=2.0))
    return dict(counts)


def b5_bursts(port: int, seconds: float, _keys: dict[str, str]) -> dict[str, int]:
    """At the start 3,000 connections send half a head at once (their 408s all fall due
    together, 10 s later); and every 3 s, a burst of 3,000 connections each asking once."""

    async def half_head(counts: Counts) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(PARTIAL_HEAD)
            counts["half head, " + status_of(await reader.read(4096))] += 1
        finally:
            writer.close()

    async def asks_once(counts: Counts) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(NO_KEYS)
            counts["burst, " + status_of(await reader.read(4096))] += 1
        finally:
            writer.close()

    async def attack(counts: Counts) -> None:
        stops = asyncio.get_running_loop().time() + seconds
        await _all(half_head, 3_000, counts)  # runs alongside: launched, not awaited
        while asyncio.get_running_loop().time() < stops:
            await asyncio.sleep(3)
            await _all(asks_once, 3_000, counts)

    return _run_main(attack, seconds)


def b6_held_then_bursts(port: int, seconds: float, _keys: dict[str, str]) -> dict[str, int]:
    """10,000 connections held open (half a head, a line every 2 s, reopened half a second
    after being cut), then every 3 s a burst of 1,500 connections asking once."""

    async def held(counts: Counts) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def trickle() -> None:
            while True:
                await asyncio.sleep(2)
                writer.write(b"x-a: b\r\n")

        writer.write(PARTIAL_HEAD)
        keep_going = asyncio.ensure_future(trickle())
        try:
            # No wait_for around the read: on 3.11 it can drop a result that races its timeout.
            counts["held, " + status_of(await reader.read(4096))] += 1
        finally:
            keep_going.cancel()
            writer.close()
        await asyncio.sleep(0.5)

    async def asks_once(counts: Counts) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            counts["burst, not connected"] += 1
            return
        try:
            writer.write(NO_KEYS)
            async with asyncio.timeout(10):
                answer = await reader.read(4096)
            counts["burst, " + (status_of(answer) if answer else "closed unanswered")] += 1
        except TimeoutError:
            counts["burst, no answer in 10 s"] += 1
        except OSError:
            counts["burst, reset unanswered"] += 1
        finally:
            writer.close()

    async def attack(counts: Counts) -> None:
        stops = asyncio.get_running_loop().time() + seconds
        for _ in range(10_000):
            _start(_repeat(held, counts, stops))
        await asyncio.sleep(5)  # let them fill the server first
        while asyncio.get_running_loop().time() < stops:
            await _all(asks_once, 1_500, counts)
            await asyncio.sleep(3)

    return _run_main(attack, seconds)


ATTACKS: dict[str, Attack] = {
    "issue 11": issue_11,
    "B1 pipelining": b1_pipelining,
    "B2 header fields": b2_header_fields,
    "B3 one project's waiters": b3_one_projects_waiters,
    "B5 bursts": b5_bursts,
    "B6 held, then bursts": b6_held_then_bursts,
}


# -- running -----------------------------------------------------------------------------

_running: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def _start(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)


def _run_threads(threads: list[threading.Thread], seconds: float, stop: threading.Event) -> None:
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    done = time.monotonic() + 5  # then the process exits, daemon threads and all
    for thread in threads:
        thread.join(timeout=max(0.0, done - time.monotonic()))


async def _repeat(one: Run, counts: Counts, stops: float | None = None) -> None:
    """Run `one` again and again (until `stops`, loop time), counting its failures."""
    loop = asyncio.get_running_loop()
    while stops is None or loop.time() < stops:
        try:
            await one(counts)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            counts[type(exc).__name__] += 1
            await asyncio.sleep(0.5)


async def _all(one: Run, count: int, counts: Counts) -> None:
    """Start `count` runs of `one` at once (not waited for)."""

    async def counted() -> None:
        try:
            await one(counts)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            counts[type(exc).__name__] += 1

    for _ in range(count):
        _start(counted())


def _run_async(many: Run, count: int, seconds: float, ramp: float = 0.0) -> dict[str, int]:
    """`count` copies of `many` at once (spread over `ramp` seconds), for `seconds`."""

    async def attack(counts: Counts) -> None:
        for n in range(count):
            _start(many(counts))
            if ramp and n % 100 == 99:
                await asyncio.sleep(ramp * 100 / count)

    return _run_main(attack, seconds)


def _run_main(attack: Run, seconds: float) -> dict[str, int]:
    counts: Counts = collections.Counter()

    async def main() -> None:
        _start(attack(counts))
        await asyncio.sleep(seconds)

    asyncio.run(main())  # cancels what is still under way
    return dict(counts)


def run(name: str, port: int, seconds: float, keys: dict[str, str], out: Any) -> None:
    """The attacker process: run attack `name`, put its counts on `out`."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 11,500 sockets for B6
    out.put(ATTACKS[name](port, seconds, keys))
