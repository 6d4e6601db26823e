"""What the standby has when it matters: issue 26, one write at a time.

The replication link pg1 -> pg2 is slowed (`LAG` each way), so the standby is always that far
behind the primary, as across zones. Then:

- A lease is acquired, another renewed and a waiter queued, each acknowledged, and the primary
  is killed at once and the standby promoted. With a synchronous standby all three are there;
  with asynchronous replication they are lost, the next acquire is granted the very fencing
  token acknowledged before, and the servers warned of it at start.
- The standby is cut off: the primary's commits wait for it, with no timeout of PostgreSQL's
  own, until the server cancels the COMMIT at its statement timeout; PostgreSQL then commits
  it locally and says so only in a WARNING. The server answers 503 (outcome unknown), and
  replays of that outcome too, until the standby has it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.databases import queued
from tests.support.netlab import Lab
from tests.support.private_postgres import PrivatePostgres
from tests.support.raw import Locks, Waiter, new_id, wait_for

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


class TestAcknowledgedJustBeforeTheKill:
    @pytest.mark.parametrize("pair", [True], indirect=True, ids=["synchronous"])
    def test_a_synchronous_standby_has_every_acknowledged_write(
        self, pair: tuple[Deployment, PrivatePostgres, PrivatePostgres], lab: Lab
    ) -> None:
        """An acquire, a renewal and a waiter's place, each acknowledged less than the
        replication lag before the primary dies, are all on the promoted standby: the lease is
        held with its token, the renewal's expiry stands, the waiter is served next."""
        d, primary, standby = pair
        writes = self.write_and_kill(d, lab, primary, standby)
        lease, renewed, queue = writes["lease"], writes["renewed"], writes["queue"]
        with http(d, "b") as b:
            state = Locks(b).state("acquired")
            assert (state["held"], state["expires_at"], state["fencing_token"]) == (
                True,
                lease["expires_at"],
                lease["fencing_token"],
            )
            assert Locks(b).state("renewed")["expires_at"] == renewed["expires_at"]
            taken = Locks(b).acquire("acquired", new_id(), 30)
        assert taken.status_code == 409, taken.text
        holder, waiter = queue
        with http(d, "a") as a:
            assert Locks(a).release("queue", *holder).status_code == 204
        assert waiter.lease["fencing_token"] == holder[1] + 1
        assert "DURABILITY" not in d.a.log + d.b.log

    @pytest.mark.parametrize("pair", [False], indirect=True, ids=["asynchronous"])
    def test_asynchronous_replication_loses_them_and_reissues_a_token(
        self, pair: tuple[Deployment, PrivatePostgres, PrivatePostgres], lab: Lab
    ) -> None:
        """The same writes on asynchronous replication are lost by the failover: the next
        acquire is granted the fencing token acknowledged before (what the docs warn of, and
        what the servers warned of at start), and the renewal is undone."""
        d, primary, standby = pair
        assert "DURABILITY: asynchronous replication to 1 standby" in d.a.log
        writes = self.write_and_kill(d, lab, primary, standby, cut=True)
        lease, renewed = writes["lease"], writes["renewed"]
        with http(d, "b") as b:
            again = Locks(b).acquire("acquired", new_id(), 30)
            assert Locks(b).state("renewed")["expires_at"] != renewed["expires_at"]
        assert again.status_code == 200, again.text
        assert again.json()["fencing_token"] == lease["fencing_token"]

    def write_and_kill(
        self,
        d: Deployment,
        lab: Lab,
        primary: PrivatePostgres,
        standby: PrivatePostgres,
        *,
        cut: bool = False,
    ) -> dict[str, Any]:
        """Hold "queue" and "renewed" (before the lag), then with the lag: acquire "acquired",
        renew "renewed", queue a waiter on "queue" through b; kill the primary at once and
        promote the standby.

        `cut`: once the standby has the first writes, cut the replication link instead of
        slowing it. Asynchronous replication loses the later writes only if the standby has
        not received them when the primary dies: with a lag of `LAG`, only if the kill comes
        less than `LAG` after them, which a loaded machine does not promise (at load 14 the
        waiter's round trips took longer, and the standby had the renewal). A cut keeps the
        standby behind for as long as the writes and the kill take. (A synchronous primary's
        commits wait for the standby: there the lag stays, and a cut would hang them.)
        """
        with http(d, "a") as a:
            holder = new_id()
            held = Locks(a).acquire("queue", holder, 120).json()
            renewing = new_id()
            first = Locks(a).acquire("renewed", renewing, 600).json()
            if cut:
                written = primary.sql("SELECT pg_current_wal_lsn()")
                wait_for(
                    lambda: standby.sql(f"SELECT pg_last_wal_replay_lsn() >= '{written}'") == "t",
                    "the standby to replay the writes before the cut",
                    PATIENCE,
                )
                lab.cut("pg1", "pg2")
            else:
                lab.link("pg1", "pg2", delay=LAG)
            lease = Locks(a).acquire("acquired", new_id(), 600).json()
            renewed = Locks(a).renew("renewed", renewing, first["fencing_token"], 1200).json()
        waiter = Waiter(http(d, "b"), "queue", wait=2 * PATIENCE, ttl=30)
        wait_for(lambda: queued(d.database_url, "queue") == 1, "b's waiter in line", PATIENCE)
        primary.kill()
        standby.promote()
        serving(d)
        return {
            "lease": lease,
            "renewed": renewed,
            "queue": ((holder, held["fencing_token"]), waiter),
        }


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
