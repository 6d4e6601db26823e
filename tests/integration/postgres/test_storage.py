"""PostgresStorage against a real database: locking, request ids, the clock, purging, errors."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.databases import admin_url, fresh_postgres_database, scalar
from volcano_server.storage import StorageUnavailable, StoredOutcome
from volcano_server.storage._postgres import NETWORK_DEFAULTS, PostgresStorage
from volcano_server.wire._wire import Answer

from .conftest import caller, service

pytestmark = pytest.mark.postgres

Storages = Callable[..., PostgresStorage]

# A COMMIT of the key "slow-commit" that takes 30 s: a deferred trigger runs in the COMMIT.
SLOW_COMMIT = """
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT OR UPDATE ON locks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.key = 'slow-commit')
    EXECUTE FUNCTION slow_commit();
"""


def new_id() -> str:
    return str(uuid.uuid4())


def race(count: int, action: Callable[[int], Answer]) -> list[Answer]:
    """Run `action(0..count-1)` in threads released together by a barrier."""
    barrier = threading.Barrier(count)

    def run(n: int) -> Answer:
        barrier.wait()
        return action(n)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


class TestConcurrency:
    def test_concurrent_acquires_grant_once(self, storages: Storages, project_id: int) -> None:
        """Sixteen acquisitions at once through two pools, first of a never-seen key and then
        of the same key after each release: one winner per round (none fails on the unique
        index), fencing tokens rising by one."""
        services = [service(storages(pool_size=8)) for _ in range(2)]
        for key in ("first-a", "first-b", "first-c"):
            tokens = []
            for _ in range(6):
                answers = race(
                    16,
                    lambda n, key=key: services[n % 2].acquire(
                        caller(project_id, new_id()), key, f"owner-{n}", 30
                    ),
                )
                statuses = sorted(answer.status for answer in answers)
                assert statuses == [200] + [409] * 15, statuses
                (lease,) = (json.loads(a.body) for a in answers if a.status == 200)
                tokens.append(lease["fencing_token"])
                released = services[0].release(
                    caller(project_id, new_id()), key, lease["owner_token"], lease["fencing_token"]
                )
                assert released.status == 204
            assert tokens == [1, 2, 3, 4, 5, 6]

    def test_concurrent_shared_acquires_all_hold_and_exclusive_ones_never_beside(
        self, storages: Storages, project_id: int
    ) -> None:
        """Sixteen shared acquires at once through two pools all hold, tokens 1 to 16; then,
        on a free key, eight shared and eight exclusive at once: either one exclusive holds
        alone or only shared ones hold, never both, and no token is issued twice."""
        services = [service(storages(pool_size=8)) for _ in range(2)]
        answers = race(
            16,
            lambda n: services[n % 2].acquire(
                caller(project_id, new_id()), "readers", f"owner-{n}", 30, shared=True
            ),
        )
        assert sorted(json.loads(a.body)["fencing_token"] for a in answers) == list(range(1, 17))
        for round_ in range(5):
            key = f"mixed-{round_}"
            answers = race(
                16,
                lambda n, key=key: services[n % 2].acquire(
                    caller(project_id, new_id()), key, f"owner-{n}", 30, shared=n % 2 == 0
                ),
            )
            granted = [n for n, answer in enumerate(answers) if answer.status == 200]
            tokens = [json.loads(answers[n].body)["fencing_token"] for n in granted]
            assert sorted(tokens) == list(range(1, len(granted) + 1))
            exclusive = [n for n in granted if n % 2]
            assert exclusive == [] or granted == exclusive[:1] == exclusive, granted

    def test_concurrent_duplicates_run_once_and_replay(
        self, storages: Storages, project_id: int
    ) -> None:
        """Sixteen copies of one request id sent at once through two pools: one runs, fifteen
        replay its answer."""
        services = [service(storages(pool_size=8)) for _ in range(2)]
        for round_ in range(15):
            rid, key = new_id(), f"dup-{round_}"
            answers = race(
                16,
                lambda n, rid=rid, key=key: services[n % 2].acquire(
                    caller(project_id, rid), key, "the-owner", 30
                ),
            )
            assert len({answer.body for answer in answers}) == 1
            assert sorted(answer.replayed for answer in answers) == [False] + [True] * 15
            assert json.loads(answers[0].body)["fencing_token"] == 1

    def test_duplicate_waits_for_the_first_transaction(
        self, storages: Storages, project_id: int
    ) -> None:
        """A duplicate request id blocks while the first transaction is open, then replays
        what it stored."""
        first, second = storages(), storages()
        rid = new_id()
        finished = threading.Event()
        answers: list[Answer] = []

        def duplicate() -> None:
            answers.append(service(second).force_release(caller(project_id, rid), "k"))
            finished.set()

        with first.write() as tx:
            assert tx.claim_request(project_id, rid) is None
            thread = threading.Thread(target=duplicate)
            thread.start()
            assert not finished.wait(0.5), "the duplicate did not wait for the first"
            now = tx.now_us()
            tx.save_outcome(
                project_id, rid, StoredOutcome(b"x" * 32, 200, b"{}", None, now + 10**9)
            )
        thread.join(timeout=10)
        assert finished.is_set()
        # The duplicate saw the first one's outcome (a different fingerprint: reused).
        assert answers[0].status == 409
        assert b"request_id_reused" in answers[0].body

    def test_expired_outcome_is_replaced(self, storages: Storages, project_id: int) -> None:
        """A stored outcome past its retention counts as absent, and the new one replaces it."""
        storage = storages()
        rid = new_id()
        with storage.write() as tx:
            assert tx.claim_request(project_id, rid) is None
            tx.save_outcome(project_id, rid, StoredOutcome(b"old", 200, b"{}", None, 1))
        with storage.write() as tx:
            assert tx.claim_request(project_id, rid) is None
            expires = tx.now_us() + 10**9
            tx.save_outcome(project_id, rid, StoredOutcome(b"new", 201, b"[]", 7, expires))
        with storage.write() as tx:
            assert tx.claim_request(project_id, rid) == StoredOutcome(
                b"new", 201, b"[]", 7, expires
            )

    def test_a_write_on_a_key_says_when_it_holds_the_key_s_row_lock(
        self, storages: Storages, pg_url: str, project_id: int
    ) -> None:
        """`on_locked` is called once, in the transaction's first round trip, when the key's row
        lock is held (another session cannot take it), before the transaction ends: the lane
        lets the next transaction on the key go then."""
        storage = storages()
        service(storage).acquire(caller(project_id, new_id()), "told", "o", 30)
        held: list[bool] = []

        def on_locked() -> None:
            with psycopg.connect(pg_url) as other:
                try:
                    other.execute(
                        "SELECT 1 FROM locks WHERE project_id = %s AND key = 'told'"
                        " FOR UPDATE NOWAIT",
                        (project_id,),
                    )
                except psycopg.errors.LockNotAvailable:
                    held.append(True)
                else:
                    held.append(False)

        with storage.write(key=(project_id, "told"), on_locked=on_locked) as tx:
            assert held == []  # nothing sent yet
            assert tx.load_lock(project_id, "told") is not None
            assert held == [True]
            tx.now_us()
        assert held == [True]


class TestRows:
    def test_keys_never_acquired_leave_no_row(
        self, storages: Storages, pg_url: str, project_id: int
    ) -> None:
        """Renew, release, force release and get of a key never taken store no lock row, and
        get still reports no fencing token."""
        locks = service(storages())
        locks.renew(caller(project_id, new_id()), "ghost", new_id(), 1, 30)
        locks.release(caller(project_id, new_id()), "ghost", new_id(), 1)
        assert json.loads(locks.force_release(caller(project_id, new_id()), "ghost").body) == {
            "key": "ghost",
            "released": False,
            "fencing_token": None,
            "released_count": 0,
        }
        assert json.loads(locks.get(caller(project_id, new_id()), "ghost").body) == {
            "key": "ghost",
            "held": False,
            "expires_at": None,
            "fencing_token": None,
            "limit": 1,
            "holders": [],
            "holder_count": 0,
            "waiters": 0,
            "version": 0,
        }
        rows = scalar(pg_url, "SELECT count(*) FROM locks WHERE project_id = ?", (project_id,))
        assert rows == 0

    def test_fencing_tokens_survive_release_and_expiry(
        self, storages: Storages, project_id: int
    ) -> None:
        """The key's row keeps the last token: release, force release and expiry never reset it."""
        locks = service(storages())
        tokens = []
        for n in range(3):
            lease = json.loads(locks.acquire(caller(project_id, new_id()), "k", f"o{n}", 0.1).body)
            tokens.append(lease["fencing_token"])
            if n == 0:
                locks.release(caller(project_id, new_id()), "k", "o0", lease["fencing_token"])
            elif n == 1:
                locks.force_release(caller(project_id, new_id()), "k")
        time.sleep(0.15)
        lease = json.loads(locks.acquire(caller(project_id, new_id()), "k", "late", 30).body)
        assert [*tokens, lease["fencing_token"]] == [1, 2, 3, 4]

    def test_a_page_is_read_from_one_snapshot(
        self, storages: Storages, project_id: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A key released while a page of the listing is being read does not end the listing
        early: the keys held throughout, after it, are still reached by following `next`."""
        locks = service(storages())
        owners = {}
        for name in ("p-a", "p-b", "p-c", "p-d"):
            owners[name] = json.loads(
                locks.acquire(caller(project_id, new_id()), name, new_id(), 30).body
            )
        other = service(storages())
        execute = psycopg.Connection.execute
        released = threading.Event()

        def then_release(conn: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
            result = execute(conn, query, *args, **kw)
            if "AS listed" in str(query) and not released.is_set():
                released.set()  # another server releases p-b right after the page's keys are read
                lease = owners["p-b"]
                done = other.release(
                    caller(project_id, new_id()),
                    "p-b",
                    lease["owner_token"],
                    lease["fencing_token"],
                )
                assert done.status == 204
            return result

        monkeypatch.setattr(psycopg.Connection, "execute", then_release)
        listed, after = [], ""
        while True:
            body = json.loads(
                locks.list_locks(
                    caller(project_id, new_id()), prefix="p-", after=after, limit=2
                ).body
            )
            listed += [state["key"] for state in body["locks"]]
            if body["next"] is None:
                break
            after = body["next"]
        assert released.is_set()
        assert {"p-a", "p-c", "p-d"} <= set(listed), listed
        assert listed == sorted(set(listed))


class TestClock:
    def test_now_is_the_database_clock(self, storages: Storages, pg_url: str) -> None:
        """Both transaction kinds read clock_timestamp(), not this process's clock."""

        def database_now_us() -> int:
            return int(
                scalar(pg_url, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
            )

        storage = storages()
        before = database_now_us()
        with storage.write() as tx:
            written = tx.now_us()
        with storage.read() as rtx:
            read = rtx.now_us()
        after = database_now_us()
        assert before <= written <= read <= after

    def test_clock_offset_moves_the_storage_clock(self, storages: Storages) -> None:
        """The test-only offset is added to the database clock."""
        plain, shifted = storages(), storages(clock_offset_us=lambda: 3_600_000_000)
        with plain.write() as tx:
            base = tx.now_us()
        with shifted.write() as tx:
            moved = tx.now_us()
        assert 3_600_000_000 <= moved - base < 3_610_000_000


class TestPurge:
    def test_concurrent_purges_delete_each_expired_outcome_once(
        self, storages: Storages, pg_url: str, project_id: int
    ) -> None:
        """Four pools purging in small batches at once delete every expired outcome exactly
        once, leave unexpired ones, and never wait on each other."""
        writer = storages()
        with writer.write() as tx:
            now = tx.now_us()
            for n in range(300):
                tx.save_outcome(
                    project_id, f"old-{n}", StoredOutcome(b"f", 200, b"{}", None, now - 1)
                )
            for n in range(5):
                tx.save_outcome(
                    project_id, f"new-{n}", StoredOutcome(b"f", 200, b"{}", None, now + 10**9)
                )
        purgers = [storages() for _ in range(4)]

        def purge_all(storage: PostgresStorage) -> int:
            total = 0
            while (deleted := storage.purge_outcomes(25)) > 0:
                total += deleted
            return total

        with ThreadPoolExecutor(4) as pool:
            deleted = sum(pool.map(purge_all, purgers))
        # Other tests' expired outcomes in this database may be purged too, never twice.
        left = scalar(
            pg_url, "SELECT count(*) FROM request_outcomes WHERE project_id = ?", (project_id,)
        )
        assert left == 5
        assert deleted >= 300


class TestFailures:
    def test_a_lock_wait_is_bounded(self, storages: Storages, pg_url: str, project_id: int) -> None:
        """A row lock held elsewhere makes the operation fail with StorageUnavailable after
        the lock timeout, rather than hang."""
        locks = service(storages(lock_timeout=0.5))
        locks.acquire(caller(project_id, new_id()), "held-row", "o", 30)
        with psycopg.connect(pg_url) as blocker:
            blocker.execute(
                "SELECT 1 FROM locks WHERE project_id = %s AND key = 'held-row' FOR UPDATE",
                (project_id,),
            )
            started = time.monotonic()
            with pytest.raises(StorageUnavailable) as raised:
                locks.acquire(caller(project_id, new_id()), "held-row", "other", 30)
            assert isinstance(raised.value.__cause__, psycopg.errors.LockNotAvailable)
            assert time.monotonic() - started < 3
            blocker.rollback()
        answer = locks.acquire(caller(project_id, new_id()), "held-row", "other", 30)
        assert answer.status == 409  # the first lease is still live: the row was untouched

    def test_no_session_state_is_left_on_connections(
        self, storages: Storages, pg_url: str, project_id: int
    ) -> None:
        """After every kind of operation, the pooled connection has no prepared statements and
        the settings of a fresh session: nothing a transaction-mode pooler would carry over."""
        storage = storages(pool_size=1)
        locks = service(storage)
        lease = json.loads(locks.acquire(caller(project_id, new_id()), "state", "o", 30).body)
        locks.renew(caller(project_id, new_id()), "state", "o", lease["fencing_token"], 30)
        locks.get(caller(project_id, new_id()), "state")
        locks.release(caller(project_id, new_id()), "state", "o", lease["fencing_token"])
        locks.acquire(caller(project_id, new_id(), replayable=False), "state", "o", 30)
        storage.purge_outcomes(10)
        query = (
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),"
            " current_setting('idle_in_transaction_session_timeout'),"
            " current_setting('transaction_isolation'), current_setting('tcp_user_timeout'),"
            " current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),"
            " (SELECT count(*) FROM pg_prepared_statements)"
        )
        with storage.read() as tx:
            used = tx._conn.execute(query).fetchone()  # the one pooled connection
        with psycopg.connect(pg_url) as fresh:
            assert used == fresh.execute(query).fetchone()

    def test_a_silent_server_is_given_up_within_the_transaction(
        self, storages: Storages, project_id: int
    ) -> None:
        """Inside each write transaction the database's side of the connection gives up on a
        silent server after 2 s, between statements (idle in transaction) or in the middle of
        a batch (TCP), below the 3 s lock timeout; the server's own side after 5 s."""
        storage = storages(pool_size=1)
        with storage.write() as tx:
            tx.now_us()
            row = tx._ask(  # the transaction's own connection
                "SELECT current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('tcp_user_timeout'), current_setting('tcp_keepalives_idle'),"
                " current_setting('tcp_keepalives_interval'), current_setting('lock_timeout')",
                (),
            ).fetchone()
            client = tx._conn.info.get_parameters()
        assert row == ("2s", "2000", "1", "1", "3s")
        assert {name: client[name] for name in NETWORK_DEFAULTS} == {
            "keepalives": "1",
            "keepalives_idle": "2",
            "keepalives_interval": "1",
            "keepalives_count": "3",
            "tcp_user_timeout": "5000",
        }

    def test_the_url_overrides_the_network_defaults(self, pg_url: str) -> None:
        """A libpq setting given in the URL wins over the server's default."""
        storage = PostgresStorage(
            pg_url + ("&" if "?" in pg_url else "?") + "tcp_user_timeout=9000"
        )
        try:
            with storage.read() as tx:
                assert tx._conn.info.get_parameters()["tcp_user_timeout"] == "9000"
        finally:
            storage.close()

    def test_a_commit_is_bounded(self, project_id: int) -> None:
        """A COMMIT that runs past the statement timeout (PostgreSQL disarms that timeout before
        committing: here a deferred trigger sleeps, as a commit waits for a synchronous standby
        that is away) is cancelled by the server itself, answered StorageUnavailable, and the
        connection it ran on is replaced."""
        with fresh_postgres_database("volcano_commit") as url:
            storage = PostgresStorage(url, statement_timeout=1.0, pool_size=1)
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(SLOW_COMMIT)
                locks = service(storage)
                started = time.monotonic()
                with pytest.raises(StorageUnavailable) as raised:
                    locks.acquire(caller(project_id, new_id()), "slow-commit", "o", 30)
                assert time.monotonic() - started < 5
                cause = raised.value.__cause__
                assert isinstance(cause, psycopg.errors.QueryCanceled)
                assert "user request" in str(cause)  # our cancel, not a timeout of the database
                answer = locks.acquire(caller(project_id, new_id()), "quick", "o", 30)
                assert answer.status == 200
            finally:
                storage.close()

    def test_closed_storage_is_unavailable(self, storages: Storages) -> None:
        """After close (server shutdown), operations fail as StorageUnavailable, not a crash."""
        storage = storages()
        storage.close()
        with pytest.raises(StorageUnavailable), storage.read() as tx:
            tx.now_us()


class TestSchema:
    def test_servers_need_no_create_privilege_once_migrated(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After `migrate` as the owner, a server whose role may only read and write the
        tables starts and serves: a current schema is only read. A role that cannot even read
        the replication views is served too, warned that durability could not be judged."""
        role = f"volcano_app_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_url(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        try:
            with fresh_postgres_database("volcano_roles") as url:
                PostgresStorage(url).close()
                with psycopg.connect(url, autocommit=True) as owner:
                    owner.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
                    owner.execute("REVOKE SELECT ON pg_catalog.pg_replication_slots FROM PUBLIC")
                    for grant in (
                        "GRANT USAGE ON SCHEMA public TO {}",
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}",
                    ):
                        owner.execute(sql.SQL(grant).format(sql.Identifier(role)))
                as_app = f"{url}?options=-c%20role%3D{role}"  # the session runs as the role
                with (
                    psycopg.connect(as_app) as app,
                    pytest.raises(psycopg.errors.InsufficientPrivilege),
                ):
                    app.execute("CREATE TABLE volcano_probe (n integer)")
                storage = PostgresStorage(as_app)
                try:
                    answer = service(storage).acquire(caller(1, new_id()), "k", "o", 30)
                finally:
                    storage.close()
                assert answer.status == 200
                assert "cannot tell what keeps a commit here" in caplog.text
        finally:
            with psycopg.connect(admin_url(), autocommit=True) as admin:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
