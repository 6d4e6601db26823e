"""`python -m bench --only peers --quick` from the repository: the durable peers stay runnable.

One short round of every system (Volcano on SQLite and, when reachable, PostgreSQL; etcd's lock;
kazoo's Lock on ZooKeeper; redis-py's Lock; PostgreSQL advisory locks) and the client CPU rows,
as CI runs it so that the section cannot rot (about a minute). The bench installs etcd and
ZooKeeper when they are missing, which needs root; without root and without them the test
skips, or fails with VOLCANO_REQUIRE_PEERS=1.

No figure is judged here (speed is the bench's business): only that every system ran, was
granted the lock in every setting, and that the durable ones were counted fsyncing per grant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _peers
from bench._client_cpu import VARIANTS as CLIENT_VARIANTS
from bench._durable import SETTINGS
from bench._servers import postgres_available

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_quick_peers_bench_prints_every_system(tmp_path: Path) -> None:
    missing = [name for name in ("zookeeper", "etcd") if not _peers.installed(name)]
    if missing and os.geteuid() != 0:
        reason = f"{', '.join(missing)} not installed, and installing needs root"
        if os.environ.get("VOLCANO_REQUIRE_PEERS") == "1":
            pytest.fail(f"{reason}; VOLCANO_REQUIRE_PEERS=1 demands them", pytrace=False)
        pytest.skip(reason)
    command = [sys.executable, "-m", "bench", "--only", "peers", "--quick", "--out", str(tmp_path)]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=280, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "peers figures skipped" not in done.stdout, done.stdout[-3000:]

    systems = ["volcano (sqlite)", "etcd lock", "zookeeper (kazoo Lock)", "redis-py Lock"]
    if postgres_available():
        systems += ["volcano (postgres)", "pg advisory lock"]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| setting |"))
    for system in systems:
        assert f"| {system} " in header + " ", f"{system} missing from the table: {header}"
    for setting, _, _ in SETTINGS:
        assert f"| {setting} |" in done.stdout, f"no row for {setting!r}"
    for variant in CLIENT_VARIANTS:
        assert f"| {variant} |" in done.stdout, f"no client CPU row for {variant}"

    found = json.loads((tmp_path / "results.json").read_text())["peers"]
    assert set(found["systems"]) == set(systems)
    (run,) = found["runs"]
    for setting, workers, _ in SETTINGS:
        for system in systems:
            per_worker = run[setting][system]["grants_per_worker"]
            assert len(per_worker) == workers
            assert sum(per_worker) > 0, f"{system} granted nothing in {setting!r}"
    # The durable systems write before they answer: at least one fsync per grant was counted
    # (strace -f -c on their servers), where Redis without an append-only file counts none.
    fsyncs = {name: system["fsyncs_per_grant"] for name, system in found["systems"].items()}
    if all(value is not None for value in fsyncs.values()):
        for durable in ("volcano (sqlite)", "etcd lock", "zookeeper (kazoo Lock)"):
            assert fsyncs[durable] >= 1, fsyncs
        if found["systems"]["redis-py Lock"]["durability"].startswith("appendonly=no"):
            assert fsyncs["redis-py Lock"] < 0.1, fsyncs
