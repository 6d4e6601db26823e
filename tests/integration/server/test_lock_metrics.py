"""The lock metrics (volcano_server/telemetry/_lockmetrics.py) of real servers under real
contention, scraped and parsed with prometheus-client's own parser: the waits and holds that clients
measured show in the histograms within a bucket, each outcome is counted where
docs/monitoring.md says, and servers sharing one database count each event once."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette

from tests.conftest import BACKENDS
from tests.support.databases import fresh_postgres_database
from tests.support.raw import Locks, Waiter, new_id, wait_for
from tests.support.sdk import Kind, Sdk
from tests.support.server import Project, ServerProcess, create_project, serve_in_thread
from volcano_server import ServerConfig, create_app
from volcano_server.storage import open_storage

pytestmark = pytest.mark.slow


class Scrape:
    """One scrape of a server's registry, read back through prometheus-client's parser."""

    def __init__(self, app: Starlette) -> None:
        text = generate_latest(app.state.metrics.registry).decode()
        self.text = text
        self.samples: list[Sample] = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sample called `name` whose labels include `labels` (0 when there is none)."""
        found = [
            s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()
        ]
        assert len(found) <= 1, (name, labels, found)
        return found[0] if found else 0.0

    def buckets(self, histogram: str, **labels: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) of each of a histogram's buckets, in order."""
        found = [
            (float(s.labels["le"]), s.value)
            for s in self.samples
            if s.name == f"{histogram}_bucket" and labels.items() <= s.labels.items()
        ]
        assert found, (histogram, labels)
        return sorted(found)


def within_a_bucket(measured: list[float], buckets: list[tuple[float, float]]) -> None:
    """Assert that the histogram holds `measured` give or take one bucket each.

    With values matched in order, each server observation lies in the bucket of the client's
    measurement or the next one over, either side: for every bound b_i, the server's count up
    to b_i is at least the client's up to b_(i-1), and the client's up to b_i at least the
    server's up to b_(i-1); and there are as many of each.
    """
    assert buckets[-1][1] == len(measured), (buckets, sorted(measured))
    previous_server = previous_client = 0.0
    for bound, server in buckets:
        client = up_to(bound, measured)
        assert server >= previous_client, (bound, buckets, sorted(measured))
        assert client >= previous_server, (bound, buckets, sorted(measured))
        previous_server, previous_client = server, client


def each_at_most(buckets: list[tuple[float, float]], bounds: list[float]) -> None:
    """Assert that the observations, matched in order, are each at most one of `bounds`."""
    for bound, server in buckets:
        assert server >= up_to(bound, bounds), (bound, buckets, sorted(bounds))


def each_at_least(buckets: list[tuple[float, float]], bounds: list[float]) -> None:
    """Assert that the observations, matched in order, are each at least one of `bounds`."""
    for bound, server in buckets:
        assert server <= up_to(bound, bounds), (bound, buckets, sorted(bounds))


def up_to(bound: float, values: list[float]) -> float:
    return float(sum(1 for value in values if value <= bound))


@attrs.frozen
class Metered:
    """A server in this process with the lock metrics labelled by `prefix`."""

    app: Starlette
    url: str
    project: Project
    prefix: str

    def key(self) -> str:
        return f"{self.prefix}{new_id()[:8]}"

    def scrape(self) -> Scrape:
        return Scrape(self.app)

    @contextlib.contextmanager
    def locks(self) -> Iterator[Locks]:
        with httpx.Client(base_url=self.url, headers=self.project.headers(), timeout=30) as http:
            yield Locks(http)

    def http(self, **options: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.project.headers(), **options)  # type: ignore[arg-type]


@contextlib.contextmanager
def metered(
    database_url: str, project: Project | None = None, prefix: str = ""
) -> Iterator[Metered]:
    """A server on `database_url` whose lock metrics are labelled by a prefix of its own."""
    prefix = prefix or f"m{new_id()[:6]}-"
    project = project or create_project(database_url, f"metrics-{new_id()[:8]}")
    config = ServerConfig(
        database_url=database_url, access_log=False, metric_key_prefixes=(prefix,)
    )
    app = create_app(config)
    with serve_in_thread(app) as url:
        yield Metered(app, url, project, prefix)


def in_threads(work: list[Callable[[], None]]) -> None:
    """Run each of `work` in a thread of its own, and re-raise the first failure."""
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,), daemon=True) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not [t for t in threads if t.is_alive()], "a contender did not finish"
    if failures:
        raise failures[0]


@attrs.frozen
class Turn:
    """One client's turn with the lock, by its monotonic clock."""

    called: float  # acquire called
    granted: float  # acquire returned
    releasing: float  # release called
    released: float  # release returned


