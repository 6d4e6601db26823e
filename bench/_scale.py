"""Scale figures: many keys, a bounded request-id store, many guards, import time."""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from volcano_server.http._auth import hash_key

from ._measure import Summary
from ._servers import Keys, deployment, make_keys

# --- 1,000 vs 1,000,000 keys -------------------------------------------------------------------


def _project_id(database_url: str, keys: Keys) -> int:
    digest = hash_key(keys.service)
    if database_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_url[len("sqlite:///") :])) as conn:
            (project_id,) = conn.execute(
                "SELECT project_id FROM api_keys WHERE key_hash = ?", (digest,)
            ).fetchone()
        return int(project_id)
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT project_id FROM api_keys WHERE key_hash = %s", (digest,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def populate(database_url: str, project_id: int, count: int) -> None:
    """Insert `count` released keys (`k-0` ...) straight into the locks table."""
    if database_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_url[len("sqlite:///") :])) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO locks (project_id, key, fencing_token) VALUES (?, ?, 1)",
                ((project_id, f"k-{n}") for n in range(count)),
            )
            conn.commit()
        return
    import psycopg

    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO locks (project_id, key, fencing_token)"
            " SELECT %s, 'k-' || n, 1 FROM generate_series(0, %s - 1) AS n ON CONFLICT DO NOTHING",
            (project_id, count),
        )
        conn.execute("ANALYZE locks")


def acquire_latency(url: str, keys: Keys, population: int, samples: int) -> list[float]:
    """Seconds per acquire of random existing keys (each released right after, untimed)."""
    latencies = []
    with httpx.Client(base_url=url, headers=keys.headers()) as http:
        for _ in range(samples):
            key = f"k-{random.randrange(population)}"
            owner = str(uuid.uuid4())
            started = time.perf_counter()
            response = http.post(
                f"/v1/locks/{key}/acquire", json={"owner_token": owner, "ttl_seconds": 30}
            )
            latencies.append(time.perf_counter() - started)
            fence = response.json()["fencing_token"]
            http.post(
                f"/v1/locks/{key}/release", json={"owner_token": owner, "fencing_token": fence}
            )
    return latencies


def many_keys(
    backend: str, small: int, large: int, rounds: int, samples: int
) -> dict[str, Summary]:
    """Median acquire latency with `small` and with `large` keys in the database, interleaved."""
    with (
        deployment(backend, label=f"{backend} small") as few,
        deployment(backend, label=f"{backend} large") as many,
    ):
        for target, count in ((few, small), (many, large)):
            populate(target.database_url, _project_id(target.database_url, target.keys), count)
        medians: dict[str, list[float]] = {"small": [], "large": []}
        for _ in range(rounds):
            for name, target, count in (("small", few, small), ("large", many, large)):
                medians[name].append(
                    statistics.median(acquire_latency(target.urls[0], target.keys, count, samples))
                )
    ratio = Summary.of(
        [big / little for little, big in zip(medians["small"], medians["large"], strict=True)]
    )
    return {
        "small_s": Summary.of(medians["small"]),
        "large_s": Summary.of(medians["large"]),
        "ratio": ratio,
    }


# --- the request-id store under sustained load -------------------------------------------------


def bounded_outcomes(seconds: float, acceleration: float, clients: int = 2) -> dict[str, float]:
    """Run acquire/release with request ids for `seconds` against a server whose storage clock
    runs `acceleration` times faster (so the 600 s retention passes in 600/acceleration s), and
    sample how many stored outcomes there are. Returns the peak, the final count and the bound
    implied by the request rate and the retention."""
    import tempfile

    import uvicorn

    from volcano_server import ServerConfig, create_app
    from volcano_server.storage._sqlite import SQLiteStorage

    origin = time.time_ns() // 1000
    started_mono = time.monotonic()

    def fast_clock() -> int:
        return origin + int((time.monotonic() - started_mono) * acceleration * 1_000_000)

    with tempfile.TemporaryDirectory(prefix="volcano-bench-") as directory:
        path = Path(directory) / "retention.db"
        url = f"sqlite:///{path}"
        keys = make_keys(url)
        config = ServerConfig(database_url=url, access_log=False, purge_interval_seconds=1.0)
        app = create_app(config, storage=SQLiteStorage(path, clock=fast_clock))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        load = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench._load",
                base,
                keys.anon,
                keys.service,
                str(seconds),
                str(clients),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        samples: list[tuple[float, int]] = []  # (seconds since the load began, stored outcomes)
        began = time.monotonic()
        with contextlib.closing(sqlite3.connect(path)) as conn:
            while load.poll() is None:
                time.sleep(2.0)
                (count,) = conn.execute("SELECT count(*) FROM request_outcomes").fetchone()
                samples.append((time.monotonic() - began, count))
        requests_done = int((load.stdout.read() if load.stdout else "0").strip() or 0)
        server.should_exit = True
        thread.join(timeout=30)
    rate = requests_done / seconds
    retention_real = 600 / acceleration
    first_window = [count for at, count in samples if at <= retention_real]
    later = [count for at, count in samples if at > retention_real + config.purge_interval_seconds]
    return {
        "seconds": seconds,
        "acceleration": acceleration,
        "requests_per_second": rate,
        "retention_windows": seconds / retention_real,
        "rows_at_end_of_first_window": first_window[-1] if first_window else 0,
        "peak_rows_after_first_window": max(later, default=0),
        "rows_at_end": samples[-1][1] if samples else 0,
        "rate_times_retention": rate * retention_real,
        "samples": samples,
    }


