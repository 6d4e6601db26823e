"""One tenant never costs another its lease (issue 33): each attack beside legitimate load.

    python -m bench._isolation [--backend sqlite postgres] [--only ATTACK ...] [--seconds 20]
                               [--base CHECKOUT] [--out DIR]

For each backend and attack (and once with none), a fresh database and a server of this checkout
(and of `CHECKOUT` too when given: the code before a change, made with `git worktree add
--detach`), run with default limits and a private listener. Three projects share it:

- the victim: 16 `with_lock` guards (8 with ttl 3 s, 8 with ttl 5 s) held from before the attack
  to its end, through the SDK of this checkout, in a process of its own; a guard that is lost
  counts, and takes its lock again;
- a bystander: acquire and release in a loop, on a new connection each time (a cron job's
  pattern), in a thread of the measuring process, timed;
- the attacker: a process of its own running the attack with the attacker project's keys (what
  it needs is prepared before the victim starts: 20 semaphore keys of 1,000 holders each, with
  200-character labels, for the B1 attacks).

and a prober asks GET /healthz on a new connection every 100 ms on both listeners. Reported: the
victim's lost guards and the statuses of its requests that were not 2xx, the bystander's acquire
p50/p99/max and failures, the probes' p99 (max) and failures, the server's RSS (start, peak,
end), the attacker's statuses, and the load average. Prints a Markdown table and writes DIR/
isolation.json. Everything stays on loopback and stops by itself; not part of CI (about a
minute per attack, backend and checkout; the B1 attacks' 20,000 holders take longer to make).

The issue's goals: the victim loses 0 leases in every attack; /healthz p99 under 300 ms; the
bystander's acquire p99 under 300 ms; RSS growth under 100 MB; the attacker sees 429s, never
the victim.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import queue
import re
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx

from tests.support.server import ServerProcess

from ._servers import Keys, fresh_database
from ._soak import Latencies, Memory, Prober

FAT_KEYS = 20
HOLDERS = 1_000
LABEL = "x" * 200


# -- the attacks --------------------------------------------------------------------------------


@attrs.frozen
class Prepared:
    """What an attack set up before the victim starts: the fat keys' holders, by key."""

    holders: dict[str, list[tuple[str, int]]] = attrs.field(factory=dict)  # key -> (owner, token)
    own: list[tuple[str, str, int]] = attrs.field(factory=list)  # (key, owner, token)


def _credentials(keys: dict[str, str]) -> str:
    return f"apikey: {keys['apikey']}\r\nAuthorization: {keys['Authorization']}\r\n"