class TestContention:
    def test_waits_and_holds_are_what_the_clients_measured(
        self, database_url: str, client_kind: Kind
    ) -> None:
        """Five SDK clients queue behind a holder on one key and each holds it a while: the
        server's wait and hold histograms hold what the clients measured, within a bucket
        (each wait no longer than its client's call, each hold no shorter than the time between
        its client's calls), and every grant and place in line is counted."""
        contenders = 5
        turns: list[Turn] = []
        with metered(database_url) as server, server.locks() as locks:
            key = server.key()
            clients = [
                Sdk(client_kind, server.project.client_args(server.url)) for _ in range(contenders)
            ]
            lock = threading.Lock()

            def contend(index: int) -> Callable[[], None]:
                def run() -> None:
                    sdk = clients[index]
                    called = time.monotonic()
                    lease = sdk.acquire(key, ttl=30, wait=30)
                    granted = time.monotonic()
                    time.sleep(0.1 + 0.03 * index)
                    releasing = time.monotonic()
                    sdk.release(key, lease)
                    with lock:
                        turns.append(Turn(called, granted, releasing, time.monotonic()))

                return run

            try:
                owner = new_id()
                called = time.monotonic()
                first = locks.acquire(key, owner, 30)
                granted = time.monotonic()
                assert first.status_code == 200, first.text
                queue = threading.Thread(
                    target=in_threads, args=([contend(i) for i in range(contenders)],), daemon=True
                )
                queue.start()
                wait_for(lambda: locks.state(key)["waiters"] == contenders, "all five in line", 20)
                time.sleep(0.1)
                releasing = time.monotonic()
                assert locks.release(key, owner, first.json()["fencing_token"]).status_code == 204
                first_turn = Turn(called, granted, releasing, time.monotonic())
                queue.join(60)
            finally:
                for sdk in clients:
                    sdk.close()
            assert len(turns) == contenders
            scrape = server.scrape()
        prefix = server.prefix
        waits = scrape.buckets("volcano_lock_wait_seconds", outcome="granted", key_prefix=prefix)
        within_a_bucket([t.granted - t.called for t in turns], waits)
        each_at_most(waits, [t.granted - t.called for t in turns])
        holds = scrape.buckets("volcano_lock_hold_seconds", outcome="released", key_prefix=prefix)
        everyone = [first_turn, *turns]
        within_a_bucket([t.released - t.granted for t in everyone], holds)
        each_at_least(holds, [t.releasing - t.granted for t in everyone])
        grants = "volcano_lock_grants_total"
        assert scrape.value(grants, outcome="immediate", key_prefix=prefix) == 1
        assert scrape.value(grants, outcome="after_wait", key_prefix=prefix) == contenders
        # They joined one after another, each behind all who had joined before.
        ahead = "volcano_lock_waiters_ahead"
        assert scrape.value(f"{ahead}_count", key_prefix=prefix) == contenders
        assert scrape.value(f"{ahead}_sum", key_prefix=prefix) == sum(range(contenders))
        assert scrape.value("volcano_lock_expiries_total", key_prefix=prefix) == 0


