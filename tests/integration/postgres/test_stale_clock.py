"""A transaction that kept a lease live commits only while the clock is before its old expiry
(`WriteTx.commit_before`, issue 34): checked on the database clock in the COMMIT's own round
trip, and on SQLite just before COMMIT."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from volcano_server.storage import Lease, LockRow, StaleClock, Storage
from volcano_server.storage._postgres import PostgresStorage
from volcano_server.storage._sqlite import SQLiteStorage


def new_key() -> str:
    return f"stale-{uuid.uuid4()}"


def _save(storage: Storage, project_id: int, key: str, bound: Callable[[int], int]) -> None:
    """Save a key with one lease, bounding the commit by `bound(now)`."""
    with storage.write(key=(project_id, key)) as tx:
        now = tx.now_us()
        loaded = tx.load_lock(project_id, key)
        row = LockRow(project_id, key, 1, 1, (Lease(1, "owner", now + 10**6, 1.0),), 1)
        tx.save_lock(row, loaded)
        tx.commit_before(bound(now))


def _stored(storage: Storage, project_id: int, key: str) -> LockRow | None:
    with storage.read() as tx:
        return tx.load_lock(project_id, key)


@pytest.fixture(params=["sqlite", "postgres"])
def storage(
    request: pytest.FixtureRequest, tmp_path: Path, storages: Callable[..., PostgresStorage]
) -> Storage:
    if request.param == "sqlite":
        return SQLiteStorage(tmp_path / "stale.db", synchronous="normal")
    return storages()


def test_a_bound_still_ahead_commits(storage: Storage, project_id: int) -> None:
    """The clock at commit is before the bound: the transaction commits."""
    key = new_key()
    _save(storage, project_id, key, lambda now: now + 60 * 10**6)
    assert _stored(storage, project_id, key) is not None


def test_a_bound_passed_rolls_back(storage: Storage, project_id: int) -> None:
    """The clock at commit has reached the bound: StaleClock, and nothing was written."""
    key = new_key()
    with pytest.raises(StaleClock):
        _save(storage, project_id, key, lambda now: now)
    assert _stored(storage, project_id, key) is None