def _request(method: str, path: str, keys: dict[str, str], body: bytes | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n{_credentials(keys)}"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode("latin-1") + (body or b"")


async def _exchange(
    port: int, request: bytes, counts: collections.Counter[str], seconds: float = 60
) -> bytes:
    """Send `request` on a new connection, read the whole answer, count its status."""
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = head[9:12].decode("latin-1")
                match = re.search(rb"(?i)content-length: (\d+)", head)
                body = await reader.readexactly(int(match.group(1))) if match else b""
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        counts[type(exc).__name__] += 1
        return b""
    counts[status] += 1
    return body


def _fill_fat_keys(url: str, keys: dict[str, str], count: int = FAT_KEYS) -> Prepared:
    """`count` semaphore keys, each with HOLDERS holders labelled with 200 characters."""
    prepared = Prepared()
    jobs = [(f"fat-{k:02d}", n) for k in range(count) for n in range(HOLDERS)]

    def acquire(job: tuple[str, int]) -> tuple[str, str, int]:
        key, _ = job
        owner = str(uuid.uuid4())
        body = {"owner_token": owner, "ttl_seconds": 3600, "limit": HOLDERS, "label": LABEL}
        for _ in range(5):
            with contextlib.suppress(httpx.HTTPError):
                answer = local.http.post(f"/v1/locks/{key}/acquire", json=body)
                if answer.status_code == 200:
                    return key, owner, answer.json()["fencing_token"]
            time.sleep(0.5)
        raise RuntimeError(f"could not fill {key}")

    local = threading.local()

    def init() -> None:
        local.http = httpx.Client(base_url=url, headers=keys, timeout=60)

    with concurrent.futures.ThreadPoolExecutor(8, initializer=init) as pool:
        for key, owner, token in pool.map(acquire, jobs):
            prepared.holders.setdefault(key, []).append((owner, token))
    return prepared


def _own_leases(url: str, keys: dict[str, str], count: int = 500) -> Prepared:
    prepared = Prepared()
    with httpx.Client(base_url=url, headers=keys, timeout=60) as http:
        for n in range(count):
            owner = str(uuid.uuid4())
            body = {"owner_token": owner, "ttl_seconds": 3600}
            answer = http.post(f"/v1/locks/own-{n:04d}/acquire", json=body)
            prepared.own.append((f"own-{n:04d}", owner, answer.json()["fencing_token"]))
    return prepared


def _in_bursts(
    port: int, seconds: float, size: int, make: Callable[[int], bytes], pause: float = 0.0
) -> dict[str, int]:
    """Bursts of `size` requests at once, one burst after the other, for `seconds`."""
    counts: collections.Counter[str] = collections.Counter()

    async def main() -> None:
        stops = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < stops:
            await asyncio.gather(*(_exchange(port, make(n), counts) for n in range(size)))
            counts["bursts"] += 1
            await asyncio.sleep(pause)

    with contextlib.suppress(TimeoutError):
        asyncio.run(asyncio.wait_for(main(), seconds + 30))
    return dict(counts)


def list_burst(port: int, seconds: float, keys: dict[str, str], _p: Prepared) -> dict[str, int]:
    """Bursts of 100 list requests (pages of 500) over the fat keys, one after the other."""
    request = _request("GET", "/v1/locks?limit=500", keys)
    return _in_bursts(port, seconds, 100, lambda _n: request)


def list_steady(port: int, seconds: float, keys: dict[str, str], _p: Prepared) -> dict[str, int]:
    """Three list requests (pages of 500) over the fat keys a second."""
    request = _request("GET", "/v1/locks?limit=500", keys)
    return _in_bursts(port, seconds, 3, lambda _n: request, pause=1.0)


def _fat_batch(keys: dict[str, str], prepared: Prepared, n: int) -> bytes:
    entries = []
    for k, (key, holders) in enumerate(sorted(prepared.holders.items())):
        for owner, token in holders[(n + k) % 40 * 25 :][:25]:
            entries.append(
                {"key": key, "owner_token": owner, "fencing_token": token, "ttl_seconds": 3600}
            )
    body = json.dumps({"leases": entries[:500]}).encode()
    return _request("POST", "/v1/leases/renew", keys, body)


def batch_burst(port: int, seconds: float, keys: dict[str, str], p: Prepared) -> dict[str, int]:
    """Bursts of 100 batch renewals, each of 500 real holders of the fat keys."""
    batches = [_fat_batch(keys, p, n) for n in range(100)]
    return _in_bursts(port, seconds, 100, lambda n: batches[n])


def ordinary_batches(
    port: int, seconds: float, keys: dict[str, str], p: Prepared
) -> dict[str, int]:
    """Bursts of 250 batch renewals of the attacker's own 500 plain leases."""
    entries = [
        {"key": key, "owner_token": owner, "fencing_token": token, "ttl_seconds": 3600}
        for key, owner, token in p.own
    ]
    request = _request("POST", "/v1/leases/renew", keys, json.dumps({"leases": entries}).encode())
    return _in_bursts(port, seconds, 250, lambda _n: request)


def fat_watchers(port: int, seconds: float, keys: dict[str, str], p: Prepared) -> dict[str, int]:
    """1,000 watchers of one fat key, and a label change on it every 2 s."""
    key, holders = sorted(p.holders.items())[0]
    owner, token = holders[0]
    counts: collections.Counter[str] = collections.Counter()

    async def watcher(stops: float) -> None:
        version = 0
        while asyncio.get_running_loop().time() < stops:
            path = f"/v1/locks/{key}?after_version={version}&wait_seconds=30"
            body = await _exchange(port, _request("GET", path, keys), counts)
            with contextlib.suppress(ValueError, KeyError):
                version = json.loads(body)["version"]

    async def relabel(stops: float) -> None:
        n = 0
        while asyncio.get_running_loop().time() < stops:
            await asyncio.sleep(2)
            n += 1
            body = {"owner_token": owner, "fencing_token": token, "ttl_seconds": 3600}
            body["label"] = f"{n:06d}" + LABEL[6:]
            request = _request("POST", f"/v1/locks/{key}/renew", keys, json.dumps(body).encode())
            await _exchange(port, request, counts)
            counts["label changes"] += 1

    async def main() -> None:
        stops = asyncio.get_running_loop().time() + seconds
        await asyncio.gather(relabel(stops), *(watcher(stops) for _ in range(1_000)))

    with contextlib.suppress(TimeoutError):
        asyncio.run(asyncio.wait_for(main(), seconds + 35))
    return dict(counts)


def keyless_connections(
    port: int, seconds: float, _keys: dict[str, str], _p: Prepared
) -> dict[str, int]:
    """10,000 kept-alive connections without keys, each asking GET /healthz every 10 s."""
    counts: collections.Counter[str] = collections.Counter()
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

    async def one(stops: float) -> None:
        while asyncio.get_running_loop().time() < stops:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError as exc:
                counts[type(exc).__name__] += 1
                await asyncio.sleep(1)
                continue
            try:
                while asyncio.get_running_loop().time() < stops:
                    writer.write(request)
                    head = await reader.readuntil(b"\r\n\r\n")
                    counts[head[9:12].decode("latin-1")] += 1
                    match = re.search(rb"(?i)content-length: (\d+)", head)
                    await reader.readexactly(int(match.group(1)) if match else 0)
                    if b"connection: close" in head.lower():
                        counts["closed by the server"] += 1
                        break
                    await asyncio.sleep(10)
            except (OSError, asyncio.IncompleteReadError) as exc:
                counts[type(exc).__name__] += 1
            finally:
                writer.close()
            await asyncio.sleep(0.5)

    async def main() -> None:
        stops = asyncio.get_running_loop().time() + seconds
        tasks = []
        for n in range(10_000):
            tasks.append(asyncio.ensure_future(one(stops)))
            if n % 500 == 499:
                await asyncio.sleep(0.05)
        await asyncio.gather(*tasks)

    with contextlib.suppress(TimeoutError):
        asyncio.run(asyncio.wait_for(main(), seconds + 30))
    return dict(counts)


def surrogates(port: int, seconds: float, keys: dict[str, str], _p: Prepared) -> dict[str, int]:
    """Four connections sending acquires whose field name is a lone surrogate (and a newline)."""
    bodies = [b'{"\\ud800": 1}', b'{"\\ud800\\n2026-01-01 00:00:00,000 INFO forged": 1}']
    requests = [_request("POST", "/v1/locks/k/acquire", keys, body) for body in bodies]
    counts: collections.Counter[str] = collections.Counter()

    async def one(n: int, stops: float) -> None:
        while asyncio.get_running_loop().time() < stops:
            await _exchange(port, requests[n % 2], counts, seconds=10)

    async def main() -> None:
        stops = asyncio.get_running_loop().time() + seconds
        await asyncio.gather(*(one(n, stops) for n in range(4)))

    asyncio.run(main())
    return dict(counts)


def key_churn(port: int, seconds: float, keys: dict[str, str], _p: Prepared) -> dict[str, int]:
    """New keys as fast as four connections make them (ttl 0.1 s), beside four listers."""
    counts: collections.Counter[str] = collections.Counter()

    async def maker(stops: float) -> None:
        while asyncio.get_running_loop().time() < stops:
            body = json.dumps({"owner_token": str(uuid.uuid4()), "ttl_seconds": 0.1}).encode()
            path = f"/v1/locks/churn-{uuid.uuid4().hex}/acquire"
            await _exchange(port, _request("POST", path, keys, body), counts, seconds=10)

    async def lister(stops: float) -> None:
        request = _request("GET", "/v1/locks?limit=500", keys)
        while asyncio.get_running_loop().time() < stops:
            await _exchange(port, request, counts, seconds=30)

    async def main() -> None:
        stops = asyncio.get_running_loop().time() + seconds
        await asyncio.gather(*(maker(stops) for _ in range(4)), *(lister(stops) for _ in range(4)))

    asyncio.run(main())
    return dict(counts)


@attrs.frozen
class Attack:
    run: Callable[[int, float, dict[str, str], Prepared], dict[str, int]]
    prepare: Callable[[str, dict[str, str]], Prepared] | None = None


ATTACKS: dict[str, Attack] = {
    "B1 list burst": Attack(list_burst, _fill_fat_keys),
    "B1 batch burst": Attack(batch_burst, _fill_fat_keys),
    "B1 ordinary batches": Attack(ordinary_batches, _own_leases),
    "B1 steady lists": Attack(list_steady, _fill_fat_keys),
    "B1' fat watchers": Attack(fat_watchers, lambda url, keys: _fill_fat_keys(url, keys, 1)),
    "B2 keyless connections": Attack(keyless_connections),
    "B3/B4 surrogates": Attack(surrogates),
    "B7 key churn": Attack(key_churn),
}


def _attacker(name: str, port: int, seconds: float, keys: dict[str, str], p: Prepared, out: Any):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out.put(ATTACKS[name].run(port, seconds, keys, p))


# -- the legitimate load ------------------------------------------------------------------------


def _victim(url: str, keys: Keys, started: Any, stop: Any, out: Any) -> None:
    """16 guards (ttl 3 s and 5 s) held until `stop`; each lost one counted and taken again."""
    import volcano

    statuses: collections.Counter[str] = collections.Counter()
    lost: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def count(response: httpx.Response) -> None:
        if response.status_code >= 300:
            with lock:
                statuses[str(response.status_code)] += 1

    http = httpx.Client(timeout=30, event_hooks={"response": [count]})
    client = volcano.Client(
        anon_key=keys.anon, service_key=keys.service, api_url=url, http_client=http
    )
    ready = threading.Barrier(17)

    def hold(n: int) -> None:
        ttl = 3 if n < 8 else 5
        first = True
        while not stop.is_set():
            try:
                with client.locks.with_lock(f"victim-{n}", ttl=ttl, wait=30) as guard:
                    if first:
                        first = False
                        ready.wait()
                    while not stop.is_set() and not guard.wait_lost(timeout=0.2):
                        pass
                    if guard.lost:
                        with lock:
                            lost[f"ttl {ttl}"] += 1
            except volcano.Error as exc:
                with lock:
                    statuses[type(exc).__name__] += 1
                time.sleep(0.2)

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    ready.wait()
    started.set()
    for thread in threads:
        thread.join()
    client.close()
    out.put({"lost": dict(lost), "statuses": dict(statuses)})


class Bystander:
    """Acquire and release in a loop, each cycle on a new connection, timed."""

    def __init__(self, url: str, keys: Keys) -> None:
        self._url, self._keys = url, keys
        self._stop = threading.Event()
        self.seconds: list[float] = []
        self.failures: collections.Counter[str] = collections.Counter()
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> tuple[Latencies, dict[str, int]]:
        self._stop.set()
        self._thread.join()
        return Latencies.of(self.seconds, sum(self.failures.values())), dict(self.failures)

    def _run(self) -> None:
        key = f"bystander-{uuid.uuid4().hex[:6]}"
        while not self._stop.wait(0.05):
            owner = str(uuid.uuid4())
            try:
                with httpx.Client(
                    base_url=self._url, headers=self._keys.headers(), timeout=30
                ) as http:
                    started = time.perf_counter()
                    body = {"owner_token": owner, "ttl_seconds": 30}
                    lease = http.post(f"/v1/locks/{key}/acquire", json=body)
                    self.seconds.append(time.perf_counter() - started)
                    if lease.status_code != 200:
                        self.failures[f"{lease.status_code} {_code(lease)}"] += 1
                        continue
                    held = {"owner_token": owner, "fencing_token": lease.json()["fencing_token"]}
                    release = http.post(f"/v1/locks/{key}/release", json=held)
                    if release.status_code != 204:
                        self.failures[f"release {release.status_code}"] += 1
            except httpx.HTTPError as exc:
                self.failures[type(exc).__name__] += 1


def _code(answer: httpx.Response) -> str:
    """The error code and message of an error answer in the API's shape, else its first bytes."""
    try:
        error = answer.json()["error"]
        return f"{error['code']}: {error['message'][:60]}"
    except (ValueError, KeyError, TypeError):
        return repr(answer.content[:40])


# -- one run ------------------------------------------------------------------------------------


def _keys(checkout: Path, database_url: str) -> Keys:
    """A new project's keys, made by `checkout`'s own command (its schema, its migrations)."""
    made = subprocess.run(
        [sys.executable, "-m", "volcano_server", "keys", "create", "--db", database_url,
         "--project", f"bench-{uuid.uuid4().hex[:8]}"],
        capture_output=True, text=True, check=True, cwd=checkout, timeout=60,
    )  # fmt: skip
    found = dict(re.findall(r"(VOLCANO_\w+_KEY)=(\S+)", made.stdout + made.stderr))
    return Keys(found["VOLCANO_ANON_KEY"], found["VOLCANO_SERVICE_KEY"])


@contextlib.contextmanager
def _server(checkout: Path, database_url: str) -> Iterator[tuple[ServerProcess, int]]:
    server = ServerProcess(database_url, "--no-access-log", "--metrics-port", "0", cwd=checkout)
    server.start()
    try:
        private = re.search(r"metrics on http://[^:]+:(\d+)/metrics", server.log)
        assert private is not None, server.log
        yield server, int(private.group(1))
    finally:
        server.kill()


def run_one(checkout: Path, backend: str, attack: str | None, seconds: float) -> dict[str, Any]:
    """One run: the victim, the bystander and the probes for `seconds`, beside `attack`."""
    with fresh_database(backend) as database_url:
        victim_keys, bystander_keys, attacker_keys = (
            _keys(checkout, database_url) for _ in range(3)
        )
        with _server(checkout, database_url) as (server, private_port):
            assert server.process is not None
            prepared = Prepared()
            if attack is not None and ATTACKS[attack].prepare is not None:
                prepare = ATTACKS[attack].prepare
                assert prepare is not None
                prepared = prepare(server.url, attacker_keys.headers())
            memory = Memory(server.process.pid)
            log_before = len(server.log)
            ctx = multiprocessing.get_context("spawn")
            started, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
            victim = ctx.Process(
                target=_victim, args=(server.url, victim_keys, started, stop, results)
            )
            victim.start()
            started.wait(timeout=60)
            counts: Any = ctx.Queue()
            attacker = None
            if attack is not None:
                attacker = ctx.Process(
                    target=_attacker,
                    args=(attack, server.port, seconds, attacker_keys.headers(), prepared, counts),
                    daemon=True,
                )
                attacker.start()
            bystander = Bystander(server.url, bystander_keys)
            bystander.start()
            prober = Prober(server.port, private_port)
            prober.start()
            time.sleep(seconds)
            acquires, failures = bystander.stop()
            probes, private_probes = prober.stop()
            stop.set()
            attack_counts: dict[str, int] = {}
            if attacker is not None:
                try:
                    attack_counts = counts.get(timeout=90)
                except queue.Empty:
                    attack_counts = {"the attacker reported nothing": 1}
                attacker.join(timeout=10)
                if attacker.is_alive():
                    attacker.kill()
            try:
                victim_result = results.get(timeout=60)
            except queue.Empty:
                victim_result = {"lost": {"the victim reported nothing": 1}, "statuses": {}}
            victim.join(timeout=10)
            rss = memory.stop()
            return {
                "backend": backend,
                "attack": attack or "none",
                "checkout": str(checkout),
                "victim": victim_result,
                "bystander": attrs.asdict(acquires),
                "bystander_failures": failures,
                "probes": attrs.asdict(probes),
                "private_probes": attrs.asdict(private_probes),
                "rss_mb": rss,
                "log_bytes": len(server.log) - log_before,
                "attack_counts": attack_counts,
                "load": round(os.getloadavg()[0], 1),
            }


def table(runs: list[dict[str, Any]], names: dict[str, str]) -> str:
    head = (
        "| backend | attack | code | victim lost | victim non-2xx | bystander acquire p50 / p99"
        " (max), failed | probe p99 (max), failed | private probe p99 (max), failed | RSS MB"
        " start / peak / end | attacker's answers | load |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        a, p, q, rss = run["bystander"], run["probes"], run["private_probes"], run["rss_mb"]
        lost = sum(run["victim"]["lost"].values())
        answers = ", ".join(
            f"{k}: {v:,}" for k, v in sorted(run["attack_counts"].items()) if k != "bursts"
        )
        lines.append(
            f"| {run['backend']} | {run['attack']} | {names[run['checkout']]} | {lost}"
            f" | {run['victim']['statuses'] or 0} | {a['p50']:,} / {a['p99']:,} ({a['max']:,.0f})"
            f" ms, {a['failed']} | {p['p99']:,} ({p['max']:,.0f}) ms, {p['failed']} of"
            f" {p['count']} | {q['p99']:,} ({q['max']:,.0f}) ms, {q['failed']} of {q['count']}"
            f" | {rss['start']} / {rss['peak']} / {rss['end']} | {answers or '-'} | {run['load']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._isolation")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--backend", nargs="+", choices=("sqlite", "postgres"), default=["sqlite"])
    parser.add_argument("--only", nargs="+", choices=sorted(ATTACKS), metavar="ATTACK")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run with no attack")
    parser.add_argument("--base", type=Path, help="a checkout to run the same attacks against")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    checkouts = {str(here): "after" if args.base else "this"}
    if args.base:
        checkouts = {str(args.base.resolve()): "before", **checkouts}
    attacks: list[str | None] = [] if args.no_baseline else [None]
    attacks += args.only or list(ATTACKS)
    runs = []
    for backend in args.backend:
        for attack in attacks:
            for checkout in checkouts:
                run = run_one(Path(checkout), backend, attack, args.seconds)
                print(json.dumps(run), flush=True)
                runs.append(run)
    print(table(runs, checkouts))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "isolation.json").write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