class TestOutcomes:
    def test_an_expired_lease_is_an_expiry_held_its_ttl(self, database_url: str) -> None:
        """A holder that never releases (ttl 0.3 s) is counted as an expiry, held 0.3 s, once
        the timer of the server holding a waiter hands the key over."""
        with metered(database_url) as server, server.locks() as locks:
            key = server.key()
            assert locks.acquire(key, new_id(), 0.3).status_code == 200
            waiter = Waiter(server.http(timeout=30), key, wait=10)
            assert waiter.result().status_code == 200
            scrape = server.scrape()
        prefix = server.prefix
        assert scrape.value("volcano_lock_expiries_total", key_prefix=prefix) == 1
        holds = scrape.buckets("volcano_lock_hold_seconds", outcome="expired", key_prefix=prefix)
        assert dict(holds)[0.25] == 0
        assert dict(holds)[0.5] == 1
        assert (
            scrape.value("volcano_lock_grants_total", outcome="after_wait", key_prefix=prefix) == 1
        )

    def test_each_way_a_wait_ends_is_counted(self, database_url: str) -> None:
        """A wait that runs out, a waiter whose client leaves, and one granted are each counted
        under their own outcome; the one that ran out waited at least its wait."""
        with metered(database_url) as server, server.locks() as locks:
            key = server.key()
            owner = new_id()
            held = locks.acquire(key, owner, 30).json()
            assert locks.acquire(key, new_id(), 30, wait=0.3).status_code == 409
            with pytest.raises(httpx.ReadTimeout), server.http(timeout=0.3) as impatient:
                Locks(impatient).acquire(key, new_id(), 30, wait=10)
            wait_for(
                lambda: (
                    server.scrape().value(
                        "volcano_lock_wait_seconds_count",
                        outcome="client_left",
                        key_prefix=server.prefix,
                    )
                    == 1
                ),
                "the leaver counted",
            )
            waiter = Waiter(server.http(timeout=30), key, wait=10)
            wait_for(lambda: locks.state(key)["waiters"] == 1, "the waiter in line")
            assert locks.release(key, owner, held["fencing_token"]).status_code == 204
            assert waiter.result().status_code == 200
            scrape = server.scrape()
        prefix = server.prefix
        timed_out = scrape.buckets(
            "volcano_lock_wait_seconds", outcome="timed_out", key_prefix=prefix
        )
        assert timed_out[-1][1] == 1
        assert dict(timed_out)[0.25] == 0
        assert (
            scrape.value("volcano_lock_wait_seconds_count", outcome="granted", key_prefix=prefix)
            == 1
        )

    def test_grants_ends_and_fence_checks_by_outcome(self, database_url: str) -> None:
        """An acquire by the holder's own token is already_held; a force release ends a lease as
        force_released; fence checks count live and not_live; a key outside the allow-list
        counts under _other."""
        with metered(database_url) as server, server.locks() as locks:
            key = server.key()
            owner = new_id()
            lease = locks.acquire(key, owner, 30).json()
            assert locks.acquire(key, owner, 30).status_code == 200
            assert locks.check(key, lease["fencing_token"]).json()["live"] is True
            assert locks.check(key, lease["fencing_token"] + 1).json()["live"] is False
            assert locks.force_release(key).json()["released"] is True
            assert locks.check(key, lease["fencing_token"]).json()["live"] is False
            other = f"elsewhere-{new_id()[:8]}"
            assert locks.acquire(other, new_id(), 30).status_code == 200
            scrape = server.scrape()
        prefix = server.prefix
        grants = "volcano_lock_grants_total"
        assert scrape.value(grants, outcome="immediate", key_prefix=prefix) == 1
        assert scrape.value(grants, outcome="already_held", key_prefix=prefix) == 1
        assert scrape.value(grants, outcome="immediate", key_prefix="_other") == 1
        assert (
            scrape.value(
                "volcano_lock_hold_seconds_count", outcome="force_released", key_prefix=prefix
            )
            == 1
        )
        checks = "volcano_fence_checks_total"
        assert scrape.value(checks, result="live", key_prefix=prefix) == 1
        assert scrape.value(checks, result="not_live", key_prefix=prefix) == 2
        assert key not in scrape.text
        assert other not in scrape.text
        assert owner not in scrape.text


class TestSeveralServers:
    def test_a_hold_is_measured_by_the_server_that_ends_it(self, database_url: str) -> None:
        """A lease granted through one server and released through another 0.3 s later: the
        second measures the hold from the grant time stored with the lease; the first counts
        the grant and no hold."""
        project = create_project(database_url, f"metrics-{new_id()[:8]}")
        prefix = f"m{new_id()[:6]}-"
        with (
            metered(database_url, project, prefix) as a,
            metered(database_url, project, prefix) as b,
        ):
            key = a.key()
            owner = new_id()
            with a.locks() as via_a, b.locks() as via_b:
                lease = via_a.acquire(key, owner, 30).json()
                time.sleep(0.3)
                assert via_b.release(key, owner, lease["fencing_token"]).status_code == 204
            at_a, at_b = a.scrape(), b.scrape()
        assert at_a.value("volcano_lock_grants_total", outcome="immediate", key_prefix=prefix) == 1
        assert (
            at_a.value("volcano_lock_hold_seconds_count", outcome="released", key_prefix=prefix)
            == 0
        )
        assert at_b.value("volcano_lock_grants_total", outcome="immediate", key_prefix=prefix) == 0
        holds = dict(
            at_b.buckets("volcano_lock_hold_seconds", outcome="released", key_prefix=prefix)
        )
        assert (holds[0.25], holds[0.5]) == (0, 1)

    def test_a_hand_over_between_servers_is_counted_once(self, database_url: str) -> None:
        """A key released through one server to a request waiting on another: the waiting
        server counts the grant (handed_over) and the wait; the releasing one, the hold."""
        project = create_project(database_url, f"metrics-{new_id()[:8]}")
        prefix = f"m{new_id()[:6]}-"
        with (
            metered(database_url, project, prefix) as a,
            metered(database_url, project, prefix) as b,
        ):
            key = a.key()
            owner = new_id()
            with a.locks() as via_a:
                lease = via_a.acquire(key, owner, 30).json()
                waiter = Waiter(b.http(timeout=30), key, wait=20)
                wait_for(lambda: via_a.state(key)["waiters"] == 1, "the waiter in line on b")
                assert via_a.release(key, owner, lease["fencing_token"]).status_code == 204
                assert waiter.result().status_code == 200
            at_a, at_b = a.scrape(), b.scrape()
        grants = "volcano_lock_grants_total"
        assert at_b.value(grants, outcome="handed_over", key_prefix=prefix) == 1
        assert at_a.value(grants, outcome="handed_over", key_prefix=prefix) == 0
        assert at_a.value(grants, outcome="after_wait", key_prefix=prefix) == 0
        assert (
            at_b.value("volcano_lock_wait_seconds_count", outcome="granted", key_prefix=prefix) == 1
        )
        assert (
            at_a.value("volcano_lock_hold_seconds_count", outcome="released", key_prefix=prefix)
            == 1
        )
        assert (
            at_b.value("volcano_lock_hold_seconds_count", outcome="released", key_prefix=prefix)
            == 0
        )


