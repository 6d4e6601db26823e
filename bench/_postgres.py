"""PostgreSQL before and after a change: two checkouts' servers under the same load, in one run.

    python -m bench._postgres --baseline DIR [--rounds 5] [--seconds 2] [--no-profile]

DIR is another checkout of this repository (`git worktree add --detach DIR <commit>`); its
`volcano_server` runs from that directory with this interpreter, beside this checkout's. Each
server has a fresh database of its own and reaches PostgreSQL through a relay in this process
that counts round trips. Every round runs two `GET /healthz` and a raw acquire+release cycle
(`bench._cycles`) against both servers, in a shuffled order, with 1 and then 4 client
processes; ratios are taken within a round. Reported per server:

- cycles/s, and the cycle's time over two healthz (the server's cost beside its HTTP floor);
- server CPU per cycle (the server process's user+system time over the timed window);
- round trips to the database per operation (sequential cycles, counted by the relay);
- the share of the server's GIL-holding samples inside psycopg (py-spy, when installed), times
  its CPU per cycle: psycopg CPU per cycle.

Writes bench/results/postgres.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx

from tests.support.server import ServerProcess

from ._cycles import Job, run_job
from ._servers import Deployment, Keys, fresh_database

SIDES = ("before", "after")
VARIANTS = ("healthz", "raw_httpx")
DATABASE = ("127.0.0.1", 5432)


class RoundTrips:
    """A TCP relay to PostgreSQL that counts round trips.

    A round trip is a turn of the conversation: client bytes that follow the database's answer
    (or open the connection). A pipeline's batch and its Sync are one turn however many
    statements it holds.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self.turns = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RoundTrips:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        db_r, db_w = await asyncio.open_connection(*self._target)
        answered = [True]  # whether the database spoke last on this connection

        async def pump(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, from_client: bool
        ) -> None:
            try:
                while data := await reader.read(65536):
                    if from_client and answered[0]:
                        self.turns += 1
                    answered[0] = not from_client
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        await asyncio.gather(
            pump(client_r, db_w, from_client=True), pump(db_r, client_w, from_client=False)
        )


@attrs.frozen
class Server:
    side: str
    deployment: Deployment
    process: ServerProcess

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the server process so far."""
        assert self.process.process is not None
        fields = Path(f"/proc/{self.process.process.pid}/stat").read_text().rsplit(")", 1)[1]
        utime, stime = fields.split()[11:13]
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def server(side: str, checkout: Path | None, relay: RoundTrips) -> Iterator[Server]:
    """A server of `checkout` (this one when None) on a fresh database, through the relay."""
    with fresh_database("postgres") as url:
        keys = checkout_keys(url, checkout)
        parts = urlsplit(url)
        relayed = parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{relay.port}")
        process = ServerProcess(relayed.geturl(), "--no-access-log", cwd=checkout)
        process.start()
        try:
            yield Server(side, Deployment(side, url, (process.url,), keys), process)
        finally:
            process.terminate()


def checkout_keys(url: str, checkout: Path | None) -> Keys:
    """A project's keys, made by `checkout`'s own `keys create` (so its own schema version)."""
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "volcano_server",
            "keys",
            "create",
            "--project",
            "bench",
            "--db",
            url,
        ],
        cwd=checkout,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    values = dict(line.split("=", 1) for line in found.splitlines() if "=" in line)
    return Keys(values["VOLCANO_ANON_KEY"], values["VOLCANO_SERVICE_KEY"])


def timed(
    pool: ProcessPoolExecutor, target: Server, variant: str, processes: int, seconds: float
) -> tuple[float, float]:
    """Cycles/s of `processes` workers together, and the server's CPU seconds per cycle."""
    start_at = time.time() + 0.8
    jobs = [
        Job(
            variant,
            target.deployment.urls,
            target.deployment.keys.anon,
            target.deployment.keys.service,
            seconds,
            worker,
            start_at,
        )
        for worker in range(processes)
    ]
    futures = [pool.submit(run_job, job) for job in jobs]
    time.sleep(max(0.0, start_at - time.time()))
    cpu = target.cpu_seconds()
    time.sleep(seconds)
    cpu = target.cpu_seconds() - cpu
    rate = sum(future.result() for future in futures)
    return rate, cpu / (rate * seconds)


