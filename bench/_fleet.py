"""A fleet of guards in one process, two checkouts side by side (issue 23).

    python -m bench._fleet --base CHECKOUT [--only SCENARIO ...] [--import-rounds N]

For each scenario, and for each checkout (`CHECKOUT`, e.g. the code before a change extracted
with `git archive`, and this one), a fresh SQLite server of that checkout (its own
`volcano-server`, keys made by its own command) serves one child process that runs
`bench/_guards.py` of this checkout against that checkout's SDK (first on `PYTHONPATH`), so the
same harness measures both. The checkouts alternate within each scenario. Scenarios:

- `slow-sync`, `slow-async`: 10,000 guards (ttl 10 s), held 30 s, one key's renewals slowed 3 s;
- `fleet-sync`, `fleet-async`: 3,000 guards (ttl 6 s) held 15 s, no slow key;

and `import volcano` vs `import httpx`, each checkout in a venv of its runtime dependencies
only, alternating in fresh interpreters. Prints a Markdown table and writes
bench/results/fleet.json. Not part of CI (about 15 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from tests.support.server import ServerProcess

from ._measure import Summary
from ._scale import import_seconds, runtime_only_python

HERE = Path(__file__).resolve().parent.parent
GUARDS = Path(__file__).resolve().parent / "_guards.py"


@attrs.frozen
class Scenario:
    kind: str
    count: int
    ttl: float
    hold: float
    delay: float


SCENARIOS = {
    "slow-sync": Scenario("sync", 10_000, 10.0, 30.0, 3.0),
    "slow-async": Scenario("async", 10_000, 10.0, 30.0, 3.0),
    "fleet-sync": Scenario("sync", 3_000, 6.0, 15.0, 0.0),
    "fleet-async": Scenario("async", 3_000, 6.0, 15.0, 0.0),
}


@contextlib.contextmanager
def _server(checkout: Path) -> Iterator[tuple[ServerProcess, str, str]]:
    """A fresh SQLite server of `checkout`, and a project's keys made by its own command."""
    with tempfile.TemporaryDirectory(prefix="volcano-fleet-") as directory:
        url = f"sqlite:///{Path(directory) / 'fleet.db'}"
        command = ["keys", "create", "--project", "fleet", "--db", url]
        made = subprocess.run(
            [sys.executable, "-m", "volcano_server", *command],
            cwd=checkout,
            env=_env(checkout),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        anon = re.search(r"VOLCANO_ANON_KEY=(\S+)", made)
        service = re.search(r"VOLCANO_SERVICE_KEY=(\S+)", made)
        assert anon is not None, made
        assert service is not None, made
        server = ServerProcess(url, "--no-access-log", cwd=checkout, env=_env(checkout))
        server.start()
        try:
            yield server, anon.group(1), service.group(1)
        finally:
            server.terminate()


def _env(checkout: Path) -> dict[str, str]:
    """The environment that imports `checkout`'s volcano, generated client and server first."""
    path = os.pathsep.join([str(checkout), str(checkout / "generated")])
    return {**os.environ, "PYTHONPATH": path}


def run_guards(checkout: Path, scenario: Scenario) -> dict[str, Any]:
    """One run of `scenario` against `checkout`'s server and SDK."""
    with _server(checkout) as (server, anon, service):
        assert server.process is not None
        result = subprocess.run(
            [
                sys.executable,
                str(GUARDS),
                server.url,
                anon,
                service,
                scenario.kind,
                str(scenario.count),
                str(scenario.ttl),
                str(scenario.hold),
                str(scenario.delay),
                str(server.process.pid),
            ],
            cwd=tempfile.gettempdir(),
            env=_env(checkout),
            capture_output=True,
            text=True,
            check=False,
            timeout=scenario.hold + scenario.count * 0.05 + 300,
        )
    if result.returncode != 0:
        raise RuntimeError(f"bench/_guards.py failed against {checkout}:\n{result.stderr}")
    figures: dict[str, Any] = json.loads(result.stdout)
    figures["load_average"] = os.getloadavg()[0]
    return figures


def import_ratios(checkouts: dict[str, Path], rounds: int) -> dict[str, Any]:
    """`import volcano` / `import httpx` per checkout, alternating in fresh interpreters."""
    pythons = {
        name: runtime_only_python(path, HERE / ".cache" / f"fleet-import-{name}")
        for name, path in checkouts.items()
    }
    ratios: dict[str, list[float]] = {name: [] for name in checkouts}
    seconds: dict[str, list[float]] = {name: [] for name in checkouts}
    for _ in range(rounds):
        for name, python in pythons.items():
            httpx_s = import_seconds(python, "httpx")
            volcano_s = import_seconds(python, "volcano")
            seconds[name].append(volcano_s)
            ratios[name].append(volcano_s / httpx_s)
    return {
        name: {"ratio": attrs.asdict(Summary.of(ratios[name])), "volcano_s": seconds[name]}
        for name in checkouts
    }


def _table(results: dict[str, Any]) -> str:
    rows = [
        ("lost (besides the slow key)", "lost_besides_slow_key", "{:,}"),
        ("slow key lost", "slow_key_lost", "{}"),
        ("worst lease left, s", "worst_seconds_left", "{:.2f}"),
        ("client CPU per renewal, ms", "client_cpu_ms_per_renewal", "{:.3f}"),
        ("server CPU per renewal, ms", "server_cpu_ms_per_renewal", "{:.3f}"),
        ("requests/s at the server (held)", "held_requests_per_second", "{:,.0f}"),
        ("renewals/s (held)", "held_renewals_per_second", "{:,.0f}"),
        ("threads while held", "threads_during", "{}"),
        ("entering, s", "enter_seconds", "{:.1f}"),
        ("load average", "load_average", "{:.1f}"),
    ]
    names = [name for name in SCENARIOS if name in results]
    head = "| | " + " | ".join(f"{n}, {c}" for n in names for c in ("before", "after")) + " |"
    lines = [head, "|---" * (1 + 2 * len(names)) + "|"]
    for label, field, spec in rows:
        cells = []
        for name in names:
            for checkout in ("before", "after"):
                value = results[name][checkout].get(field)
                cells.append("-" if value is None else spec.format(value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._fleet")
    parser.add_argument("--base", type=Path, required=True, help="the checkout before")
    parser.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--import-rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=HERE / "bench" / "results" / "fleet.json")
    args = parser.parse_args()
    checkouts = {"before": args.base.resolve(), "after": HERE}
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M")}
    for name in args.only:
        results[name] = {}
        for checkout, path in checkouts.items():
            print(f"{name}, {checkout} ...", file=sys.stderr, flush=True)
            results[name][checkout] = run_guards(path, SCENARIOS[name])
            print(json.dumps(results[name][checkout]), file=sys.stderr, flush=True)
    if args.import_rounds:
        results["import"] = import_ratios(checkouts, args.import_rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(_table(results))
    for checkout in checkouts:
        if "import" in results:
            ratio = results["import"][checkout]["ratio"]
            print(
                f"import volcano / import httpx, {checkout}: {ratio['median']:.2f}"
                f" [{ratio['low']:.2f}, {ratio['high']:.2f}]"
            )


if __name__ == "__main__":
    main()
