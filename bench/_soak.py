"""Legitimate load beside the attacks of issues 11 and 20, on a fresh server per attack.

    python -m bench._soak [--seconds 20] [--clients 4] [--only ATTACK ...] [--base CHECKOUT]

For each attack of `bench._attacks` (and once with none), a fresh SQLite server with default
limits (`volcano-server serve`, run from this checkout, and from `CHECKOUT` too when given, e.g.
the code before a change made with `git worktree add --detach` or `git archive`) serves
`--clients` threads cycling acquire, renew, get, release and GET /healthz, each on its own
kept-alive connection, while a prober asks GET /healthz on a new connection every 100 ms (what a
supervisor does), on the API's port and on the private listener (`--metrics-port`), and an
attacker process runs the attack. The clients connect before the attack starts (as a service's
pooled clients would), except one that connects anew for every cycle, and are measured from a
few seconds into it.

Reported per run: the clients' requests, errors and latency (p50, p99, max), their /healthz
p99, the probes' p99 and failures (no answer, or not 200) on each port, the server's memory (RSS
at the start, at its peak and at the end), the connections the kernel dropped for a full
accept queue (a system-wide counter), the load average and the attack's own counts. B6 runs
its server with the open-files hard limit at 10,256 (what `--max-connections` 10,000 asked for
before issue 20), so descriptors can run out. Prints a Markdown table and writes
bench/results/soak.json. Everything stays on loopback and stops by itself; not part of CI
(about a minute per attack and checkout).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx

from tests.support.server import ServerProcess

from . import _attacks
from ._servers import Keys, make_keys

# Before each measured run: time for the attack to reach its full strength.
WARM_UP = {"B6 held, then bursts": 8.0}
# B6 lets the server raise its open-files limit to 10,256 and no further.
PREFIX = {"B6 held, then bursts": ("prlimit", "--nofile=1024:10256", "--")}


@attrs.frozen
class Latencies:
    """Latency percentiles (ms) of some requests, and how many failed."""

    count: int
    failed: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: list[float], failed: int) -> Latencies:
        ordered = sorted(seconds) or [float("nan")]

        def pct(p: float) -> float:
            return round(1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))], 1)

        return cls(len(seconds), failed, pct(0.50), pct(0.99), round(1000 * ordered[-1], 1))


class Clients:
    """`count` threads cycling acquire, renew, get, release and /healthz until stopped."""

    def __init__(self, url: str, keys: Keys, count: int) -> None:
        self._url, self._keys = url, keys
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.latencies: list[float] = []
        self.healthz: list[float] = []
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(count)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def measure(self) -> None:
        """Count from now on only."""
        with self._lock:
            self.latencies, self.healthz, self.errors = [], [], []

    def stop(self) -> tuple[Latencies, Latencies, list[str]]:
        """(all requests, /healthz alone, the kinds of error)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        health = Latencies.of(self.healthz, 0)
        return Latencies.of(self.latencies, len(self.errors)), health, sorted(set(self.errors))

    def _run(self, n: int) -> None:
        """Client 0 connects anew for every cycle; the others keep one connection."""
        key = f"soak-{n}-{uuid.uuid4().hex[:6]}"
        while not self._stop.is_set():
            with httpx.Client(base_url=self._url, headers=self._keys.headers(), timeout=30) as http:
                self._cycle(http, key)
                while n and not self._stop.is_set():
                    self._cycle(http, key)

    def _cycle(self, http: httpx.Client, key: str) -> None:
        owner = str(uuid.uuid4())
        body = {"owner_token": owner, "ttl_seconds": 30}
        lease = self._timed(http, "POST", f"/v1/locks/{key}/acquire", 200, json=body)
        if lease is not None and lease.status_code == 200:
            held = {"owner_token": owner, "fencing_token": lease.json()["fencing_token"]}
            renewal = {**held, "ttl_seconds": 30}
            self._timed(http, "POST", f"/v1/locks/{key}/renew", 200, json=renewal)
            self._timed(http, "GET", f"/v1/locks/{key}", 200)
            self._timed(http, "POST", f"/v1/locks/{key}/release", 204, json=held)
        self._timed(http, "GET", "/healthz", 200)

    def _timed(
        self, http: httpx.Client, method: str, path: str, expect: int, **kw: Any
    ) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            with self._lock:
                self.errors.append(type(exc).__name__)
            return None
        took = time.perf_counter() - started
        with self._lock:
            self.latencies.append(took)
            if path == "/healthz":
                self.healthz.append(took)
            if response.status_code != expect:
                self.errors.append(str(response.status_code))
        return response


