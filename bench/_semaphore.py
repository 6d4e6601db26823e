"""Semaphores: N worker processes on one key with `limit` slots, Volcano beside kazoo.

Each worker loops acquire (waiting) / hold / release, as in bench/_contention.py, on a key of
`limit` slots: Volcano's `acquire(limit=, wait=)` against the reference server (SQLite, and
PostgreSQL when it is reachable) and kazoo's `Semaphore(max_leases=)` on a local single-node
ZooKeeper (bench/_peers.py), both with fsync on. The systems run back to back in each round,
in a shuffled order; every ratio is taken within a round, then its median over the rounds.

Figures per run: grants per second; handoff p50 and p99 (from the release that freed a slot to
the grant that took it); grants per worker and their spread, (most - fewest) / mean (0: every
worker got as many grants); and "out of order", the share of grants made while a request asked
earlier was still waiting (0: first asked, first served), also counting only requests asked
more than 5 ms earlier. The spread also counts how fast each worker comes back for more; out of
order is closer to the service's own order, though a busy server reads requests that arrive
together in any order, and each client's clock readings wait for its process to be scheduled.
"""

from __future__ import annotations

import contextlib
import random
import statistics
from typing import Any

from . import _peers
from ._contention import Figures, Pool, as_dict, run_system
from ._servers import deployment

KAZOO = "kazoo_semaphore (zookeeper)"


def semaphore_rounds(
    pool: Pool,
    *,
    workers: int,
    limit: int,
    hold: float,
    seconds: float,
    rounds: int,
    postgres: bool,
) -> dict[str, Any]:
    """`rounds` rounds of every system; the figures of each run and the ratios to kazoo."""
    _peers.install("zookeeper", "kazoo")
    backends = ["sqlite", "postgres"] if postgres else ["sqlite"]
    runs: list[dict[str, dict[str, Any]]] = []
    with contextlib.ExitStack() as stack:
        zookeeper = stack.enter_context(_peers.zookeeper())
        targets = {backend: stack.enter_context(deployment(backend, 1)) for backend in backends}
        systems = [f"volcano_semaphore ({backend})" for backend in backends] + [KAZOO]

        def run(system: str, seconds: float) -> Figures:
            if system == KAZOO:
                return run_system(
                    pool, "kazoo_semaphore", workers, hold, seconds,
                    limit=limit, peer=zookeeper.address,
                )  # fmt: skip
            target = targets[system.split("(")[1].rstrip(")")]
            return run_system(
                pool, "volcano_semaphore", workers, hold, seconds,
                urls=target.urls, anon=target.keys.anon, service=target.keys.service, limit=limit,
            )  # fmt: skip

        # Unmeasured: spawns and warms the worker processes (on a busy machine that takes
        # longer than a run's head start) and both servers.
        print("... semaphore: warming up", flush=True)
        for system in systems:
            run(system, 1.0)
        for number in range(1, rounds + 1):
            print(
                f"... semaphore round {number}/{rounds}: {workers} workers, limit {limit},"
                f" hold {hold * 1000:g} ms",
                flush=True,
            )
            random.shuffle(systems)
            found: dict[str, dict[str, Any]] = {}
            for system in systems:
                figures = run(system, seconds)
                _check(system, figures, workers)
                found[system] = as_dict(figures)
            runs.append(found)
        return {
            "workers": workers,
            "limit": limit,
            "hold_ms": hold * 1000,
            "seconds": seconds,
            "zookeeper": {"version": zookeeper.version, "durability": zookeeper.durability},
            "runs": runs,
            "ratios": _ratios(runs, systems),
        }


def _check(system: str, figures: Figures, workers: int) -> None:
    """A run where a worker got nothing measured a broken setup, not a slow system."""
    if len(figures.grants_per_worker) != workers or min(figures.grants_per_worker) == 0:
        print(f"    warning: {system}: a worker got no grant: {figures.grants_per_worker}")


def _ratios(runs: list[dict[str, dict[str, Any]]], systems: list[str]) -> dict[str, Any]:
    """Per Volcano system, within each round: grants/s over kazoo's (above 1: faster), handoff
    p50 and p99 over kazoo's (below 1: quicker), spread and out of order minus kazoo's (below
    0: fairer)."""
    ratios: dict[str, Any] = {}
    for system in sorted(s for s in systems if s != KAZOO):
        rows = [(run[system], run[KAZOO]) for run in runs]

        def over(
            field: str, rows: list[tuple[dict[str, Any], dict[str, Any]]] = rows
        ) -> dict[str, float]:
            return _summary([ours[field] / theirs[field] for ours, theirs in rows])

        ratios[system] = {
            "grants_per_s_ratio": over("grants_per_s"),
            "handoff_p50_ratio": over("handoff_p50_ms"),
            "handoff_p99_ratio": over("handoff_p99_ms"),
            "spread_difference": _summary(
                [ours["spread"] - theirs["spread"] for ours, theirs in rows]
            ),
            "out_of_order_difference": _summary(
                [ours["out_of_order"] - theirs["out_of_order"] for ours, theirs in rows]
            ),
            "out_of_order_5ms_difference": _summary(
                [ours["out_of_order_5ms"] - theirs["out_of_order_5ms"] for ours, theirs in rows]
            ),
        }
    return ratios


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def print_semaphore(found: dict[str, Any]) -> None:
    """The runs as a table (medians over rounds, with the median round's grants per worker),
    then the ratios to kazoo."""
    print(
        f"\n== semaphore: {found['workers']} processes on one key of limit {found['limit']},"
        f" hold {found['hold_ms']:g} ms, {len(found['runs'])} rounds of {found['seconds']:g} s =="
    )
    print(f"ZooKeeper {found['zookeeper']['version']}: {found['zookeeper']['durability']}")
    print(
        "system                          grants/s  handoff p50/p99 ms  spread  out of order"
        " (>5 ms)   grants per worker (median round)"
    )
    for system in sorted(found["runs"][0]):
        rows = [run[system] for run in found["runs"]]
        middle = sorted(rows, key=lambda row: row["grants_per_s"])[len(rows) // 2]
        per_worker = " / ".join(str(n) for n in middle["grants_per_worker"])
        print(
            f"{system:30} {statistics.median(r['grants_per_s'] for r in rows):9.0f}"
            f"  {statistics.median(r['handoff_p50_ms'] for r in rows):7.2f}"
            f" / {statistics.median(r['handoff_p99_ms'] for r in rows):6.2f}"
            f"  {statistics.median(r['spread'] for r in rows):6.3f}"
            f"  {statistics.median(r['out_of_order'] for r in rows):12.3f}"
            f" ({statistics.median(r['out_of_order_5ms'] for r in rows):.3f})   {per_worker}"
        )
    for system, ratios in found["ratios"].items():
        print(f"\n{system} vs kazoo (median [min, max] of per-round figures):")
        for name, value in ratios.items():
            print(f"  {name:22} {value['median']:7.3f} [{value['min']:.3f}, {value['max']:.3f}]")
