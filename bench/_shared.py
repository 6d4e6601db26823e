"""Shared locks: readers and writers on one key, Volcano beside kazoo's ReadLock and WriteLock.

N worker processes, some readers and the rest writers, each looping acquire (waiting) / hold /
release on one fresh key (bench/_contention.py): Volcano's `acquire(shared=, wait=)` against
the reference server (SQLite, and PostgreSQL when it is reachable), and kazoo's `ReadLock` /
`WriteLock` on a local single-node ZooKeeper (bench/_peers.py), both with fsync on. Both are
fair to writers: a reader that asks after a waiting writer waits for it (ZooKeeper's recipe:
a read node waits for the write nodes sequenced before it). The systems run back to back in
each round, in a shuffled order; ratios are taken within a round, then their median.

Figures per run, from each worker's (asked, granted, release began) by CLOCK_MONOTONIC:
grants per second (reads, writes, all); the wait from asking to the grant, p50 and p99, for
readers and for writers; the most readers seen holding at once; and overlaps, the writer holds
that overlapped any other hold (each client's hold lies within its lease, so any overlap is a
broken lock: 0 for both, or the figures mean nothing).
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from . import _peers
from ._contention import Event, Job, Pool
from ._servers import deployment

KAZOO = "kazoo ReadLock/WriteLock (zookeeper)"


@attrs.frozen
class RwFigures:
    """What one run of one system showed."""

    reads_per_s: float
    writes_per_s: float
    read_wait_p50_ms: float
    read_wait_p99_ms: float
    write_wait_p50_ms: float
    write_wait_p99_ms: float
    most_readers: int
    overlaps: int

    @property
    def grants_per_s(self) -> float:
        return self.reads_per_s + self.writes_per_s

    @classmethod
    def of(cls, per_worker: Sequence[list[Event]], readers: int, seconds: float) -> RwFigures:
        """The figures of a run whose first `readers` workers read and the rest write."""
        reads = [event for events in per_worker[:readers] for event in events]
        writes = [event for events in per_worker[readers:] for event in events]
        return cls(
            reads_per_s=len(reads) / seconds,
            writes_per_s=len(writes) / seconds,
            read_wait_p50_ms=_percentile(_waits(reads), 50),
            read_wait_p99_ms=_percentile(_waits(reads), 99),
            write_wait_p50_ms=_percentile(_waits(writes), 50),
            write_wait_p99_ms=_percentile(_waits(writes), 99),
            most_readers=_most_at_once(reads),
            overlaps=_overlaps(writes, reads),
        )


def shared_rounds(
    pool: Pool,
    *,
    readers: int,
    writers: int,
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
        systems = [f"volcano shared ({backend})" for backend in backends] + [KAZOO]

        def run(system: str, seconds: float) -> RwFigures:
            key = f"shared-{uuid.uuid4().hex[:8]}"

            def make(worker: int, start_at: float, end_at: float) -> Job:
                common = {"shared": worker < readers, "key": key, "hold": hold}
                if system == KAZOO:
                    return Job("kazoo_rw", worker, start_at=start_at, end_at=end_at,
                               peer=zookeeper.address, **common)  # fmt: skip
                target = targets[system.split("(")[1].rstrip(")")]
                return Job(
                    "volcano_rw", worker, start_at=start_at, end_at=end_at, url=target.urls[0],
                    anon=target.keys.anon, service=target.keys.service, **common,
                )  # fmt: skip

            events = pool.events(make, readers + writers, seconds)
            return RwFigures.of(events, readers, seconds)

        # Unmeasured: spawns and warms the worker processes and the servers.
        print("... shared: warming up", flush=True)
        for system in systems:
            run(system, 1.0)
        for number in range(1, rounds + 1):
            print(
                f"... shared round {number}/{rounds}: {readers} readers, {writers} writers,"
                f" hold {hold * 1000:g} ms",
                flush=True,
            )
            random.shuffle(systems)
            found: dict[str, dict[str, Any]] = {}
            for system in systems:
                figures = run(system, seconds)
                if figures.overlaps:
                    print(f"    warning: {system}: {figures.overlaps} writer holds overlapped")
                found[system] = {**attrs.asdict(figures), "grants_per_s": figures.grants_per_s}
            runs.append(found)
        return {
            "readers": readers,
            "writers": writers,
            "hold_ms": hold * 1000,
            "seconds": seconds,
            "zookeeper": {"version": zookeeper.version, "durability": zookeeper.durability},
            "runs": runs,
            "ratios": _ratios(runs, systems),
        }


def _ratios(runs: list[dict[str, dict[str, Any]]], systems: list[str]) -> dict[str, Any]:
    """Per Volcano system, within each round, over kazoo's: grants, reads and writes per
    second (above 1: more), and the writers' wait p50 and p99 (below 1: shorter)."""
    fields = ("grants_per_s", "reads_per_s", "writes_per_s", "write_wait_p50_ms")
    ratios: dict[str, Any] = {}
    for system in sorted(s for s in systems if s != KAZOO):
        rows = [(run[system], run[KAZOO]) for run in runs]
        ratios[system] = {
            f"{field}_ratio": _summary([ours[field] / theirs[field] for ours, theirs in rows])
            for field in (*fields, "write_wait_p99_ms")
        }
    return ratios


