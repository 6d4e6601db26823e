"""Fixtures for the network-fault scenarios: real hosts on a network of their own.

    here --+                     here: this test process (the SDK, the fencing store, the
    a -----+-- the lab's switch        probes) and the contender processes it starts
    b -----+   (cut, delay, loss)   a, b: volcano-server processes, one PostgreSQL database
    db ----+                        db: a PostgreSQL cluster of the session's own
    pg1 ---+                        pg1, pg2: clusters a failover or restart test makes (and
    pg2 ---+                                  kills) for itself: a primary and its standby

Every packet between two hosts crosses the switch (tests/support/netlab.py), so a test can cut
the link between b and db, or between here and a, without RST or FIN: packets just vanish, as
across a real network that fails. The lab and the cluster live for the session; each test gets a
database and servers of its own, and every link is clean again after it.

These tests need root, network namespaces, TAP devices and the PostgreSQL binaries. Where the
machine lacks one they skip with the reason, unless VOLCANO_REQUIRE_NETNS=1 (CI): then they fail.
`--long-faults` runs them at the issues' full length (a 30 s black hole, 15 s before a standby
is promoted, 60 s of load).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import attrs
import pytest

from tests.support import netlab, private_postgres
from tests.support.netlab import Lab
from tests.support.private_postgres import PrivatePostgres
from tests.support.server import Project, ServerProcess, create_project

HOSTS = ("here", "a", "b", "db", "pg1", "pg2")
METRICS_PORT = 9787


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The hosts and their switch, for the whole session."""
    netlab.require(netlab.unavailable() or private_postgres.unavailable())
    with Lab(HOSTS) as made:
        yield made


@pytest.fixture(scope="session")
def postgres(lab: Lab) -> Iterator[PrivatePostgres]:
    """The PostgreSQL cluster on host db."""
    with PrivatePostgres(lab, "db") as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def clean_links(lab: Lab) -> Iterator[None]:
    """Every test starts and ends on a network without faults."""
    lab.reset()
    yield
    lab.reset()


@pytest.fixture
def long_faults(request: pytest.FixtureRequest) -> bool:
    """Whether to run at the issue's full length (--long-faults)."""
    return bool(request.config.getoption("--long-faults"))


@attrs.frozen
class Deployment:
    """Servers a and b on one fresh database, and a project's keys."""

    lab: Lab
    database_url: str
    project: Project
    a: ServerProcess
    b: ServerProcess

    def metrics_url(self, host: str) -> str:
        return f"http://{self.lab.address(host)}:{METRICS_PORT}/metrics"


@pytest.fixture
def deployment(lab: Lab, postgres: PrivatePostgres) -> Iterator[Deployment]:
    """volcano-server on hosts a and b (default settings), sharing a new database on db."""
    with deployed(lab, postgres.create_database()) as made:
        yield made


@contextlib.contextmanager
def deployed(lab: Lab, database_url: str) -> Iterator[Deployment]:
    """Servers a and b on `database_url` (a new database); their last log lines are printed
    when they stop."""
    project = create_project(database_url, "network")
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                ServerProcess(
                    database_url,
                    "--host",
                    lab.address(host),
                    "--no-access-log",
                    "--metrics-port",
                    str(METRICS_PORT),
                    "--metrics-host",
                    lab.address(host),
                    prefix=lab.command(host, []),
                )
            )
            for host in ("a", "b")
        ]
        yield Deployment(lab, database_url, project, *servers)
        for host, server in zip(("a", "b"), servers, strict=True):
            server.kill()  # shown by pytest only when the test failed
            print(f"--- server {host}, last lines:\n" + "".join(server.log.splitlines(True)[-60:]))
