"""What the standby has when it matters: issue 26, one write at a time.

- The standby is cut off: the primary's commits wait for it, with no timeout of PostgreSQL's
  own, until the server cancels the COMMIT at its statement timeout; PostgreSQL then commits
  it locally and says so only in a WARNING. The server answers 503 (outcome unknown), and
  replays of that outcome too, until the standby has it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.support.netlab import Lab
from tests.support.private_postgres import PrivatePostgres
from tests.support.raw import Locks, new_id, wait_for

from ._clusters import clusters, deployed_on
from ._probes import BOUND
from .conftest import Deployment

pytestmark = [pytest.mark.netns, pytest.mark.slow]

LAG = 0.5
"""Seconds of delay each way on the replication link."""
PATIENCE = 30.0


@pytest.fixture
def pair(
    lab: Lab, request: pytest.FixtureRequest
) -> Iterator[tuple[Deployment, PrivatePostgres, PrivatePostgres]]:
    """Servers a and b on pg1 and its standby pg2, synchronous or not (the test's param)."""
    synchronous: bool = request.param
    with (
        clusters(lab, standby=True, synchronous=synchronous) as (primary, standby),
        deployed_on(lab, primary, standby) as d,
    ):
        assert standby is not None
        yield d, primary, standby


def http(d: Deployment, host: str) -> httpx.Client:
    server = d.a if host == "a" else d.b
    return httpx.Client(base_url=server.url, headers=d.project.headers(), timeout=PATIENCE)


def serving(d: Deployment) -> None:
    """Wait until both servers answer requests that need the database."""
    for host in ("a", "b"):
        with http(d, host) as client:
            wait_for(
                lambda client=client: Locks(client).get("any").status_code == 200,
                f"{host} to serve again",
                PATIENCE,
            )


class TestStandbyAway:
    @pytest.mark.parametrize("pair", [True], indirect=True, ids=["synchronous"])
    def test_a_commit_without_the_standby_is_never_acknowledged(
        self, pair: tuple[Deployment, PrivatePostgres, PrivatePostgres], lab: Lab
    ) -> None:
        """With the synchronous standby cut off, an acquire's COMMIT waits for it until the
        server cancels it (5 s), and PostgreSQL commits it on the primary alone: the server
        answers 503, and so does a retry (its replay waits for the standby too); once the
        standby is back the retry replays the lease, which a failover then keeps."""
        d, primary, standby = pair
        request_id = str(uuid.uuid4())
        owner = new_id()
        lab.cut("pg1", "pg2")
        with http(d, "a") as a, http(d, "b") as b:
            started = time.monotonic()
            cut_short = Locks(a).acquire("alone", owner, 600, request_id=request_id)
            answered_in = time.monotonic() - started
            retried = Locks(b).acquire("alone", owner, 600, request_id=request_id)
            lab.heal("pg1", "pg2")
            wait_for(
                lambda: primary.sql("SELECT sync_state FROM pg_stat_replication") == "sync",
                "pg2 back as the synchronous standby",
                PATIENCE,
            )
            replayed = Locks(b).acquire("alone", owner, 600, request_id=request_id)
        assert cut_short.status_code == 503, cut_short.text
        assert answered_in <= BOUND
        assert retried.status_code == 503, retried.text
        assert replayed.status_code == 200, replayed.text
        assert replayed.headers["Idempotent-Replayed"] == "true"
        primary.kill()
        standby.promote()
        serving(d)
        with http(d, "a") as a:
            state = Locks(a).state("alone")
        assert (state["held"], state["fencing_token"]) == (True, replayed.json()["fencing_token"])