def print_shared(found: dict[str, Any]) -> None:
    """The runs as a table (medians over rounds), then the ratios to kazoo."""
    print(
        f"\n== shared locks: {found['readers']} readers and {found['writers']} writers on one"
        f" key, hold {found['hold_ms']:g} ms, {len(found['runs'])} rounds of"
        f" {found['seconds']:g} s =="
    )
    print(f"ZooKeeper {found['zookeeper']['version']}: {found['zookeeper']['durability']}")
    print(
        "system                                 grants/s  reads/s  writes/s"
        "  read wait p50/p99 ms  write wait p50/p99 ms  most readers  overlaps"
    )
    for system in sorted(found["runs"][0]):
        rows = [run[system] for run in found["runs"]]

        def median(field: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(row[field] for row in rows)

        print(
            f"{system:38} {median('grants_per_s'):8.0f} {median('reads_per_s'):8.0f}"
            f" {median('writes_per_s'):9.0f}"
            f"  {median('read_wait_p50_ms'):8.1f} / {median('read_wait_p99_ms'):7.1f}"
            f"    {median('write_wait_p50_ms'):8.1f} / {median('write_wait_p99_ms'):7.1f}"
            f"  {max(row['most_readers'] for row in rows):12d}"
            f"  {sum(row['overlaps'] for row in rows):8d}"
        )
    for system, ratios in found["ratios"].items():
        print(f"\n{system} vs kazoo (median [min, max] of per-round ratios):")
        for name, value in ratios.items():
            print(f"  {name:26} {value['median']:7.3f} [{value['min']:.3f}, {value['max']:.3f}]")


def _waits(events: Sequence[Event]) -> list[float]:
    return [(granted - asked) * 1000 for asked, granted, _ in events]


def _most_at_once(holds: Sequence[Event]) -> int:
    """The most of these holds (granted .. release began) that overlapped at one instant."""
    edges = sorted([(granted, 1) for _, granted, _ in holds] + [(end, -1) for *_, end in holds])
    most = current = 0
    for _, step in edges:  # a release sorts before a grant at the same instant (-1 < 1)
        current += step
        most = max(most, current)
    return most


def _overlaps(writes: Sequence[Event], reads: Sequence[Event]) -> int:
    """How many writer holds overlapped another hold, reader's or writer's."""
    holds = [(granted, end) for _, granted, end in (*writes, *reads)]
    count = 0
    for index, (_, start, end) in enumerate(writes):
        count += any(
            other_start < end and start < other_end
            for other, (other_start, other_end) in enumerate(holds)
            if other != index
        )
    return count


def _percentile(values: Sequence[float], percent: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
