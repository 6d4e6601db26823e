"""The database fails over, or restarts, under load: issue 26.

Servers a and b run on a primary (pg1) with a synchronous standby (pg2), through the multi-host
URL `postgresql://pg1,pg2/db?target_session_attrs=read-write`: the tested configuration of
docs/production.md ("High availability"). Both clusters keep fsync on: what a failover keeps is
the point of these tests. Under load (the six contenders of the contention suite on one key,
waiting on every other attempt; probes on keys of their own through each server; long leases
acknowledged and renewed before the switch; waiters queued through both servers):

- the primary's processes are all killed at once (kill -9), or the primary is cut off the
  network (a black hole: no reset), and the standby is promoted `PROMOTE_AFTER` s later, as a
  failover manager would once it has made sure the primary is gone;
- the primary is restarted on its own data: fast shutdown, and immediate (crash recovery).

The judges: `history.check` on every grant and the fencing store's record of every write (no
token granted twice, tokens rising in real time, no two live leases overlapping, no stale write
accepted), every long lease still held afterwards with its token and its renewed expiry, and
the queued waiters served in their order across servers once the database is back. The figures
(printed): time from the fault to the first grant, each server's recovery, and every error the
clients saw meanwhile.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.fencing import FencingStore
from tests.faults.history import Grant, check
from tests.faults.test_contention import Contention, figures, grants_of
from tests.support.databases import scalar
from tests.support.netlab import Lab
from tests.support.private_postgres import PrivatePostgres
from tests.support.raw import Locks, new_id, wait_for

from ._clusters import clusters, deployed_on
from ._probes import BOUND, Prober
from .conftest import HOSTS, Deployment
from .test_database_link import Queue

pytestmark = [pytest.mark.netns, pytest.mark.slow]

PROMOTE_AFTER = 4.0
"""Seconds from the primary's failure to the standby's promotion: past the servers' heartbeat
lifetime (3 s), so every server looks dead on the new primary when they come back, as after
any real failover. With --long-faults, 15 s (Patroni's defaults promote after 10 to 30 s)."""
BEFORE = 2.0
"""Seconds of load before the fault."""
AFTER = 3.0
"""Seconds of load after every server serves again."""
HELD = 4
"""Long leases acquired (and renewed) before the fault."""
PATIENCE = 30.0


class Outage:
    """One way the database goes away and comes back."""

    def __init__(self, name: str, *, standby: bool) -> None:
        self.name = name
        self.standby = standby

    def __repr__(self) -> str:
        return self.name

    def run(
        self,
        lab: Lab,
        primary: PrivatePostgres,
        standby: PrivatePostgres | None,
        promote_after: float,
    ) -> float:
        """Break the database and bring it back; return when the primary had stopped serving
        (monotonic): every process killed or exited, or every link cut."""
        if self.name in ("fast-restart", "immediate-restart"):
            primary.stop("fast" if self.name == "fast-restart" else "immediate")
            began = time.monotonic()
            primary.start()
            return began
        if self.name == "kill-9":
            primary.kill()
        else:
            for host in HOSTS:
                if host != primary.host:
                    lab.cut(primary.host, host)
        began = time.monotonic()
        assert standby is not None
        time.sleep(max(0.0, began + promote_after - time.monotonic()))
        standby.promote()
        return began


OUTAGES = [
    Outage("kill-9", standby=True),
    Outage("network-cut", standby=True),
    Outage("fast-restart", standby=False),
    Outage("immediate-restart", standby=False),
]


class HeldLeases:
    """Leases acquired through a for an hour, then renewed through b: all acknowledged."""

    def __init__(self, d: Deployment) -> None:
        self._d = d
        with self._http("a") as a, self._http("b") as b:
            self.leases: dict[str, dict[str, Any]] = {}
            for n in range(HELD):
                key, owner = f"held-{n}", new_id()
                lease = Locks(a).acquire(key, owner, 3600).json()
                renewed = Locks(b).renew(key, owner, lease["fencing_token"], 7200)
                assert renewed.status_code == 200, renewed.text
                self.leases[key] = renewed.json()

    def _http(self, host: str) -> httpx.Client:
        server = self._d.a if host == "a" else self._d.b
        return httpx.Client(base_url=server.url, headers=self._d.project.headers(), timeout=60)

    def lost(self) -> list[str]:
        """The acknowledged leases the database no longer has as they were acknowledged."""
        with self._http("b") as b:
            states = {key: Locks(b).state(key) for key in self.leases}
        return [
            f"{key}: acknowledged {lease['fencing_token']} until {lease['expires_at']}, now {state}"
            for key, lease in self.leases.items()
            for state in [states[key]]
            if (state["held"], state["fencing_token"], state["expires_at"])
            != (True, lease["fencing_token"], lease["expires_at"])
        ]


@pytest.fixture(params=OUTAGES, ids=repr)
def outage(request: pytest.FixtureRequest) -> Outage:
    outage: Outage = request.param
    return outage


@pytest.fixture
def topology(
    lab: Lab, outage: Outage
) -> Iterator[tuple[Deployment, PrivatePostgres, PrivatePostgres | None]]:
    """The clusters, and servers a and b on them through the multi-host URL."""
    with (
        clusters(lab, standby=outage.standby) as (primary, standby),
        deployed_on(lab, primary, standby) as d,
    ):
        yield d, primary, standby


class TestDatabaseGoesAway:
    def test_nothing_acknowledged_is_lost(
        self,
        topology: tuple[Deployment, PrivatePostgres, PrivatePostgres | None],
        outage: Outage,
        lab: Lab,
        tmp_path: Path,
        long_faults: bool,
    ) -> None:
        """Under load through two servers, the primary fails (or restarts) and its synchronous
        standby is promoted: no fencing token granted twice or out of order, no acknowledged
        lease or renewal lost, no overlap, no stale write accepted; the servers serve again by
        themselves and the queued waiters are served in order across them."""
        d, primary, standby = topology
        urls = {"a": d.a.url, "b": d.b.url}
        with (
            FencingStore() as store,
            Contention(list(urls.values()), d.project, store, tmp_path, timeout=BOUND) as run,
            Prober(urls, d.project) as prober,
        ):
            run.wait_ready()
            held = HeldLeases(d)
            queue = Queue(d, "queue", b_wait=50.0)
            time.sleep(BEFORE)
            # Its lease runs out during the outage: the first hand-off comes as the database
            # does, before either server has beaten again.
            expiring = Queue(d, "queue-expiring", b_wait=30.0, held_for=1.5)
            promote_after = 15.0 if long_faults else PROMOTE_AFTER
            struck = time.monotonic()
            began = outage.run(lab, primary, standby, promote_after)
            back = time.monotonic()  # the standby promoted, or the primary restarted
            for server in urls:
                wait_for(
                    lambda server=server: _served_since(prober, server, back),
                    f"{server} to serve again",
                    PATIENCE,
                )
            served_again = {s: _served_since(prober, s, back) for s in urls}
            queue.release_holder()
            in_turn = {q: _served_in_turn(d, q) for q in (queue, expiring)}
            time.sleep(60.0 if long_faults else AFTER)
            journals = run.finish()
        writes = store.writes
        grants = grants_of(journals)
        report = {
            "outage": outage.name,
            "back_after_s": round(back - began, 2),
            "first_grant_after_fault_s": _first_grant(grants, prober, began),
            "first_grant_after_back_s": _first_grant(grants, prober, back),
            "served_again_after_back_s": {
                s: round(at - back, 2) for s, at in served_again.items() if at is not None
            },
            "client_errors": _client_errors(journals, prober, struck),
            "held_leases_checked": len(held.leases),
            **figures(journals, writes),
        }
        print(f"\n{outage.name} figures: {json.dumps(report)}")

        assert "DURABILITY" not in d.a.log + d.b.log  # the tested configuration is not warned of
        assert check(grants, writes, gapless=False) == []
        assert held.lost() == []
        for q, (first, second) in in_turn.items():
            # In order, not necessarily one token apart: a slot reserved for b's waiter while b
            # cannot yet hear of it (not reconnected) lapses and is reserved again, and each
            # reservation is a lease with a token of its own (gaps are allowed, rule 2).
            assert q.held["fencing_token"] < first < second, (q.key, first, second)
        assert {p.outcome for p in prober.probes} <= {200, 204, 503}
        assert report["late_writes_rejected"] == report["late_writes"]
        assert all(any(at > back for at in j["answers"]) for j in journals)
        assert any(g.sent > back for g in grants), "no grant after the database came back"


def _served_in_turn(d: Deployment, queue: Queue) -> list[int]:
    """The tokens granted to b's waiter then a's (b's released through b in between)."""
    try:
        first = queue.on_b.result()
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {_line(d, queue)}") from None
    assert first.status_code == 200, f"b's waiter, first in line: {first.text}; {_line(d, queue)}"
    token = first.json()["fencing_token"]
    with httpx.Client(base_url=d.b.url, headers=d.project.headers()) as b:
        released = Locks(b).release(queue.key, queue.on_b.owner, token)
    assert released.status_code == 204, released.text
    return [token, queue.on_a.lease["fencing_token"]]


def _line(d: Deployment, queue: Queue) -> str:
    """Where b's waiter stands, for a failure's message: how long it waited, and the line.

    Read through the URL naming both hosts, with a connect timeout: after a network cut the
    old primary, first in it, never answers a connection.
    """
    answered = queue.on_b.answered_at or time.monotonic()
    waited = (
        f"b's waiter on {queue.key} (wait {queue.b_wait} s) was answered or given up"
        f" {answered - queue.b_started:.1f} s after it began"
    )
    url = f"{d.database_url}&connect_timeout=3"
    try:
        line = scalar(
            url,
            "SELECT string_agg(server_id || ' ' || state || ' until '"
            " || coalesce(until_us::text, '-'), '; ' ORDER BY seq) FROM lock_waiters WHERE key = ?",
            (queue.key,),
        )
        now = scalar(url, "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint")
    except Exception as exc:  # a diagnostic never hides the failure it explains
        return f"{waited}; the line could not be read: {exc!r}"
    return f"{waited}; the line at {now} us: {line}"


def _served_since(prober: Prober, server: str, since: float) -> float | None:
    """When `server` first answered a probe sent after `since` with success, if it has."""
    return min(
        (p.ended for p in prober.of(server) if p.started > since and p.outcome in (200, 204)),
        default=None,
    )


def _first_grant(grants: Sequence[Grant], prober: Prober, since: float) -> float | None:
    """Seconds from `since` to the first lease granted (to a contender or a probe) for a
    request sent after it: after a kill or a cut, necessarily by the new primary."""
    contenders = [g.answered for g in grants if g.sent > since]
    probes = [
        p.ended
        for p in prober.probes
        if p.started > since and p.operation == "acquire" and p.outcome == 200
    ]
    answered = contenders + probes
    return round(min(answered) - since, 2) if answered else None


def _client_errors(journals: list[dict[str, Any]], prober: Prober, since: float) -> dict[str, Any]:
    """What clients saw go wrong from `since` on: the contenders' SDK errors by type, and the
    probes' failed answers by outcome."""
    seen = Counter(e["type"] for j in journals for e in j["errors"] if e["at"] > since)
    probes = Counter(
        str(p.outcome) for p in prober.probes if p.ended > since and p.outcome not in (200, 204)
    )
    return {"contenders": dict(seen), "probes": dict(probes)}
