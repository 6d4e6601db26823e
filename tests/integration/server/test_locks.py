"""The lock rules of the contract, over real HTTP against the reference server."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx

from tests.conftest import LiveServer

from .conftest import Locks, new_id


def expires_at(response: httpx.Response) -> datetime:
    return datetime.fromisoformat(response.json()["expires_at"])


def wait_past(instant: datetime) -> None:
    """Sleep until the server's expiry instant has passed (same machine, same clock)."""
    remaining = (instant - datetime.now(instant.tzinfo)).total_seconds()
    time.sleep(max(0.0, remaining) + 0.05)


class TestAcquire:
    def test_free_key_gets_fencing_token_one(self, locks: Locks, key: str) -> None:
        """The first lease on a key carries fencing token 1 and the caller's owner token."""
        owner = new_id()
        response = locks.acquire(key, owner, ttl=30)
        assert response.status_code == 200
        lease = response.json()
        assert lease["key"] == key
        assert lease["owner_token"] == owner
        assert lease["fencing_token"] == 1
        assert lease["ttl_seconds"] == 30

    def test_expiry_is_now_plus_ttl_by_server_clock(self, locks: Locks, key: str) -> None:
        """expires_at is the server's now plus the ttl: between send + ttl and answer + ttl
        (the server and its database run on this machine, so they share its clock)."""
        sent = datetime.now(UTC)
        response = locks.acquire(key, new_id(), ttl=45.5)
        answered = datetime.now(UTC)
        ttl = timedelta(seconds=45.5)
        slack = timedelta(milliseconds=1)  # the server's timestamps have microseconds
        assert sent + ttl - slack <= expires_at(response) <= answered + ttl + slack

    def test_owner_token_keeps_its_spelling(self, locks: Locks, key: str) -> None:
        """An upper-case owner token comes back byte for byte."""
        owner = "0F8FAD5B-D9CB-469F-A165-70867728950E"
        assert locks.acquire(key, owner).json()["owner_token"] == owner

    def test_same_owner_recovers_its_lease(self, locks: Locks, key: str) -> None:
        """Acquiring again with the holder's own token: same fencing token, later expiry."""
        owner = new_id()
        first = locks.acquire(key, owner, ttl=10)
        second = locks.acquire(key, owner, ttl=60)
        assert second.status_code == 200
        assert second.json()["fencing_token"] == first.json()["fencing_token"]
        assert second.json()["ttl_seconds"] == 60
        assert expires_at(second) > expires_at(first)

    def test_owner_token_case_matters(self, locks: Locks, key: str) -> None:
        """Tokens compare byte for byte: the lower-case spelling is another owner."""
        owner = "0F8FAD5B-D9CB-469F-A165-70867728950E"
        locks.acquire(key, owner)
        assert locks.acquire(key, owner.lower()).status_code == 409

    def test_other_owner_gets_lock_held_with_retry_after(self, locks: Locks, key: str) -> None:
        """A competing owner gets 409 lock_held and Retry-After = ceil(seconds left), at least 1."""
        locks.acquire(key, new_id(), ttl=20)
        response = locks.acquire(key, new_id())
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "lock_held"
        assert 19 <= int(response.headers["retry-after"]) <= 20

    def test_retry_after_is_at_least_one(self, locks: Locks, key: str) -> None:
        """A lease with a fraction of a second left still says Retry-After: 1."""
        locks.acquire(key, new_id(), ttl=0.5)
        response = locks.acquire(key, new_id())
        assert response.status_code == 409
        assert response.headers["retry-after"] == "1"

    def test_expired_lease_is_taken_with_next_token(self, locks: Locks, key: str) -> None:
        """Once the server's clock passes expires_at, another owner gets the next fencing token."""
        first = locks.acquire(key, new_id(), ttl=0.2)
        wait_past(expires_at(first))
        second = locks.acquire(key, new_id())
        assert second.status_code == 200
        assert second.json()["fencing_token"] == first.json()["fencing_token"] + 1

    def test_tokens_rise_across_release_and_force_release(self, locks: Locks, key: str) -> None:
        """Release and force release never let a fencing token be issued twice."""
        tokens = []
        for round_ in range(6):
            owner = new_id()
            lease = locks.acquire(key, owner).json()
            tokens.append(lease["fencing_token"])
            if round_ % 2:
                assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
            else:
                assert locks.force_release(key).json()["released"] is True
        assert tokens == list(range(1, 7))

    def test_concurrent_acquires_grant_once(self, live_server: LiveServer, key: str) -> None:
        """Sixteen simultaneous acquires of one key: exactly one lease."""

        def attempt(_: int) -> int:
            with live_server.http(live_server.project) as http:
                return Locks(http).acquire(key, new_id()).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(attempt, range(16)))
        assert sorted(statuses) == [200] + [409] * 15


