"""Client CPU per uncontended acquire+release cycle: the SDK beside the clients of its peers.

    python -m bench._client_cpu [--base CHECKOUT] [--rounds 8] [--seconds 2]

One SQLite server (this checkout's, `synchronous=FULL`) and one single-node ZooKeeper
(bench/_peers.py, installed if missing), and, in shuffled turns within each round, one client
process per variant looping uncontended acquire + release (each turn also takes the server's CPU
per cycle: what that client's requests cost the server it talks to): `http.client` sending the SDK's
requests (the floor), a bare httpx client, the SDK on its own HTTP client, the SDK on a plain
`httpx.Client` (what a caller passes: httpx's transport, through its `send`), their asyncio
twins, and kazoo's `Lock`; with `--base`, that checkout's SDK too (`... (base)`: its `volcano`
and generated client, sending to the same server), in the same rounds. Per turn: the client
process's CPU (user + system, every thread: `time.process_time`) per cycle, which a busy machine
disturbs far less than a rate. Prints the median [min, max] per variant and, taken within each
round, each over http.client's, raw httpx's and kazoo's, with the load average. The peers section
(bench/_durable.py) ends with the same rows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tests.support.server import ServerProcess

from . import _peers
from ._cycles import WARMUP_SECONDS
from ._measure import Workers
from ._servers import Deployment, Keys, make_keys

VARIANTS = (
    "raw_http_client",
    "raw_httpx",
    "sdk",
    "sdk_plain_httpx",
    "raw_httpx_async",
    "sdk_async",
    "sdk_async_plain_httpx",
    "kazoo_lock",
)
BASE_VARIANTS = ("sdk", "sdk_plain_httpx", "sdk_async")
"""The rows measured again with the base checkout's SDK."""
OVER = {"http.client": "raw_http_client", "raw httpx": "raw_httpx", "kazoo Lock": "kazoo_lock"}
"""The rows every other is divided by, within each round."""


def client_cpu(
    volcano: Deployment,
    zookeeper: str,
    rounds: int,
    seconds: float,
    base: Path | None = None,
    servers: tuple[int, int] | None = None,
) -> dict[str, dict[str, float]]:
    """Client CPU per cycle, microseconds, per row (median, min, max over the rounds), and
    its ratio to each row of OVER (the median of the per-round ratios); with `servers` (the
    pids of the Volcano server and the ZooKeeper), the server's CPU per cycle of each row too
    (what a client's requests cost the server it talks to)."""
    peer = Deployment("zookeeper", "", (zookeeper,), Keys("", ""))
    ours, theirs = Workers(1), Workers(1, base) if base is not None else None
    rows: dict[str, tuple[str, Workers, Deployment]] = {
        variant: (variant, ours, peer if variant == "kazoo_lock" else volcano)
        for variant in VARIANTS
    }
    if theirs is not None:
        for variant in BASE_VARIANTS:
            rows[f"{variant} (base)"] = (variant, theirs, volcano)
    samples: dict[str, list[float]] = {name: [] for name in rows}
    server: dict[str, list[float]] = {name: [] for name in rows}
    try:
        order = list(rows)
        for number in range(1, rounds + 1):
            print(f"... client CPU per cycle, round {number}/{rounds}, load {_load()}", flush=True)
            random.shuffle(order)
            for name in order:
                variant, workers, target = rows[name]
                pid = None if servers is None else servers[target is peer]
                before = 0.0 if pid is None else _cpu_seconds(pid)
                rate, cpu = workers.client_cpu(target, variant, seconds)
                samples[name].append(cpu * 1e6)
                if pid is not None:
                    cycles = rate * (seconds + WARMUP_SECONDS)  # the warm-up's cycles cost too
                    server[name].append((_cpu_seconds(pid) - before) / cycles * 1e6)
    finally:
        ours.close()
        if theirs is not None:
            theirs.close()
    found: dict[str, dict[str, float]] = {}
    for name, values in samples.items():
        row = {"us_per_cycle": statistics.median(values), "min": min(values), "max": max(values)}
        if server[name]:
            row["server_us_per_cycle"] = statistics.median(server[name])
        for label, over in OVER.items():
            ratios = [v / o for v, o in zip(values, samples[over], strict=True)]
            row[f"over {label}"] = statistics.median(ratios)
            row[f"over {label} min"], row[f"over {label} max"] = min(ratios), max(ratios)
        found[name] = row
    return found


def table(found: dict[str, dict[str, Any]]) -> str:
    """The rows as markdown: CPU per cycle, then each ratio (per round: median [min, max])."""
    lines = [
        "| client, 1 process, uncontended | CPU us per cycle | "
        + " | ".join(f"over {label}" for label in OVER)
        + " | server CPU us per cycle |",
        "|---|---|" + "---|" * len(OVER) + "---|",
    ]
    for name, row in found.items():
        ratios = [
            f"{row[f'over {label}']:.2f} [{row[f'over {label} min']:.2f},"
            f" {row[f'over {label} max']:.2f}]"
            for label in OVER
        ]
        served = row.get("server_us_per_cycle")
        lines.append(
            f"| {name} | {row['us_per_cycle']:.0f} [{row['min']:.0f}, {row['max']:.0f}] | "
            + " | ".join(ratios)
            + f" | {'n/a' if served is None else f'{served:.0f}'} |"
        )
    return "\n".join(lines)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._client_cpu")
    parser.add_argument("--base", type=Path, help="also measure this checkout's SDK")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    _peers.install("zookeeper", "kazoo")
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="volcano-")))
        url = f"sqlite:///{directory / 'bench.db'}"
        keys = make_keys(url)
        server = stack.enter_context(ServerProcess(url, "--no-access-log"))
        assert server.process is not None
        volcano = Deployment("sqlite", url, (server.url,), keys)
        zookeeper = stack.enter_context(_peers.zookeeper())
        started = _load()
        found = client_cpu(
            volcano,
            zookeeper.address,
            args.rounds,
            args.seconds,
            args.base,
            servers=(server.process.pid, zookeeper.pid),
        )
    print(
        f"\n{args.rounds} rounds of {args.seconds:g} s per row; load {started} before,"
        f" {_load()} after"
    )
    print(table(found))


if __name__ == "__main__":
    main()
