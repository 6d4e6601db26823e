"""Fixtures for the PostgreSQL-only tests: a database of their own, storages, projects."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.support.databases import fresh_postgres_database
from volcano_server._config import WaitingSettings
from volcano_server.locks._pulse import Pulse
from volcano_server.locks._registry import Registry
from volcano_server.locks._revocations import NoRevocations
from volcano_server.locks._transactions import Caller, Transactions
from volcano_server.storage._postgres import PostgresStorage
from volcano_server.telemetry._lockmetrics import LockMetrics


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for these tests (not the parametrized suite's)."""
    with fresh_postgres_database("volcano_pg") as url:
        yield url


@pytest.fixture
def storages(pg_url: str) -> Iterator[Callable[..., PostgresStorage]]:
    """Open PostgresStorage instances on the test database (each like one server process);
    all are closed at the end."""
    opened: list[PostgresStorage] = []

    def open_one(**kwargs: object) -> PostgresStorage:
        storage = PostgresStorage(pg_url, **kwargs)
        opened.append(storage)
        return storage

    yield open_one
    for storage in opened:
        storage.close()


@pytest.fixture
def project_id() -> int:
    """A project id no other test uses (locks and outcomes are keyed by project)."""
    return random.randint(1_000_000, 2**62)


def caller(project_id: int, request_id: str, *, replayable: bool = True) -> Caller:
    """A caller whose requests all have one fingerprint (as if the same request each time)."""
    return Caller(project_id, request_id, b"f" * 32 if replayable else None)


def service(storage: PostgresStorage) -> Transactions:
    """The lock transactions over `storage`, with the minimum retention (no waiting here)."""
    return Transactions(
        storage,
        Registry("tests"),
        retention_seconds=600,
        settings=WaitingSettings(),
        time_handoff=lambda _key, _seconds: None,
        changed=lambda _key: None,
        pulse=Pulse(3_000_000),
        revocations=NoRevocations(),
        metrics=LockMetrics(CollectorRegistry()),
    )