class TestRenew:
    def test_renew_moves_expiry_and_keeps_token(self, locks: Locks, key: str) -> None:
        """Renewing the live lease keeps its fencing token and moves expires_at to now + ttl."""
        owner = new_id()
        lease = locks.acquire(key, owner, ttl=5).json()
        renewed = locks.renew(key, owner, lease["fencing_token"], ttl=120)
        assert renewed.status_code == 200
        assert renewed.json()["fencing_token"] == lease["fencing_token"]
        assert renewed.json()["owner_token"] == owner
        assert expires_at(renewed) - datetime.fromisoformat(lease["expires_at"]) > timedelta(
            seconds=100
        )

    def test_wrong_owner_is_refused(self, locks: Locks, key: str) -> None:
        """Another owner token cannot renew the lease."""
        lease = locks.acquire(key, new_id()).json()
        response = locks.renew(key, new_id(), lease["fencing_token"])
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "lease_not_held"

    def test_wrong_fencing_token_is_refused(self, locks: Locks, key: str) -> None:
        """The right owner with another fencing token cannot renew."""
        owner = new_id()
        lease = locks.acquire(key, owner).json()
        assert locks.renew(key, owner, lease["fencing_token"] + 1).status_code == 409

    def test_expired_lease_is_refused(self, locks: Locks, key: str) -> None:
        """A lease past its expiry cannot be renewed, even by its owner."""
        owner = new_id()
        response = locks.acquire(key, owner, ttl=0.2)
        wait_past(expires_at(response))
        refused = locks.renew(key, owner, response.json()["fencing_token"])
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "lease_not_held"

    def test_taken_over_lease_is_refused(self, locks: Locks, key: str) -> None:
        """After expiry and a new holder, the old holder's renew fails and names the new token."""
        owner = new_id()
        old = locks.acquire(key, owner, ttl=0.2)
        wait_past(expires_at(old))
        locks.acquire(key, new_id())
        refused = locks.renew(key, owner, old.json()["fencing_token"])
        assert refused.status_code == 409
        assert (
            f"fencing token {old.json()['fencing_token'] + 1}" in refused.json()["error"]["message"]
        )

    def test_never_acquired_key_is_refused(self, locks: Locks, key: str) -> None:
        """Renewing a key that never had a lease is lease_not_held."""
        assert locks.renew(key, new_id(), 1).json()["error"]["code"] == "lease_not_held"


class TestRelease:
    def test_release_frees_the_key(self, locks: Locks, key: str) -> None:
        """Release answers 204 with no body; the key is then free with its last token kept."""
        owner = new_id()
        lease = locks.acquire(key, owner).json()
        response = locks.release(key, owner, lease["fencing_token"])
        assert response.status_code == 204
        assert response.content == b""
        state = locks.get(key).json()
        assert state == {
            "key": key,
            "held": False,
            "expires_at": None,
            "fencing_token": lease["fencing_token"],
            "limit": 1,
            "holders": [],
            "holder_count": 0,
            "waiters": 0,
            "version": 2,
        }

    def test_second_release_is_refused(self, locks: Locks, key: str) -> None:
        """A released lease cannot be released again."""
        owner = new_id()
        lease = locks.acquire(key, owner).json()
        locks.release(key, owner, lease["fencing_token"])
        response = locks.release(key, owner, lease["fencing_token"])
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "lease_not_held"

    def test_release_by_other_owner_is_refused_and_harmless(self, locks: Locks, key: str) -> None:
        """A wrong owner's release changes nothing: the holder keeps the lock."""
        lease = locks.acquire(key, new_id()).json()
        assert locks.release(key, new_id(), lease["fencing_token"]).status_code == 409
        assert locks.get(key).json()["held"] is True

    def test_stale_holder_cannot_release_new_lease(self, locks: Locks, key: str) -> None:
        """The previous holder's release never ends a newer holder's lease."""
        owner = new_id()
        old = locks.acquire(key, owner, ttl=0.2)
        wait_past(expires_at(old))
        new = locks.acquire(key, new_id()).json()
        assert locks.release(key, owner, old.json()["fencing_token"]).status_code == 409
        assert locks.get(key).json()["fencing_token"] == new["fencing_token"]
        assert locks.get(key).json()["held"] is True

    def test_the_same_owners_older_token_never_touches_its_newer_lease(
        self, locks: Locks, key: str
    ) -> None:
        """An owner token that acquired again: a release or renew naming its older fencing token
        is refused and leaves the newer lease as it was (the fencing token is checked, not only
        the owner)."""
        owner = new_id()
        old = locks.acquire(key, owner).json()
        assert locks.release(key, owner, old["fencing_token"]).status_code == 204
        new = locks.acquire(key, owner).json()
        assert new["fencing_token"] == old["fencing_token"] + 1
        stale_release = locks.release(key, owner, old["fencing_token"])
        stale_renew = locks.renew(key, owner, old["fencing_token"], ttl=600)
        assert (stale_release.status_code, stale_renew.status_code) == (409, 409)
        assert stale_release.json()["error"]["code"] == "lease_not_held"
        state = locks.state(key)
        assert (state["held"], state["fencing_token"]) == (True, new["fencing_token"])
        assert state["expires_at"] == new["expires_at"]


