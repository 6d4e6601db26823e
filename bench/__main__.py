"""Run every benchmark: `python -m bench [--quick] [--out DIR] [--skip SECTION ...]`.

Prints a table of medians with min and max, and writes DIR/results.json and DIR/chart.png.
Sections: cycles (SDK overhead, server cost, peers, SQLite/PostgreSQL with 1 and 2 servers),
contention (workers waiting for one key, beside redis-py Lock, python-redis-lock and PostgreSQL
advisory locks; 1,000 queued waiters), semaphore (8 workers on a limit-4 key beside kazoo's
Semaphore on a local ZooKeeper), shared (6 readers and 2 writers on one key beside kazoo's
ReadLock and WriteLock), keys (1,000 vs 1,000,000 keys), retention (the
request-id store under sustained load), guards (10,000 with_lock guards, one key's renewals
slowed, sync and async), import (import time), failover (kill -9 of an elected leader until the
next candidate leads, beside etcd's election and kazoo's Election), watchers (1,000 watchers
of one key on one server), peers (Volcano beside etcd's and ZooKeeper's locks at equal
durability, redis-py Lock and PostgreSQL advisory locks, and the SDK's client CPU per cycle:
bench/_durable.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from ._contention import SYSTEMS, Pool, as_dict, queued_waiters, run_system
from ._durable import peers_rounds, write_peers_chart
from ._failover import failover_rounds
from ._measure import Summary, Workers, interleaved, time_ratio
from ._peers import PeerError
from ._report import print_table, write_chart
from ._scale import bounded_outcomes, import_time, many_guards, many_keys
from ._semaphore import semaphore_rounds
from ._servers import deployment, postgres_admin_url, postgres_available
from ._shared import shared_rounds
from ._watchers import many_watchers

SECTIONS = (
    "cycles",
    "contention",
    "semaphore",
    "shared",
    "keys",
    "retention",
    "guards",
    "import",
    "failover",
    "watchers",
    "peers",
)


@attrs.frozen
class Plan:
    rounds: int
    seconds: float
    keys_large: int
    retention_seconds: float
    retention_acceleration: float
    guards: int
    guard_hold: float
    slow_key_delay: float
    import_rounds: int
    contention_seconds: float
    semaphore_seconds: float
    semaphore_rounds: int
    shared_seconds: float
    shared_rounds: int
    failover_rounds: int
    watchers: int
    watcher_changes: int
    peers_rounds: int
    peers_seconds: float
    peers_head_start: float
    peers_fsync_seconds: float
    peers_client_seconds: float


FULL = Plan(
    rounds=5,
    seconds=2.0,
    keys_large=1_000_000,
    retention_seconds=300,
    retention_acceleration=4,
    guards=10_000,
    guard_hold=30,
    slow_key_delay=3.0,
    import_rounds=15,
    contention_seconds=6.0,
    semaphore_seconds=5.0,
    semaphore_rounds=5,
    shared_seconds=5.0,
    shared_rounds=5,
    failover_rounds=5,
    watchers=1000,
    watcher_changes=5,
    peers_rounds=5,
    peers_seconds=4.0,
    peers_head_start=1.5,
    peers_fsync_seconds=2.0,
    peers_client_seconds=2.0,
)
QUICK = Plan(
    rounds=3,
    seconds=0.5,
    keys_large=100_000,
    retention_seconds=30,
    retention_acceleration=40,
    guards=500,
    guard_hold=12,
    slow_key_delay=3.0,
    import_rounds=5,
    contention_seconds=1.5,
    semaphore_seconds=1.5,
    semaphore_rounds=2,
    shared_seconds=1.5,
    shared_rounds=2,
    failover_rounds=1,
    watchers=200,
    watcher_changes=2,
    peers_rounds=1,
    peers_seconds=0.5,
    peers_head_start=0.6,
    peers_fsync_seconds=0.5,
    peers_client_seconds=0.4,
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="short runs, for a smoke test (~2 min)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench/results"),
        help="where results.json and chart.png go",
    )
    parser.add_argument(
        "--skip", nargs="*", choices=SECTIONS, default=[], help="sections to leave out"
    )
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    parser.add_argument(
        "--base",
        type=Path,
        help="peers: also run this checkout's server (e.g. an export of main) in the same rounds,"
        " and its SDK in the client CPU rows; import: its `import volcano` too",
    )
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI runner) unwinds like Ctrl-C, so the servers and peers each
    # section started are stopped and their temporary data removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.only:
        args.skip = [section for section in SECTIONS if section not in args.only]
    plan = QUICK if args.quick else FULL
    results: dict[str, Any] = {
        "plan": attrs.asdict(plan),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": _cpus(),
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "figures": {},
        "rates": {},
        "scale": {},
        "contention": [],
    }
    postgres = postgres_available()
    if not postgres:
        print("PostgreSQL is not reachable: its figures are skipped")
    if "cycles" not in args.skip:
        cycles(plan, postgres, results)
    if "contention" not in args.skip:
        contention(plan, postgres, results)
    if "semaphore" not in args.skip:
        semaphore(plan, postgres, results)
    if "shared" not in args.skip:
        shared(plan, postgres, results)
    if "keys" not in args.skip:
        for backend in ("sqlite", "postgres") if postgres else ("sqlite",):
            print(
                f"... acquire latency with 1,000 vs {plan.keys_large:,} keys ({backend})",
                flush=True,
            )
            found = many_keys(backend, 1_000, plan.keys_large, plan.rounds, samples=300)
            results["figures"][f"keys_latency_ratio_{backend}"] = _figure(
                found["ratio"], "x", goal=1.2
            )
            results["figures"][f"acquire_ms_1k_keys_{backend}"] = _figure(
                found["small_s"], "ms", scale=1000
            )
            results["figures"][f"acquire_ms_many_keys_{backend}"] = _figure(
                found["large_s"], "ms", scale=1000
            )
    if "retention" not in args.skip:
        print(f"... request-id store under {plan.retention_seconds:g} s of load", flush=True)
        results["scale"]["retention"] = bounded_outcomes(
            plan.retention_seconds, plan.retention_acceleration
        )
    if "guards" not in args.skip:
        print(
            f"... {plan.guards:,} with_lock guards for {plan.guard_hold:g} s, one key's renewals"
            f" {plan.slow_key_delay:g} s slow, sync and async",
            flush=True,
        )
        found = many_guards(
            plan.guards, ttl=10.0, hold=plan.guard_hold, slow_delay=plan.slow_key_delay
        )
        for kind, values in found.items():
            results["scale"][f"guards_{kind}"] = values
    if "import" not in args.skip:
        print("... import time", flush=True)
        found = import_time(plan.import_rounds, args.base)
        results["figures"]["import_ratio_volcano_vs_httpx"] = _figure(found["ratio"], "x", goal=1.3)
        if args.base is not None:
            results["figures"]["import_ratio_volcano_base_vs_httpx"] = _figure(
                found["base_ratio"], "x"
            )
        results["figures"]["import_ratio_volcano_and_generated_vs_httpx"] = _figure(
            found["ready_ratio"], "x"
        )
        results["figures"]["import_ms_volcano"] = _figure(found["volcano_s"], "ms", scale=1000)
        results["figures"]["import_ms_volcano_and_generated"] = _figure(
            found["volcano_ready_s"], "ms", scale=1000
        )
        results["figures"]["import_ms_httpx"] = _figure(found["httpx_s"], "ms", scale=1000)
    if "failover" not in args.skip:
        try:
            results["failover"] = failover_rounds(rounds=plan.failover_rounds, postgres=postgres)
        except PeerError as error:
            print(f"failover figures skipped: {error}")
    if "watchers" not in args.skip:
        for backend in ("sqlite", "postgres") if postgres else ("sqlite",):
            for kind in ("raw", "sdk"):
                print(f"... {plan.watchers:,} {kind} watchers of one key ({backend})", flush=True)
                results["scale"][f"watchers_{backend}_{kind}"] = many_watchers(
                    plan.watchers, plan.watcher_changes, backend, kind
                )
    if "peers" not in args.skip:
        try:
            results["peers"] = peers_rounds(
                rounds=plan.peers_rounds,
                seconds=plan.peers_seconds,
                head_start=plan.peers_head_start,
                fsync_seconds=plan.peers_fsync_seconds,
                client_seconds=plan.peers_client_seconds,
                postgres=postgres,
                base=args.base,
            )
        except PeerError as error:
            print(f"peers figures skipped: {error}")
    args.out.mkdir(parents=True, exist_ok=True)
    if results.get("peers"):
        write_peers_chart(results["peers"], args.out / "peers.png")
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print_table(results)
    write_chart(results, args.out / "chart.png")
    print(f"\nwrote {args.out / 'results.json'} and {args.out / 'chart.png'}")


def cycles(plan: Plan, postgres: bool, results: dict[str, Any]) -> None:
    """Cycle rates and the ratios between them, per deployment and number of client processes."""
    figures, rates = results["figures"], results["rates"]
    setups: list[tuple[str, int, tuple[str, ...], tuple[str, ...]]] = [
        (
            "sqlite",
            1,
            (),
            (
                "healthz",
                "raw_httpx",
                "sdk",
                "raw_httpx_async",
                "sdk_async",
                "raw_http_client",
                "redis",
            ),
        ),
        ("sqlite", 1, ("--sqlite-synchronous", "normal"), ("healthz", "raw_httpx", "sdk")),
        ("sqlite", 2, (), ("healthz", "raw_httpx", "sdk")),
    ]
    if postgres:
        setups += [
            ("postgres", 1, (), ("healthz", "raw_httpx", "sdk", "raw_httpx_async", "sdk_async")),
            ("postgres", 2, (), ("healthz", "raw_httpx", "sdk")),
        ]
    workers = Workers(4)
    try:
        for backend, servers, server_args, variants in setups:
            label = f"{backend}{'-normal' if server_args else ''} x{servers}"
            with deployment(backend, servers, label=label, args=server_args) as target:
                for processes in (1, 4):
                    print(
                        f"... {label}, {processes} client process(es): {', '.join(variants)}",
                        flush=True,
                    )
                    found = interleaved(
                        workers, target, variants, processes, plan.rounds, plan.seconds
                    )
                    tag = f"{label.replace(' ', '_')}_p{processes}"
                    rates[tag] = {
                        variant: attrs.asdict(Summary.of(values))
                        for variant, values in found.items()
                    }
                    _ratios(figures, found, backend, label, servers, server_args, processes)
    finally:
        workers.close()


def contention(plan: Plan, postgres: bool, results: dict[str, Any]) -> None:
    """Every lock system with 1, 4 and 8 workers on one key, holding 0 and 2 ms; and Volcano on
    two PostgreSQL servers. Within each (hold, workers) the systems run back to back."""
    import random

    pool = Pool(8)
    systems: list[tuple[str, str]] = [(system, "sqlite") for system in SYSTEMS]
    if postgres:
        systems.append(("volcano_wait", "postgres x2"))
    pg_url = postgres_admin_url() if postgres else ""
    try:
        with contextlib.ExitStack() as stack:
            targets = {"sqlite": stack.enter_context(deployment("sqlite", 1))}
            if postgres:
                targets["postgres x2"] = stack.enter_context(deployment("postgres", 2))
            for hold in (0.0, 0.002):
                for workers in (1, 4, 8):
                    print(
                        f"... contention: {workers} worker(s), hold {hold * 1000:g} ms", flush=True
                    )
                    random.shuffle(systems)
                    for system, where in systems:
                        target = targets[where]
                        found = run_system(
                            pool,
                            system,
                            workers,
                            hold,
                            plan.contention_seconds,
                            urls=target.urls,
                            anon=target.keys.anon,
                            service=target.keys.service,
                            postgres_url=pg_url if system == "pg_advisory_lock" else "",
                        )
                        label = (
                            system
                            if where == "sqlite" or not system.startswith("volcano")
                            else f"{system} ({where})"
                        )
                        results["contention"].append(
                            {
                                "system": label,
                                "workers": workers,
                                "hold_ms": hold * 1000,
                                **as_dict(found),
                            }
                        )
    finally:
        pool.close()
    print("... 1,000 queued waiters", flush=True)
    results["scale"]["queued_waiters"] = queued_waiters(1000)


def semaphore(plan: Plan, postgres: bool, results: dict[str, Any]) -> None:
    """The issue's semaphore figures: 8 workers, a limit-4 key, a 2 ms hold, beside kazoo."""
    pool = Pool(8)
    try:
        results["semaphore"] = semaphore_rounds(
            pool,
            workers=8,
            limit=4,
            hold=0.002,
            seconds=plan.semaphore_seconds,
            rounds=plan.semaphore_rounds,
            postgres=postgres,
        )
    except PeerError as error:
        print(f"semaphore figures skipped: {error}")
    finally:
        pool.close()