# --- many guards, one key slowed -----------------------------------------------------------


def many_guards(count: int, ttl: float, hold: float, slow_delay: float) -> dict[str, Any]:
    """`count` with_lock guards held `hold` seconds in one child process per client kind, the
    renewals of one key held back `slow_delay` seconds each (bench/_guards.py)."""
    found: dict[str, Any] = {}
    for kind in ("sync", "async"):
        with deployment("sqlite", label=f"guards {kind}") as target:
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench._guards",
                    target.urls[0],
                    target.keys.anon,
                    target.keys.service,
                    kind,
                    str(count),
                    str(ttl),
                    str(hold),
                    str(slow_delay),
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=hold + count * 0.05 + 300,
            )
        found[kind] = json.loads(result.stdout)
    return found


# --- import time ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def runtime_only_python(root: Path = ROOT, venv: Path | None = None) -> str:
    """A venv holding volcano (of the checkout `root`) and its runtime dependencies only (not
    the dev tools, which make `import httpx` slower by loading click and rich): what users
    import in production."""
    venv = venv or ROOT / ".cache" / "bench-import-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".source"
    source = _source_stamp(root)
    if not python.exists() or not stamp.exists() or stamp.read_text() != source:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                str(root),
            ],
            check=True,
            capture_output=True,
        )
        stamp.write_text(source)
    return str(python)


def _source_stamp(root: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(
        [*root.glob("volcano/**/*.py"), *root.glob("generated/**/*.py"), root / "pyproject.toml"]
    ):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def import_seconds(python: str, modules: str) -> float:
    code = f"import time; t = time.perf_counter(); import {modules}; print(time.perf_counter() - t)"
    # -I (isolated): never import the source tree from the working directory instead of the
    # installed package.
    result = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True)
    return float(result.stdout)


READY = (
    "volcano, volcano._engine, volcano._models, _volcano_api.api.locks.acquire_lock,"
    " _volcano_api.models"
)
"""What a client's first acquire has loaded: volcano, the renewal machinery its Client makes,
the values its answer becomes (volcano loads those three on first use), and the generated
client's operation and models."""


def import_time(rounds: int, base: Path | None = None) -> dict[str, Summary]:
    """`import volcano` vs `import httpx` in fresh interpreters of a runtime-only venv, alternating;
    also volcano together with what its first request loads (`READY`). With `base`, that
    checkout's volcano too, from a runtime-only venv of its own, in the same rounds."""
    pythons = {"": runtime_only_python()}
    if base is not None:
        pythons["base_"] = runtime_only_python(
            base.resolve(), ROOT / ".cache" / "bench-import-base"
        )
    samples: dict[str, list[float]] = {"httpx": []}
    for _ in range(rounds):
        for prefix, python in pythons.items():
            samples.setdefault(f"{prefix}volcano", []).append(import_seconds(python, "volcano"))
            samples.setdefault(f"{prefix}volcano_ready", []).append(import_seconds(python, READY))
        samples["httpx"].append(import_seconds(pythons[""], "httpx"))

    def ratio(name: str) -> Summary:
        return Summary.of([v / h for v, h in zip(samples[name], samples["httpx"], strict=True)])

    found = {"httpx_s": Summary.of(samples["httpx"])}
    for prefix in pythons:
        found[f"{prefix}volcano_s"] = Summary.of(samples[f"{prefix}volcano"])
        found[f"{prefix}volcano_ready_s"] = Summary.of(samples[f"{prefix}volcano_ready"])
        found[f"{prefix}ratio"] = ratio(f"{prefix}volcano")
        found[f"{prefix}ready_ratio"] = ratio(f"{prefix}volcano_ready")
    return found


def main() -> None:
    """`python -m bench._scale --import [--base CHECKOUT] [--rounds N]`: the import figures."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench._scale")
    parser.add_argument("--import", dest="imports", action="store_true", required=True)
    parser.add_argument("--base", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    found = import_time(args.rounds, args.base)
    for name, summary in found.items():
        scale, unit = (1000, "ms") if name.endswith("_s") else (1, "x")
        print(
            f"{name:24} {summary.median * scale:.3f} [{summary.low * scale:.3f},"
            f" {summary.high * scale:.3f}] {unit}"
        )


if __name__ == "__main__":
    main()
