"""client.elections with both clients, against the real server (and a second one on its database).

Candidates are clients of their own, each campaigning in a thread; whether one is in line is
read from the server (the key's `waiters`), never guessed by sleeping. Crashes and partitions
are in tests/faults/test_elections.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs
import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import Candidate, Sdk, Stream
from tests.support.server import serve_in_thread
from volcano_server import ServerConfig, create_app


def in_line(server: Locks, name: str, count: int) -> None:
    """Wait until `count` candidates wait in the election's line."""
    wait_for(lambda: server.state(name)["waiters"] == count, f"{count} in line")


class TestCampaign:
    def test_the_leadership_is_a_guard_whose_term_is_its_fencing_token(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """Elected: the term is the lease's fencing token; leader() names this candidate;
        leaving resigns, and the office is vacant."""
        with sdk.campaign(key, label="me:1", ttl=10) as leadership:
            assert isinstance(leadership, volcano.Leadership | volcano.AsyncLeadership)
            assert leadership.term == leadership.lease.fencing_token == 1
            assert (leadership.name, leadership.label, leadership.lost) == (key, "me:1", False)
            leadership.check()
            assert sdk.leader(key) == volcano.Leader("me:1", 1)
            assert sdk.leader(key) == ("me:1", 1)
        assert sdk.leader(key) is None
        assert server.state(key)["held"] is False

    def test_proclaim_shows_a_new_label(self, sdk: Sdk, key: str) -> None:
        """proclaim() renews with a new label; the term stays; None clears it."""
        with sdk.campaign(key, label="a", ttl=10) as leadership:
            sdk.proclaim(leadership, "b")
            assert (sdk.leader(key), leadership.label) == (volcano.Leader("b", 1), "b")
            sdk.proclaim(leadership, None)
            assert sdk.leader(key) == volcano.Leader(None, 1)
            assert leadership.state is volcano.GuardState.HELD

    def test_proclaiming_a_lost_leadership_raises(self, sdk: Sdk, server: Locks, key: str) -> None:
        """A leadership force-released behind its back: proclaim gets the 409 and the
        leadership is lost."""
        with sdk.campaign(key, ttl=10) as leadership:
            server.force_release(key)
            with pytest.raises(volcano.LeaseNotHeldError):
                sdk.proclaim(leadership, "late")
            assert leadership.lost
            with pytest.raises(volcano.LockLostError):
                leadership.check()

    def test_a_wait_that_runs_out_raises(self, sdk: Sdk, server: Locks, key: str) -> None:
        """With wait=, a candidate not elected in time gets LockHeldError and is out of line."""
        assert server.acquire(key, new_id()).status_code == 200
        with pytest.raises(volcano.LockHeldError), sdk.campaign(key, ttl=10, wait=0.3):
            pass
        assert server.state(key)["waiters"] == 0

    def test_candidates_are_elected_in_order_of_arrival(
        self, make_sdk: Callable[..., Sdk], server: Locks, key: str
    ) -> None:
        """Three candidates: each resignation elects the next in line at once, with a higher
        term; an observer sees each leader once, in order, never two at once."""
        watcher = make_sdk()
        leaders = watcher.observe(key)
        try:
            assert leaders.next() is None
            first = Candidate(make_sdk(), key, "first")
            lead = first.lead()
            assert leaders.next() == volcano.Leader("first", lead.term)
            second = Candidate(make_sdk(), key, "second")
            in_line(server, key, 1)
            third = Candidate(make_sdk(), key, "third")
            in_line(server, key, 2)
            terms = [lead.term]
            for now, after in ((first, second), (second, third)):
                now.step_down()
                elected = after.lead()
                assert elected.term > terms[-1]
                terms.append(elected.term)
                assert leaders.next() == volcano.Leader(after.label, elected.term)
            third.step_down()
            assert leaders.next() is None
        finally:
            leaders.close()

    def test_a_bad_argument_is_refused_before_sending(self, sdk: Sdk) -> None:
        """A bad name, ttl or label: InvalidArgumentError naming it, nothing sent."""
        for arguments, named in (
            ({"name": "no/slashes", "ttl": 10}, "key"),
            ({"name": "k", "ttl": 0}, "ttl"),
            ({"name": "k", "ttl": 10, "label": "é"}, "label"),
            ({"name": "k", "ttl": 10, "wait": -1}, "wait"),
        ):
            with pytest.raises(volcano.InvalidArgumentError, match=named):
                sdk.client.elections.campaign(arguments.pop("name"), **arguments)
        assert sdk.log.sent == []


class TestObserve:
    def test_a_key_with_several_holders_is_no_election(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """leader() and observe() refuse a key in use as a semaphore: never two leaders."""
        for _ in range(2):
            assert server.acquire(key, new_id(), limit=2).status_code == 200
        with pytest.raises(volcano.InvalidArgumentError, match="not an election"):
            sdk.leader(key)
        leaders = sdk.observe(key)
        with pytest.raises(volcano.InvalidArgumentError, match="not an election"):
            leaders.next()

    def test_a_relabel_and_a_vacancy_are_changes(self, sdk: Sdk, server: Locks, key: str) -> None:
        """The observer reports the leader's new label, and the vacancy its expiry leaves."""
        leaders = sdk.observe(key)
        try:
            assert leaders.next() is None
            owner = new_id()
            body = {"owner_token": owner, "ttl_seconds": 30, "label": "x"}
            lease = server.http.post(f"/v1/locks/{key}/acquire", json=body).json()
            assert leaders.next() == volcano.Leader("x", lease["fencing_token"])
            relabel = {**body, "fencing_token": lease["fencing_token"], "ttl_seconds": 1}
            relabel["label"] = "y"
            assert server.http.post(f"/v1/locks/{key}/renew", json=relabel).status_code == 200
            assert leaders.next() == volcano.Leader("y", lease["fencing_token"])
            assert leaders.next() is None  # expired after a second: vacant
        finally:
            leaders.close()


@attrs.frozen
class Pair:
    """A second server on the session's database: its URL."""

    url: str


@pytest.fixture(scope="module")
def second_server(live_server: LiveServer) -> Iterator[Pair]:
    app = create_app(ServerConfig(database_url=live_server.database_url, access_log=False))
    with serve_in_thread(app) as url:
        yield Pair(url)


class TestTwoServers:
    def test_an_election_across_two_servers(
        self,
        make_sdk: Callable[..., Sdk],
        second_server: Pair,
        server: Locks,
        key: str,
    ) -> None:
        """A leader elected through one server, a candidate and an observer on another: the
        resignation through the first elects the candidate, whom the observer sees."""
        other = make_sdk(api_url=second_server.url)
        leaders: Stream = other.observe(key)
        try:
            assert leaders.next() is None
            first = Candidate(make_sdk(), key, "via-a")
            term = first.lead().term
            assert leaders.next() == volcano.Leader("via-a", term)
            second = Candidate(make_sdk(api_url=second_server.url), key, "via-b")
            in_line(server, key, 1)
            first.step_down()
            assert second.lead().term == term + 1
            assert leaders.next() == volcano.Leader("via-b", term + 1)
            second.step_down()
        finally:
            leaders.close()
