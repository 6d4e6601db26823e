"""Server CPU per uncontended acquire+release: `python -m bench._request_cpu BASE_CHECKOUT`.

Runs this checkout's SQLite server and `BASE_CHECKOUT`'s (each on a fresh database at its
default, synchronous=FULL) and, in alternating turns, one client process looping acquire +
release with the standard library's http.client (the cheapest client, so the server is most of
the cycle). Per turn: the server's CPU (user + system, every thread, from /proc) over the
cycles it served. Prints the median [min, max] per server and the per-turn-pair ratio
after / before (below 1: cheaper), with the load average. CPU time is far less disturbed by a
busy machine than a rate is, so this is the figure each server change is judged by.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.server import ServerProcess

from ._cycles import Job, run_job
from ._servers import make_keys


@contextlib.contextmanager
def _server(checkout: Path | None, args: tuple[str, ...]) -> Iterator[tuple[ServerProcess, Job]]:
    with tempfile.TemporaryDirectory(prefix="volcano-request-cpu-") as directory:
        url = f"sqlite:///{Path(directory) / 'bench.db'}"
        keys = make_keys(url)
        with ServerProcess(url, "--no-access-log", *args, cwd=checkout) as server:
            job = Job("raw_http_client", (server.url,), keys.anon, keys.service, 0, 0, 0)
            yield server, job


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(server: ServerProcess, job: Job, seconds: float) -> tuple[float, float]:
    """(cycles per second, server CPU ms per cycle) of one turn."""
    assert server.process is not None
    job = Job(job.variant, job.urls, job.anon, job.service, seconds, 0, time.time())
    before = _cpu(server.process.pid)
    rate = run_job(job)
    used = _cpu(server.process.pid) - before
    # run_job warms up for WARMUP_SECONDS before its timed window: those cycles cost too.
    from ._cycles import WARMUP_SECONDS

    cycles = rate * (seconds + WARMUP_SECONDS)
    return rate, used / cycles * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._request_cpu")
    parser.add_argument("base", type=Path, help="the checkout to compare against")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--server-args", nargs="*", default=[])
    args = parser.parse_args()
    extra = tuple(args.server_args)
    with _server(args.base.resolve(), extra) as before, _server(None, extra) as after:
        found: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for turn in range(args.turns):
            pairs = [("before", before), ("after", after)]
            for name, (server, job) in pairs if turn % 2 else pairs[::-1]:
                found[name].append(measure(server, job, args.seconds))
    print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {args.turns} turns")
    for name, rows in found.items():
        rates, cpus = [r for r, _ in rows], [c for _, c in rows]
        print(
            f"  {name:6} server CPU {statistics.median(cpus):.3f} [{min(cpus):.3f},"
            f" {max(cpus):.3f}] ms/cycle   {statistics.median(rates):.0f} cycles/s"
        )
    ratios = [a[1] / b[1] for a, b in zip(found["after"], found["before"], strict=True)]
    print(
        f"  after / before CPU per cycle: {statistics.median(ratios):.3f}"
        f" [{min(ratios):.3f}, {max(ratios):.3f}]"
    )


if __name__ == "__main__":
    main()