def shared(plan: Plan, postgres: bool, results: dict[str, Any]) -> None:
    """Shared locks: 6 readers and 2 writers on one key, a 2 ms hold, beside kazoo's ReadLock
    and WriteLock."""
    pool = Pool(8)
    try:
        results["shared"] = shared_rounds(
            pool,
            readers=6,
            writers=2,
            hold=0.002,
            seconds=plan.shared_seconds,
            rounds=plan.shared_rounds,
            postgres=postgres,
        )
    except PeerError as error:
        print(f"shared lock figures skipped: {error}")
    finally:
        pool.close()


def _ratios(
    figures: dict[str, Any],
    found: dict[str, list[float]],
    backend: str,
    label: str,
    servers: int,
    server_args: tuple[str, ...],
    processes: int,
) -> None:
    suffix = f"{label.replace(' ', '_')}_p{processes}"
    plain = not server_args and servers == 1
    figures[f"server_cost_{suffix}"] = _figure(
        time_ratio(found, "raw_httpx", "healthz"),
        "x",
        goal=1.25 if backend == "sqlite" and plain else None,
    )
    figures[f"sdk_overhead_sync_{suffix}"] = _figure(
        time_ratio(found, "sdk", "raw_httpx"), "x", goal=1.10 if plain else None
    )
    if "sdk_async" in found:
        figures[f"sdk_overhead_async_{suffix}"] = _figure(
            time_ratio(found, "sdk_async", "raw_httpx_async"), "x", goal=1.10 if plain else None
        )
    if "redis" in found:
        figures[f"sdk_vs_redis_lock_{suffix}"] = _figure(time_ratio(found, "sdk", "redis"), "x")
        figures[f"sdk_vs_http_client_{suffix}"] = _figure(
            time_ratio(found, "sdk", "raw_http_client"), "x"
        )


def _figure(
    summary: Summary, unit: str, *, goal: float | None = None, scale: float = 1.0
) -> dict[str, Any]:
    return {
        "median": summary.median * scale,
        "min": summary.low * scale,
        "max": summary.high * scale,
        "unit": unit,
        "goal": goal,
        "samples": [value * scale for value in summary.samples],
    }


def _cpus() -> int:
    import os

    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


if __name__ == "__main__":
    main()