class TestGet:
    def test_never_acquired(self, locks: Locks, key: str) -> None:
        """A key never acquired is free with no expiry and no fencing token."""
        assert locks.get(key).json() == {
            "key": key,
            "held": False,
            "expires_at": None,
            "fencing_token": None,
            "limit": 1,
            "holders": [],
            "holder_count": 0,
            "waiters": 0,
            "version": 0,
        }

    def test_held_key_never_reveals_owner(self, locks: Locks, key: str) -> None:
        """A held key reports its expiry and fencing token, but never the owner token."""
        owner = new_id()
        lease = locks.acquire(key, owner).json()
        response = locks.get(key)
        assert response.json() == {
            "key": key,
            "held": True,
            "expires_at": lease["expires_at"],
            "fencing_token": lease["fencing_token"],
            "limit": 1,
            "holders": [
                {
                    "fencing_token": lease["fencing_token"],
                    "expires_at": lease["expires_at"],
                    "label": None,
                    "mode": "exclusive",
                }
            ],
            "holder_count": 1,
            "waiters": 0,
            "version": 1,
        }
        assert owner not in response.text

    def test_expired_key_reports_last_token(self, locks: Locks, key: str) -> None:
        """After expiry the key is free and still reports the last fencing token issued."""
        response = locks.acquire(key, new_id(), ttl=0.2)
        wait_past(expires_at(response))
        assert locks.get(key).json() == {
            "key": key,
            "held": False,
            "expires_at": None,
            "fencing_token": 1,
            "limit": 1,
            "holders": [],
            "holder_count": 0,
            "waiters": 0,
            "version": 2,
        }


class TestForceRelease:
    def test_removes_live_lease(self, locks: Locks, key: str) -> None:
        """Force release ends the live lease without its owner token and reports its token."""
        owner = new_id()
        lease = locks.acquire(key, owner).json()
        result = locks.force_release(key)
        assert result.json() == {
            "key": key,
            "released": True,
            "fencing_token": lease["fencing_token"],
            "released_count": 1,
        }
        assert locks.get(key).json()["held"] is False
        assert locks.renew(key, owner, lease["fencing_token"]).status_code == 409

    def test_nothing_to_remove(self, locks: Locks, key: str) -> None:
        """Force release of a free key removes nothing and says so."""
        assert locks.force_release(key).json() == {
            "key": key,
            "released": False,
            "fencing_token": None,
            "released_count": 0,
        }

    def test_expired_lease_is_not_reported_released(self, locks: Locks, key: str) -> None:
        """An expired lease is not live, so force release reports released: false."""
        response = locks.acquire(key, new_id(), ttl=0.2)
        wait_past(expires_at(response))
        assert locks.force_release(key).json()["released"] is False


class TestProjects:
    def test_same_key_in_two_projects_is_two_locks(self, live_server: LiveServer, key: str) -> None:
        """Projects are isolated: each has its own lease and fencing tokens on one key name."""
        with live_server.http(live_server.project) as a, live_server.http(live_server.other) as b:
            first = Locks(a).acquire(key, new_id())
            second = Locks(b).acquire(key, new_id())
            assert first.status_code == second.status_code == 200
            assert first.json()["fencing_token"] == second.json()["fencing_token"] == 1
            assert Locks(b).force_release(key).json()["released"] is True
            assert Locks(a).get(key).json()["held"] is True

    def test_ttl_bounds_are_accepted(self, locks: Locks, key: str) -> None:
        """The smallest and largest ttl the spec allows are granted exactly."""
        small = locks.acquire(key + "-min", new_id(), ttl=0.1)
        large = locks.acquire(key + "-max", new_id(), ttl=86400)
        assert small.status_code == large.status_code == 200
        assert small.json()["ttl_seconds"] == 0.1
        assert large.json()["ttl_seconds"] == 86400
        assert expires_at(large) - expires_at(small) > timedelta(seconds=86399)