class Prober:
    """GET /healthz on a new connection every 100 ms, as a supervisor would, on each port."""

    def __init__(self, *ports: int) -> None:
        self._ports = ports
        self._stop = threading.Event()
        self._seconds: dict[int, list[float]] = {port: [] for port in ports}
        self._failed = dict.fromkeys(ports, 0)
        self._threads = [threading.Thread(target=self._run, args=(port,)) for port in ports]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> list[Latencies]:
        """The probes' latencies, port by port."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        return [Latencies.of(self._seconds[port], self._failed[port]) for port in self._ports]

    def _run(self, port: int) -> None:
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        while not self._stop.wait(0.1):
            started = time.perf_counter()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    sock.sendall(request)
                    ok = sock.recv(64).startswith(b"HTTP/1.1 200")
            except OSError:
                ok = False
            self._seconds[port].append(time.perf_counter() - started)
            self._failed[port] += not ok


class Memory:
    """The server's resident memory, sampled every 200 ms."""

    def __init__(self, pid: int) -> None:
        self._status = Path(f"/proc/{pid}/status")
        self.start = self._rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        """RSS in MB: at the start, at its peak and now."""
        self._stop.set()
        self._thread.join()
        mb = 2**20
        return {
            "start": round(self.start / mb),
            "peak": round(self.peak / mb),
            "end": round(self._rss() / mb),
        }

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self._rss())

    def _rss(self) -> int:
        try:
            line = next(x for x in self._status.read_text().splitlines() if x.startswith("VmRSS"))
        except (OSError, StopIteration):
            return 0
        return int(line.split()[1]) * 1024


@contextmanager
def fresh_server(checkout: Path, attack: str | None) -> Iterator[tuple[ServerProcess, Keys, Keys]]:
    """A server of `checkout` on a fresh SQLite file; (server, clients' keys, attacker's)."""
    with tempfile.TemporaryDirectory(prefix="volcano-soak-") as directory:
        url = f"sqlite:///{Path(directory) / 'soak.db'}"
        clients, attacker = make_keys(url), make_keys(url)
        prefix = PREFIX.get(attack or "", ())
        options = ("--no-access-log", "--metrics-port", "0")
        server = ServerProcess(url, *options, cwd=checkout, prefix=prefix)
        server.start()
        try:
            yield server, clients, attacker
        finally:
            server.kill()


def listen_overflows() -> int:
    """Connections the kernel dropped so far because an accept queue was full (all sockets)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=True))["ListenOverflows"])
    return 0


def soak(checkout: Path, attack: str | None, seconds: float, clients: int) -> dict[str, Any]:
    """One run: the clients and the prober for `seconds`, beside `attack` (or none)."""
    overflows = listen_overflows()
    with fresh_server(checkout, attack) as (server, keys, attacker_keys):
        assert server.process is not None
        memory = Memory(server.process.pid)
        counts: Any = multiprocessing.Queue()
        load = Clients(server.url, keys, clients)
        load.start()  # connected before the attack, as a service's pooled clients would be
        attacker = None
        if attack is not None:
            warm_up = WARM_UP.get(attack, 3.0)
            attacker = multiprocessing.Process(
                target=_attacks.run,
                args=(attack, server.port, warm_up + seconds, attacker_keys.headers(), counts),
                daemon=True,
            )
            attacker.start()
            time.sleep(warm_up)
        load.measure()
        private = re.search(r"metrics on http://[^:]+:(\d+)/metrics", server.log)
        assert private is not None, server.log
        prober = Prober(server.port, int(private.group(1)))
        prober.start()
        time.sleep(seconds)
        requests, healthz, errors = load.stop()
        probes, private_probes = prober.stop()
        attack_counts = {}
        if attacker is not None:
            try:
                attack_counts = counts.get(timeout=60)
            except queue.Empty:
                attack_counts = {"the attacker reported nothing": 1}
            attacker.join(timeout=10)
            if attacker.is_alive():
                attacker.kill()
        return {
            "attack": attack or "none",
            "checkout": str(checkout),
            "requests": attrs.asdict(requests),
            "error_kinds": errors,
            "healthz": attrs.asdict(healthz),
            "probes": attrs.asdict(probes),
            "private_probes": attrs.asdict(private_probes),
            "rss_mb": memory.stop(),
            "attack_counts": attack_counts,
            "accept_queue_overflows": listen_overflows() - overflows,
            "load": round(os.getloadavg()[0], 1),
        }


def table(runs: list[dict[str, Any]], names: dict[str, str]) -> str:
    """The runs as a Markdown table."""
    head = (
        "| attack | code | client requests | errors | p99 | /healthz p99 | probe p99 (max),"
        " failed | private probe p99, failed | RSS MB start / peak / end | accept queue"
        " overflows | load |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        requests, rss = run["requests"], run["rss_mb"]
        probes, private = run["probes"], run["private_probes"]
        lines.append(
            f"| {run['attack']} | {names[run['checkout']]} | {requests['count']:,}"
            f" | {requests['failed']} | {requests['p99']:,} ms | {run['healthz']['p99']:,} ms"
            f" | {probes['p99']:,} ms ({probes['max']:,.0f}), {probes['failed']} of"
            f" {probes['count']} | {private['p99']:,} ms, {private['failed']} of"
            f" {private['count']} | {rss['start']} / {rss['peak']} / {rss['end']}"
            f" | {run['accept_queue_overflows']:,} | {run['load']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._soak")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--only", nargs="+", choices=sorted(_attacks.ATTACKS), metavar="ATTACK")
    parser.add_argument("--base", type=Path, help="a checkout to run the same attacks against")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    checkouts = {str(here): "after" if args.base else "this"}
    if args.base:
        checkouts = {str(args.base.resolve()): "before", **checkouts}
    attacks: list[str | None] = [None, *(args.only or _attacks.ATTACKS)]
    runs = []
    for attack in attacks:
        for checkout in checkouts:
            run = soak(Path(checkout), attack, args.seconds, args.clients)
            print(json.dumps(run), flush=True)
            runs.append(run)
    print(table(runs, checkouts))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