class TestUpgrade:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_a_lease_from_before_the_upgrade_is_dated_by_its_last_renewal(
        self, backend: str, tmp_path: Path
    ) -> None:
        """A live lease stored before leases had a grant time gets the latest time it can have
        been granted (its expiry less its ttl), so its hold is measured, never unknown."""
        expires_us = 4_000_000_000_000_000
        lease = (1, "old-key", 3, new_id(), expires_us, 30.0)
        with previous_version_database(backend, tmp_path, lease) as url:
            storage = open_storage(url)
            try:
                with storage.read() as tx:
                    row = tx.load_lock(1, "old-key")
            finally:
                storage.close()
        assert row is not None
        assert [x.granted_at_us for x in row.leases] == [expires_us - 30_000_000]


@contextlib.contextmanager
def previous_version_database(
    backend: str, tmp_path: Path, lease: tuple[object, ...]
) -> Iterator[str]:
    """A database at the schema version before grant times, holding `lease` (project id, key,
    fencing token, owner token, expiry, ttl), made by the backends' own migration steps."""
    insert_lock = "INSERT INTO locks (project_id, key, fencing_token) VALUES"
    insert_lease = (
        "INSERT INTO leases (project_id, key, fencing_token, owner_token, expires_at_us,"
        " ttl_seconds) VALUES"
    )
    if backend == "sqlite":
        from volcano_server.storage._sqlite import _upgrade

        path = tmp_path / "before.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            _upgrade(conn, str(path), target=4)
            conn.execute(f"{insert_lock} (?, ?, ?)", lease[:3])
            conn.execute(f"{insert_lease} (?, ?, ?, ?, ?, ?)", lease)
        yield f"sqlite:///{path}"
        return
    import psycopg

    from volcano_server.storage._postgres import _MIGRATIONS

    with fresh_postgres_database("volcano_before") as url:
        with psycopg.connect(url) as conn:
            for version in range(1, 6):
                for statement in _MIGRATIONS[version]:
                    conn.execute(statement)
            conn.execute("CREATE TABLE volcano_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO volcano_schema (version) VALUES (5)")
            conn.execute(f"{insert_lock} (%s, %s, %s)", lease[:3])
            conn.execute(f"{insert_lease} (%s, %s, %s, %s, %s, %s)", lease)
        yield url


class TestCommandLine:
    def test_prefixes_label_the_metrics_the_listener_serves(self, tmp_path: Path) -> None:
        """`serve --metrics-key-prefix jobs:` labels the lock metrics it serves on the metrics
        listener by that prefix, and every other key as _other."""
        db = f"sqlite:///{tmp_path / 'volcano.db'}"
        args = ("--metrics-port", "0", "--metrics-key-prefix", "jobs:", "--no-access-log")
        with ServerProcess(db, *args) as server:
            listener = re.search(r"metrics on (http://\S+)", server.log)
            assert listener is not None, server.log
            project = create_project(db, "demo")
            with httpx.Client(base_url=server.url, headers=project.headers(), timeout=30) as http:
                for key in ("jobs:nightly", "reports"):
                    assert Locks(http).acquire(key, new_id(), 30).status_code == 200
            families = text_string_to_metric_families(httpx.get(listener.group(1), timeout=10).text)
            grants = {
                sample.labels["key_prefix"]: sample.value
                for family in families
                if family.name == "volcano_lock_grants"
                for sample in family.samples
                if sample.labels["outcome"] == "immediate" and sample.name.endswith("_total")
            }
        assert grants == {"jobs:": 1, "_other": 1}

    def test_a_bad_prefix_is_one_line(self, tmp_path: Path) -> None:
        """A prefix no key could start with stops `serve` with one line naming it."""
        result = subprocess.run(
            [sys.executable, "-m", "volcano_server", "serve", "--port", "0",
             "--db", f"sqlite:///{tmp_path / 'v.db'}", "--metrics-key-prefix", "no spaces"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert "'no spaces'" in result.stderr
