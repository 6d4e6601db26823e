"""Safety under contention and crashes: six contender processes on one key, a fencing store, and
a server killed with SIGKILL in the middle of the load.

Each contender (`_contender.py`) is a real process using the real SDK against a real
`volcano-server` process: three sync and three async clients, half using acquire / renew /
release by hand and half `with_lock`, each waiting in the key's queue (up to 1 s) on every other
attempt and polling on the others. Leases live 0.5 s; every third lease a holder pauses past
its ttl (sleep, or SIGSTOP of its whole process for the `with_lock` ones) and then makes a late
write. The history they report, with the fencing store's record of every write, must have the
properties `history.check` states. Run on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs
import pytest

import volcano
from tests.support.databases import process_database
from tests.support.raw import wait_for
from tests.support.server import Project, ServerProcess, create_project

from .fencing import FencingStore, Write
from .history import Grant, check

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

ROOT = Path(__file__).resolve().parents[2]
KEY = "contended"
TTL = 0.5
TIMEOUT = 5.0
CONTENDERS = [
    ("sync", "acquire"),
    ("sync", "guard"),
    ("async", "acquire"),
    ("async", "guard"),
    ("sync", "guard"),
    ("async", "acquire"),
]
WAIT = 1.0
"""Seconds a contender waits in the queue, on every other attempt."""
START_PATIENCE = 60.0
"""Upper bound on six interpreters starting on a busy two-core machine."""


class Contention:
    """The contender processes, started against `url` (a list: contender n uses url n mod its
    length), and their journals once they stop."""

    def __init__(
        self,
        url: str | list[str],
        project: Project,
        store: FencingStore,
        folder: Path,
        *,
        ttl: float = TTL,
        wait: float = WAIT,
        timeout: float = TIMEOUT,
        last_resort: float = 240.0,
    ) -> None:
        self.urls = [url] if isinstance(url, str) else url
        self.project = project
        self.store = store
        self.folder = folder
        self.settings = {"ttl": ttl, "wait": wait, "timeout": timeout}
        self.last_resort = last_resort
        self.stop_file = folder / "stop"
        self.processes: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def url_of(self, name: str) -> str:
        """The server the contender called `name` talks to."""
        names = [n for n, _, _ in self.processes]
        return self.urls[names.index(name) % len(self.urls)]

    def __enter__(self) -> Self:
        until = time.monotonic() + self.last_resort  # the test stops them far sooner
        for n, (client, style) in enumerate(CONTENDERS):
            name = f"c{n}-{client}-{style}"
            env = {**os.environ, **self.project.env(self.urls[n % len(self.urls)])}
            config = {
                "name": name,
                "client": client,
                "style": style,
                "key": KEY,
                **self.settings,
                "seed": n,
                "store": self.store.url,
                "stop_file": str(self.stop_file),
                "until": until,
                "out": str(self.folder / f"{name}.json"),
            }
            stderr = (self.folder / f"{name}.err").open("wb")
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults._contender", json.dumps(config)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            self.processes.append((name, process, stderr))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for _, process, stderr in self.processes:
            if process.poll() is None:
                process.kill()  # SIGKILL also ends a stopped process
            process.wait(30)
            stderr.close()

    def wait_ready(self) -> None:
        names = {name for name, _, _ in self.processes}
        wait_for(lambda: self.store.hellos == names, "every contender to start", START_PATIENCE)

    def finish(self) -> list[dict[str, Any]]:
        """Ask every contender to stop; return their journals once they have all exited."""
        self.stop_file.touch()
        journals = []
        for name, process, stderr in self.processes:
            code = process.wait(60)
            stderr.flush()
            log = (self.folder / f"{name}.err").read_text()
            assert code == 0, f"{name} exited with {code}:\n{log}"
            journals.append(json.loads((self.folder / f"{name}.json").read_text()))
        return journals


def grants_of(journals: list[dict[str, Any]]) -> list[Grant]:
    return [Grant.from_json(j["name"], g) for j in journals for g in j["grants"]]


def figures(journals: list[dict[str, Any]], writes: list[Write]) -> dict[str, Any]:
    """The numbers worth reporting about a run."""
    grants = grants_of(journals)
    return {
        "contenders": len(journals),
        "acquire_attempts": sum(j["attempts"] for j in journals),
        "refused_as_held": sum(j["held_elsewhere"] for j in journals),
        "granted_too_late_to_tell": sum(j["expired_before_answer"] for j in journals),
        "grants": len(grants),
        "grants_per_contender": {j["name"]: len(j["grants"]) for j in journals},
        "paused_leases": sum(g.paused for g in grants),
        "manual_renewals": sum(j["renewals"] for j in journals),
        "writes_accepted": sum(w.accepted for w in writes),
        "writes_rejected": sum(not w.accepted for w in writes),
        "late_writes": sum(w.phase == "late" for w in writes),
        "late_writes_rejected": sum(w.phase == "late" and not w.accepted for w in writes),
        "transport_errors": sum(len(j["errors"]) for j in journals),
        "replayed_answers": sum(j["replays"] for j in journals),
        "highest_token": max((g.token for g in grants), default=0),
    }


def new_project(database_url: str, tmp_path: Path, name: str) -> tuple[str, Project]:
    db = process_database(database_url, tmp_path / f"{name}.db")
    return db, create_project(db, f"{name}-{uuid.uuid4().hex[:8]}")


@pytest.mark.slow
class TestContention:
    LOAD = 12.0

    def test_six_processes_on_one_key(
        self,
        database_url: str,
        tmp_path: Path,
    ) -> None:
        """Six processes take one key for 12 s with 0.5 s leases, every third lease paused past
        its ttl: tokens unique, gapless and rising in real time; no two live leases overlap; no
        live holder is refused by the fencing store; every late write is refused."""
        db, project = new_project(database_url, tmp_path, "contention")
        with (
            ServerProcess(db, "--no-access-log") as server,
            FencingStore() as store,
            Contention(server.url, project, store, tmp_path) as run,
        ):
            run.wait_ready()
            time.sleep(self.LOAD)
            journals = run.finish()
        writes = store.writes
        numbers = figures(journals, writes)
        print(f"\ncontention figures: {json.dumps(numbers)}")

        assert check(grants_of(journals), writes, gapless=True) == []
        assert [j["errors"] for j in journals] == [[]] * len(journals)
        assert [j["no_successor"] for j in journals] == [0] * len(journals)
        assert numbers["grants"] >= 20
        assert numbers["late_writes"] >= len(CONTENDERS)
        assert numbers["late_writes_rejected"] == numbers["late_writes"]


@pytest.mark.slow
class TestCrash:
    BEFORE = 4.0
    OUTAGE = 1.0
    AFTER = 5.0
    HELD = 5

    def test_kill_9_in_the_middle_of_the_load(
        self,
        database_url: str,
        tmp_path: Path,
    ) -> None:
        """kill -9 of the server under the six contenders, then a restart on the same database
        and port: acknowledged leases are still held with their tokens, tokens keep rising
        across the restart, the history stays safe, and every contender recovers."""
        db, project = new_project(database_url, tmp_path, "crash")
        server = ServerProcess(db, "--no-access-log").start()
        try:
            held = self.hold_long_leases(server.url, project)
            with (
                FencingStore() as store,
                Contention(server.url, project, store, tmp_path) as run,
            ):
                run.wait_ready()
                time.sleep(self.BEFORE)
                killed_at = time.monotonic()
                server.kill()
                time.sleep(self.OUTAGE)
                server.start()
                restarted_at = time.monotonic()
                time.sleep(self.AFTER)
                journals = run.finish()
            still = self.states(server.url, project, held)
        finally:
            server.kill()
        writes = store.writes
        numbers = figures(journals, writes)
        print(f"\ncrash figures: {json.dumps(numbers)}")

        assert still == {key: (True, token) for key, token in held.items()}
        grants = grants_of(journals)
        assert check(grants, writes, gapless=False) == []
        before = [g.token for g in grants if g.answered < killed_at]
        after = [g.token for g in grants if g.sent > restarted_at]
        assert before, "no lease was granted before the kill"
        assert after, "no lease was granted after the restart"
        assert max(before) < min(after)
        assert numbers["transport_errors"] + numbers["replayed_answers"] > 0
        for journal in journals:
            assert any(at > restarted_at for at in journal["answers"]), journal["name"]
        assert numbers["late_writes_rejected"] == numbers["late_writes"]

    def hold_long_leases(self, url: str, project: Project) -> dict[str, int]:
        """Acquire HELD keys for an hour each; their acknowledged fencing tokens."""
        with volcano.Client(**project.client_args(url)) as client:
            return {
                f"held-{n}": client.locks.acquire(f"held-{n}", ttl=3600).fencing_token
                for n in range(self.HELD)
            }

    def states(self, url: str, project: Project, held: dict[str, int]) -> dict[str, Any]:
        with volcano.Client(**project.client_args(url)) as client:
            return {
                key: (state.held, state.fencing_token)
                for key in held
                for state in [client.locks.get(key)]
            }


def lease(token: int, worker: str, start: float, end: float, **changes: Any) -> Grant:
    """A grant requested at `start` s and expiring at `end` s (one clock, for brevity)."""
    made = Grant(
        worker=worker,
        token=token,
        owner=f"owner-{token}",
        sent=start - 0.01,
        answered=start + 0.01,
        granted_at_us=round(start * 1e6),
        expires_at_us=round(end * 1e6),
        release_sent=None,
        paused=False,
    )
    return attrs.evolve(made, **changes)


def write(seq: int, writer: str, token: int, at: float, *, accepted: bool, phase: str) -> Write:
    return Write(seq, writer, token, phase, accepted, round(at * 1e6))


CLEAN_GRANTS = [
    lease(1, "a", 1.0, 1.5, release_sent=1.2),
    lease(2, "b", 1.3, 1.8),
    lease(3, "c", 1.8, 2.3, paused=True),
    lease(4, "a", 2.4, 2.9),
]
CLEAN_WRITES = [
    write(0, "a", 1, 1.05, accepted=True, phase="begin"),
    write(1, "a", 1, 1.15, accepted=True, phase="end"),
    write(2, "b", 2, 1.35, accepted=True, phase="begin"),
    write(3, "c", 3, 1.85, accepted=True, phase="begin"),
    write(4, "a", 4, 2.45, accepted=True, phase="begin"),
    write(5, "c", 3, 2.50, accepted=False, phase="late"),
]


class TestHistoryCheck:
    """`history.check` itself: silent on a safe history, loud on each kind of violation."""

    def test_safe_history_passes(self) -> None:
        """A history with releases, expiries and a refused late write has no violation."""
        assert check(CLEAN_GRANTS, CLEAN_WRITES, gapless=True) == []

    @pytest.mark.parametrize(
        ("grants", "writes", "phrase"),
        [
            pytest.param(
                [*CLEAN_GRANTS[:3], lease(4, "a", 2.2, 2.9)],
                CLEAN_WRITES,
                "began 100.000 ms before lease 3",
                id="overlap",
            ),
            pytest.param(
                [*CLEAN_GRANTS[:3], lease(3, "a", 2.4, 2.9)],
                [],
                "fencing token 3 was granted 2 times",
                id="token-reused",
            ),
            pytest.param(
                [lease(2, "a", 1.0, 1.5, release_sent=1.2), lease(1, "b", 1.3, 1.8)],
                [],
                "yet is not lower",
                id="token-went-down",
            ),
            pytest.param(
                [CLEAN_GRANTS[0], lease(3, "b", 1.3, 1.8)],
                [],
                "fencing tokens [2] were issued",
                id="gap",
            ),
            pytest.param(
                CLEAN_GRANTS,
                [*CLEAN_WRITES[:5], write(5, "c", 3, 2.50, accepted=True, phase="late")],
                "late write #5",
                id="late-write-accepted",
            ),
            pytest.param(
                CLEAN_GRANTS,
                [*CLEAN_WRITES[:1], write(1, "a", 1, 1.15, accepted=False, phase="end")],
                "was refused while its lease 1 was live",
                id="live-holder-refused",
            ),
            pytest.param(
                CLEAN_GRANTS,
                [write(0, "b", 1, 1.05, accepted=True, phase="begin")],
                "names token 1, not its own",
                id="foreign-token",
            ),
        ],
    )
    def test_each_violation_is_reported(
        self, grants: list[Grant], writes: list[Write], phrase: str
    ) -> None:
        """Overlapping leases, a reused or falling token, an unseen token, an accepted late
        write, a refused live holder and a write under someone else's token are all caught."""
        problems = check(grants, writes, gapless=True)
        assert any(phrase in problem for problem in problems), problems