def round_trips(target: Server, relay: RoundTrips, cycles: int = 200) -> float:
    """Round trips to the database per operation (acquire or release), over sequential cycles."""
    keys = target.deployment.keys
    headers = {"apikey": keys.anon, "Authorization": f"Bearer {keys.service}"}
    key = f"trips-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=target.deployment.urls[0], headers=headers) as client:
        client.get("/healthz")
        before = relay.turns
        for _ in range(cycles):
            owner = str(uuid.uuid4())
            lease = client.post(
                f"/v1/locks/{key}/acquire",
                json={"owner_token": owner, "ttl_seconds": 30},
                headers={"X-Request-Id": str(uuid.uuid4())},
            ).json()
            client.post(
                f"/v1/locks/{key}/release",
                json={"owner_token": owner, "fencing_token": lease["fencing_token"]},
                headers={"X-Request-Id": str(uuid.uuid4())},
            ).raise_for_status()
        return (relay.turns - before) / (2 * cycles)


def psycopg_share(pool: ProcessPoolExecutor, target: Server, seconds: float) -> float | None:
    """The share of the server's Python CPU with psycopg on the stack, under 1 process.

    py-spy samples only the thread holding the GIL, so waits for the network are left out.
    """
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        return None
    assert target.process.process is not None
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "stacks.txt"
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(target.process.process.pid),
                "--format",
                "raw",
                "--rate",
                "200",
                "--nonblocking",
                "--gil",  # only the thread holding the GIL: Python CPU, not waits
                "--duration",
                str(round(seconds + 1)),
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        timed(pool, target, "raw_httpx", 1, seconds)
        if spy.wait(timeout=seconds + 30) != 0 or not out.exists():
            return None
        total = inside = 0
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            total += int(count)
            if "psycopg" in stack:
                inside += int(count)
        return inside / total if total else None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._postgres", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the checkout to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy share")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    checkouts: dict[str, Path | None] = {"before": args.baseline.resolve(), "after": None}
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load": []}
    pool = ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn"))
    try:
        with RoundTrips(DATABASE) as relay, contextlib.ExitStack() as stack:
            servers = {
                side: stack.enter_context(server(side, checkouts[side], relay)) for side in SIDES
            }
            for side, target in servers.items():
                results[f"round_trips_{side}"] = round_trips(target, relay)
            for processes in (1, 4):
                results["load"].append(os.getloadavg())
                rates: dict[tuple[str, str], list[float]] = {}
                cpu: dict[str, list[float]] = {side: [] for side in SIDES}
                for _ in range(args.rounds):
                    order = [(side, variant) for side in SIDES for variant in VARIANTS]
                    random.shuffle(order)
                    for side, variant in order:
                        rate, per_cycle = timed(
                            pool, servers[side], variant, processes, args.seconds
                        )
                        rates.setdefault((side, variant), []).append(rate)
                        if variant == "raw_httpx":
                            cpu[side].append(per_cycle)
                for side in SIDES:
                    raw, floor = rates[side, "raw_httpx"], rates[side, "healthz"]
                    results[f"p{processes}_{side}"] = {
                        "cycles_per_s": raw,
                        "healthz_per_s": floor,
                        "ratio_to_healthz": [f / r for r, f in zip(raw, floor, strict=True)],
                        "server_cpu_ms_per_cycle": [c * 1000 for c in cpu[side]],
                    }
                results["load"].append(os.getloadavg())
            if not args.no_profile:
                for side, target in servers.items():
                    results[f"psycopg_share_{side}"] = psycopg_share(pool, target, args.seconds * 2)
    finally:
        pool.shutdown()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "postgres.json").write_text(json.dumps(results, indent=2))
    report(results)


def report(results: dict[str, Any]) -> None:
    def median(values: list[float]) -> float:
        return statistics.median(values)

    def spread(values: list[float], digits: int) -> str:
        return f"{median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"

    print(f"load average (1, 5, 15 min) through the run: {results['load']}")
    for side in SIDES:
        print(f"\n{side}: {results[f'round_trips_{side}']:.2f} round trips per operation")
        for processes in (1, 4):
            found = results[f"p{processes}_{side}"]
            print(
                f"  {processes} process(es): {spread(found['cycles_per_s'], 0)} cycles/s,"
                f" x{spread(found['ratio_to_healthz'], 2)} two healthz,"
                f" server CPU {spread(found['server_cpu_ms_per_cycle'], 2)} ms/cycle"
            )
        share = results.get(f"psycopg_share_{side}")
        if share is not None:
            cpu = median(results[f"p1_{side}"]["server_cpu_ms_per_cycle"])
            print(f"  psycopg: {share:.0%} of server samples, about {share * cpu:.2f} ms/cycle")
    for processes in (1, 4):
        before = results[f"p{processes}_before"]["cycles_per_s"]
        after = results[f"p{processes}_after"]["cycles_per_s"]
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        print(f"after/before throughput, {processes} process(es): x{spread(ratios, 2)}")


if __name__ == "__main__":
    main()
