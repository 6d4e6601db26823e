"""Durable peers: Volcano beside etcd's lock and ZooKeeper's (kazoo) Lock, at equal durability.

    python -m bench --only peers [--quick] [--base CHECKOUT]

Every system runs in the same rounds, in a shuffled order within each setting, with worker
processes looping acquire / hold / release on one fresh key (bench/_contention.py):

- `volcano (sqlite)`: the SDK's `acquire(wait=)` against the reference server on SQLite at its
  default, `synchronous=FULL` (the WAL is fsynced before an answer);
- `volcano (postgres)`: the same on PostgreSQL (when reachable), `synchronous_commit=on`;
- `volcano before (sqlite)` / `(postgres)`: with `--base CHECKOUT`, that checkout's server (its
  `volcano_server`, run from that directory), so a change is measured against the peers and
  against its own past in the same runs;
- `etcd lock`: etcd's lock service over its v3 JSON gateway (httpx), one lease per worker;
- `zookeeper (kazoo Lock)`: kazoo's `Lock` recipe;
- `redis-py Lock` and `pg advisory lock`: the peers of the earlier figures, which keep nothing
  durable (said in their row).

Settings: 1 process (uncontended cycles per second); 4 workers holding 0 and 2 ms; 8 workers
holding 0. For 4 workers holding 0 also the handoff p50 / p99 and the server's CPU per grant
(user + system time of the server processes over the run, from /proc, over its grants; for the
PostgreSQL-backed systems every `postgres` process of the machine is counted, so it includes
whatever else uses it). Fsyncs per grant are counted once per system, outside the timed rounds,
by `strace -f -c` on the server processes over a 1-process run (fsync, fdatasync and
sync_file_range calls, over its grants).

Then the client CPU per uncontended cycle (bench/_client_cpu.py: 1 process, against the SQLite
server and the ZooKeeper): the standard library's `http.client` sending the same requests is the
floor; raw httpx, the SDK (on its own HTTP client, and on a plain httpx.Client), their async
versions and kazoo's `Lock` beside it (with `--base`, that checkout's SDK too), every ratio
taken within a round.

Ratios are taken within each round (both sides measured back to back), then their median over
the rounds with min and max.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from tests.support.server import ServerProcess

from . import _peers
from ._client_cpu import client_cpu
from ._client_cpu import table as client_table
from ._contention import Figures, Pool, as_dict, run_system
from ._servers import Deployment, Keys, fresh_database, make_keys, postgres_admin_url

SETTINGS: tuple[tuple[str, int, float], ...] = (
    ("1 process, acquire+release cycles/s", 1, 0.0),
    ("4 workers, hold 0: grants/s", 4, 0.0),
    ("4 workers, hold 2 ms: grants/s", 4, 0.002),
    ("8 workers, hold 0: grants/s", 8, 0.0),
)
CPU_SETTING = "4 workers, hold 0: grants/s"
"""The setting whose runs give the handoff percentiles and the server CPU per grant."""

ETCD, ZOOKEEPER = "etcd lock", "zookeeper (kazoo Lock)"
FSYNC_CALLS = "fsync,fdatasync,sync_file_range"


@attrs.frozen
class System:
    """One row of the table: how to run it, which processes serve it, what it keeps."""

    name: str
    kind: str
    """Its session in bench/_contention.py."""
    durability: str
    pids: Callable[[], list[int]] = attrs.field(repr=False)
    urls: tuple[str, ...] = ()
    anon: str = attrs.field(default="", repr=False)
    service: str = attrs.field(default="", repr=False)
    peer: str = ""
    postgres_url: str = ""

    def run(
        self, pool: Pool, workers: int, hold: float, seconds: float, head_start: float
    ) -> Figures:
        return run_system(
            pool,
            self.kind,
            workers,
            hold,
            seconds,
            urls=self.urls,
            anon=self.anon,
            service=self.service,
            postgres_url=self.postgres_url,
            peer=self.peer,
            head_start=head_start,
        )


@contextlib.contextmanager
def _volcano(backend: str, checkout: Path | None) -> Iterator[tuple[Deployment, int]]:
    """A Volcano server (this checkout's, or `checkout`'s) on a fresh database."""
    with fresh_database(backend) as url:
        keys = make_keys(url)
        server = ServerProcess(url, "--no-access-log", cwd=checkout)
        server.start()
        assert server.process is not None
        try:
            yield Deployment(backend, url, (server.url,), keys), server.process.pid
        finally:
            server.terminate()


def _postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
    return pids


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds so far of `pids` (every thread; gone processes count 0)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _redis_pid() -> int:
    import redis

    with redis.Redis() as connection:
        return int(connection.info("server")["process_id"])


def _redis_durability() -> str:
    import redis

    with redis.Redis() as connection:
        aof = connection.config_get("appendonly").get("appendonly", "?")
        every = connection.config_get("appendfsync").get("appendfsync", "?")
    if aof == "no":
        return "appendonly=no: nothing is written before an answer (a restart frees every lock)"
    return f"appendonly={aof}, appendfsync={every}"


def _postgres_settings(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        names = ("synchronous_commit", "fsync", "wal_sync_method")
        values = [conn.execute(f"SHOW {name}").fetchone() for name in names]
    return ", ".join(f"{n}={v[0] if v else '?'}" for n, v in zip(names, values, strict=True))


def fsyncs_per_grant(system: System, pool: Pool, seconds: float) -> float | None:
    """Fsync-family calls of the system's server processes per grant, over a 1-process run
    under `strace -f -c` (None without strace or the right to trace)."""
    pids = system.pids()
    if not shutil.which("strace") or not pids:
        return None
    with tempfile.TemporaryDirectory(prefix="volcano-bench-strace-") as directory:
        out = Path(directory) / "counts"
        command = ["strace", "-f", "-c", "-e", f"trace={FSYNC_CALLS}", "-o", str(out)]
        for pid in pids:
            command += ["-p", str(pid)]
        tracer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)  # attached to every thread
            if tracer.poll() is not None:
                return None
            figures = system.run(pool, 1, 0.0, seconds, head_start=1.0)
        finally:
            tracer.send_signal(signal.SIGINT)
            try:
                tracer.wait(10)
            except subprocess.TimeoutExpired:
                tracer.kill()
                tracer.wait()
        grants = figures.grants_per_s * seconds
        if not out.exists() or not grants:
            return None
        calls = 0
        for line in out.read_text().splitlines():
            fields = line.split()
            if fields and fields[-1] in FSYNC_CALLS.split(",") and re.fullmatch(r"\d+", fields[3]):
                calls += int(fields[3])
        return calls / grants


def peers_rounds(
    *,
    rounds: int,
    seconds: float,
    head_start: float,
    fsync_seconds: float,
    client_seconds: float,
    postgres: bool,
    base: Path | None,
) -> dict[str, Any]:
    """Every system in every setting, `rounds` times, and the client CPU rows."""
    _peers.install("zookeeper", "etcd", "kazoo")
    pool = Pool(8)
    try:
        with contextlib.ExitStack() as stack:
            systems = _systems(stack, postgres, base)
            print("... peers: warming up " + ", ".join(s.name for s in systems), flush=True)
            for system in systems:  # spawns and warms every worker process, and each server
                system.run(pool, 8, 0.0, min(seconds, 0.5), head_start)
            fsyncs: dict[str, float | None] = {}
            for system in systems:
                print(f"... peers: counting {system.name}'s fsyncs", flush=True)
                fsyncs[system.name] = fsyncs_per_grant(system, pool, fsync_seconds)
            runs: list[dict[str, dict[str, Any]]] = []
            for number in range(1, rounds + 1):
                print(f"... peers round {number}/{rounds}, load {_load()}", flush=True)
                found: dict[str, dict[str, Any]] = {}
                for setting, count, hold in SETTINGS:
                    order = list(systems)
                    random.shuffle(order)
                    for system in order:
                        cpu = system.pids()
                        before = _cpu_seconds(cpu)
                        figures = system.run(pool, count, hold, seconds, head_start)
                        used = _cpu_seconds(cpu) - before
                        row = as_dict(figures)
                        grants = figures.grants_per_s * seconds
                        row["server_cpu_ms_per_grant"] = used / grants * 1000 if grants else None
                        found.setdefault(setting, {})[system.name] = row
                runs.append(found)
            sqlite = next(s for s in systems if s.name == "volcano (sqlite)")
            zookeeper = next(s for s in systems if s.name == ZOOKEEPER)
            target = Deployment("sqlite", "", sqlite.urls, Keys(sqlite.anon, sqlite.service))
            pids = (sqlite.pids()[0], zookeeper.pids()[0])
            client = client_cpu(target, zookeeper.peer, rounds, client_seconds, base, pids)
        return {
            "rounds": rounds,
            "seconds": seconds,
            "load_after": _load(),
            "systems": {
                s.name: {"durability": s.durability, "fsyncs_per_grant": fsyncs[s.name]}
                for s in systems
            },
            "runs": runs,
            "client_cpu": client,
        }
    finally:
        pool.close()


def _systems(stack: contextlib.ExitStack, postgres: bool, base: Path | None) -> list[System]:
    systems: list[System] = []
    backends = ["sqlite", "postgres"] if postgres else ["sqlite"]
    pg_settings = _postgres_settings(postgres_admin_url()) if postgres else ""
    checkouts: list[tuple[str, Path | None]] = [("volcano", None)]
    if base is not None:
        checkouts.append(("volcano before", base.resolve()))
    for label, checkout in checkouts:
        for backend in backends:
            target, pid = stack.enter_context(_volcano(backend, checkout))
            if backend == "sqlite":
                durability = "SQLite synchronous=FULL (default): the WAL fsynced before an answer"
                pids: Callable[[], list[int]] = lambda pid=pid: [pid]  # noqa: E731
            else:
                durability = f"PostgreSQL {pg_settings}"
                pids = lambda pid=pid: [pid, *_postgres_pids()]  # noqa: E731
            systems.append(
                System(
                    f"{label} ({backend})",
                    "volcano_wait",
                    durability,
                    pids,
                    urls=target.urls,
                    anon=target.keys.anon,
                    service=target.keys.service,
                )
            )
    etcd = stack.enter_context(_peers.etcd())
    systems.append(
        System(
            ETCD,
            "etcd_lock",
            f"etcd {etcd.version}: {etcd.durability}",
            lambda: [etcd.pid],
            peer=etcd.address,
        )
    )
    zookeeper = stack.enter_context(_peers.zookeeper())
    systems.append(
        System(
            ZOOKEEPER,
            "kazoo_lock",
            f"ZooKeeper {zookeeper.version}: {zookeeper.durability}",
            lambda: [zookeeper.pid],
            peer=zookeeper.address,
        )
    )
    redis_pid = _redis_pid()
    systems.append(
        System("redis-py Lock", "redis_py_lock", _redis_durability(), lambda: [redis_pid])
    )
    if postgres:
        systems.append(
            System(
                "pg advisory lock",
                "pg_advisory_lock",
                "session advisory locks are kept in memory: nothing is written",
                _postgres_pids,
                postgres_url=postgres_admin_url(),
            )
        )
    return systems


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


# -- the report -----------------------------------------------------------------------------


def _cell(values: list[float], digits: int = 0) -> str:
    if not values:
        return "n/a"
    return (
        f"{statistics.median(values):.{digits}f}"
        f" [{min(values):.{digits}f}, {max(values):.{digits}f}]"
    )


def _column(found: dict[str, Any], setting: str, system: str, field: str) -> list[float]:
    values = [run[setting][system][field] for run in found["runs"]]
    return [v for v in values if v is not None]


def table(found: dict[str, Any]) -> str:
    """The markdown table: a row per setting, a column per system, then the ratios of each
    Volcano column to etcd's and ZooKeeper's (per round, median [min, max])."""
    systems = list(found["systems"])
    lines = [
        "| setting | " + " | ".join(systems) + " |",
        "|---|" + "---|" * len(systems),
    ]
    for setting, _, _ in SETTINGS:
        cells = [_cell(_column(found, setting, s, "grants_per_s")) for s in systems]
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
        if setting == CPU_SETTING:
            cells = [
                f"{statistics.median(_column(found, setting, s, 'handoff_p50_ms')):.2f} / "
                f"{statistics.median(_column(found, setting, s, 'handoff_p99_ms')):.2f}"
                for s in systems
            ]
            lines.append("| 4 workers, hold 0: handoff p50 / p99 ms | " + " | ".join(cells) + " |")
    cells = [_cell(_column(found, CPU_SETTING, s, "server_cpu_ms_per_grant"), 2) for s in systems]
    lines.append("| server CPU ms per grant (4 workers) | " + " | ".join(cells) + " |")
    cells = [
        "n/a" if (f := found["systems"][s]["fsyncs_per_grant"]) is None else f"{f:.2f}"
        for s in systems
    ]
    lines.append("| fsyncs per grant (strace, 1 process) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(found: dict[str, Any]) -> str:
    """Each Volcano system over etcd and ZooKeeper, per round: grants/s (above 1: faster) and
    handoff p50 (below 1: quicker)."""
    systems = list(found["systems"])
    ours = [s for s in systems if s.startswith("volcano")]
    theirs = [s for s in (ETCD, ZOOKEEPER) if s in systems]
    header = [f"{o} / {t}" for o in ours for t in theirs]
    lines = ["| setting | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    rows = [(setting, "grants_per_s") for setting, _, _ in SETTINGS]
    rows.insert(2, (CPU_SETTING, "handoff_p50_ms"))
    runs = found["runs"]
    for setting, field in rows:
        cells = []
        for o in ours:
            for t in theirs:
                per_round = [run[setting][o][field] / run[setting][t][field] for run in runs]
                cells.append(_cell(per_round, 2))
        label = setting if field == "grants_per_s" else "4 workers, hold 0: handoff p50 (ratio)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_peers(found: dict[str, Any]) -> None:
    print(
        f"\n== peers: {found['rounds']} interleaved round(s) of {found['seconds']:g} s,"
        f" median [min, max]; load after {found['load_after']} =="
    )
    print(table(found))
    print()
    print(ratios(found))
    print()
    print(client_table(found["client_cpu"]))
    print("\ndurability:")
    for name, system in found["systems"].items():
        print(f"- {name}: {system['durability']}")


def write_peers_chart(found: dict[str, Any], path: Path) -> bool:
    """Grants per second per setting and system (median, min-max), as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no peers chart")
        return False
    systems = list(found["systems"])
    settings = [setting for setting, _, _ in SETTINGS]
    fig, axis = plt.subplots(figsize=(11, 5))
    width = 0.85 / len(systems)
    for offset, system in enumerate(systems):
        values = [_column(found, s, system, "grants_per_s") for s in settings]
        medians = [statistics.median(v) for v in values]
        errors = [
            [m - min(v) for m, v in zip(medians, values, strict=True)],
            [max(v) - m for m, v in zip(medians, values, strict=True)],
        ]
        xs = [i + offset * width for i in range(len(settings))]
        axis.bar(xs, medians, width=width, yerr=errors, label=system, capsize=2)
    axis.set_xticks([i + 0.425 - width / 2 for i in range(len(settings))])
    axis.set_xticklabels([s.split(":")[0] for s in settings], fontsize=8)
    axis.set_yscale("log")  # the in-memory peers grant 10 to 30 times more
    axis.set_ylabel("grants (cycles) per second, median of rounds (log scale)")
    axis.legend(fontsize=7, ncol=2)
    axis.set_title(
        f"Lock grants per second, {found['rounds']} interleaved rounds of {found['seconds']:g} s"
        f" (load {found['load_after']})",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
