"""Semaphores over real HTTP, on both backends: a key with up to `limit` holders, each fenced,
a fair line of slot waiters, and the fence check a protected resource asks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for

from .test_waiting import in_line, start_waiting


def take(locks: Locks, key: str, limit: int, ttl: float = 30) -> tuple[str, dict[str, Any]]:
    """One slot of `key` for a fresh owner: (owner token, lease)."""
    owner = new_id()
    response = locks.acquire(key, owner, ttl, limit=limit)
    assert response.status_code == 200, response.text
    return owner, response.json()


class TestSlots:
    def test_n_holders_each_with_the_next_token(self, locks: Locks, key: str) -> None:
        """Three owners hold a limit-3 key at once, tokens 1, 2, 3; get lists them all."""
        leases = [take(locks, key, 3)[1] for _ in range(3)]
        assert [lease["fencing_token"] for lease in leases] == [1, 2, 3]
        state = locks.state(key)
        assert (state["held"], state["limit"], state["waiters"]) == (True, 3, 0)
        assert [h["fencing_token"] for h in state["holders"]] == [1, 2, 3]
        assert state["fencing_token"] == 3
        assert state["expires_at"] == leases[0]["expires_at"]
        assert not any(lease["owner_token"] in str(state) for lease in leases)

    def test_the_one_over_the_limit_is_refused(self, locks: Locks, key: str) -> None:
        """With every slot taken, another owner gets 409 lock_held and a Retry-After."""
        for _ in range(2):
            take(locks, key, 2, ttl=20)
        refused = locks.acquire(key, new_id(), limit=2)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "lock_held"
        assert 1 <= int(refused.headers["retry-after"]) <= 20

    def test_a_holders_own_token_gets_its_slot_back(self, locks: Locks, key: str) -> None:
        """Acquiring again with a holder's owner token returns its lease, not a second slot."""
        owner, lease = take(locks, key, 2)
        again = locks.acquire(key, owner, 60, limit=2)
        assert again.json()["fencing_token"] == lease["fencing_token"]
        assert len(locks.state(key)["holders"]) == 1

    def test_release_frees_exactly_that_slot(self, locks: Locks, key: str) -> None:
        """Releasing one holder's lease leaves the others; a newcomer then gets a new token."""
        owners = [take(locks, key, 2) for _ in range(2)]
        (first, lease), _ = owners
        assert locks.release(key, first, lease["fencing_token"]).status_code == 204
        assert [h["fencing_token"] for h in locks.state(key)["holders"]] == [2]
        assert take(locks, key, 2)[1]["fencing_token"] == 3

    def test_expiry_frees_exactly_one_slot(self, locks: Locks, key: str) -> None:
        """A short lease expires and its slot is free; the long one still holds."""
        take(locks, key, 2, ttl=0.3)
        _, long = take(locks, key, 2, ttl=60)
        wait_for(lambda: len(locks.state(key)["holders"]) == 1, "the short lease expired")
        assert locks.state(key)["holders"][0]["fencing_token"] == long["fencing_token"]
        assert locks.acquire(key, new_id(), limit=2).status_code == 200

    def test_a_different_limit_while_in_use_is_a_mismatch(self, locks: Locks, key: str) -> None:
        """limit_mismatch names the key's limit; once the key is free, a new limit is taken."""
        owner, lease = take(locks, key, 2)
        refused = locks.acquire(key, new_id(), limit=3)
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "limit_mismatch"
        assert "limit 2" in error["message"]
        assert error["limit"] == 2
        locks.release(key, owner, lease["fencing_token"])
        assert locks.acquire(key, new_id(), limit=3).status_code == 200
        assert locks.state(key)["limit"] == 3

    def test_force_release_ends_every_slot(self, locks: Locks, key: str) -> None:
        """Force release removes all holders at once, and says how many and the highest token."""
        for _ in range(3):
            take(locks, key, 3)
        result = locks.force_release(key).json()
        assert (result["released"], result["released_count"], result["fencing_token"]) == (
            True,
            3,
            3,
        )
        assert locks.state(key)["holders"] == []

    @pytest.mark.parametrize("limit", [0, 1001, "2", 1.5, True])
    def test_a_bad_limit_is_422(self, locks: Locks, key: str, limit: object) -> None:
        """limit is an integer from 1 to 1,000."""
        response = locks.acquire(key, new_id(), limit=limit)  # type: ignore[arg-type]
        assert response.status_code == 422
        assert "limit" in response.json()["error"]["message"]


class TestSlotWaiters:
    def test_waiters_get_freed_slots_in_arrival_order(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Two waiters for a full limit-2 key: each release hands one slot, first come first."""
        holders = [take(locks, key, 2) for _ in range(2)]
        first = start_waiting(live_server, key, limit=2)
        wait_for(lambda: in_line(live_server, key) == 1, "the first waiter in line")
        second = start_waiting(live_server, key, limit=2)
        wait_for(lambda: in_line(live_server, key) == 2, "the second waiter in line")
        assert locks.state(key)["waiters"] == 2
        owner, lease = holders[0]
        locks.release(key, owner, lease["fencing_token"])
        assert first.lease["fencing_token"] == 3
        assert second.response is None  # still waiting: one slot was freed
        owner, lease = holders[1]
        locks.release(key, owner, lease["fencing_token"])
        assert second.lease["fencing_token"] == 4

    def test_force_release_hands_every_slot_on(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Freeing all slots at once serves as many waiters as there are slots."""
        for _ in range(2):
            take(locks, key, 2)
        waiters = []
        for count in (1, 2, 3):
            waiters.append(start_waiting(live_server, key, limit=2))
            wait_for(lambda n=count: in_line(live_server, key) == n, f"{count} in line")
        locks.force_release(key)
        assert [w.lease["fencing_token"] for w in waiters[:2]] == [3, 4]
        assert waiters[2].response is None
        assert locks.state(key)["waiters"] == 1

    def test_no_newcomer_takes_a_slot_ahead_of_a_waiter(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A freed slot goes to the waiter, never to a newcomer asking at the same moment."""
        owner, lease = take(locks, key, 1)
        waiter = start_waiting(live_server, key, limit=1)
        wait_for(lambda: in_line(live_server, key) == 1, "the waiter in line")
        locks.release(key, owner, lease["fencing_token"])
        assert locks.acquire(key, new_id(), limit=1).status_code == 409
        assert waiter.lease["fencing_token"] == 2

    def test_a_waiter_with_another_limit_is_refused_at_once(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """A waiting acquire for another limit does not queue: 409 limit_mismatch."""
        take(locks, key, 2)
        take(locks, key, 2)
        response = locks.acquire(key, new_id(), wait=5, limit=1)
        assert response.json()["error"]["code"] == "limit_mismatch"
        assert in_line(live_server, key) == 0


class TestFenceCheck:
    def test_live_then_dead_after_release(self, locks: Locks, key: str) -> None:
        """A token is live while its lease is, and not after its release."""
        owner, lease = take(locks, key, 1)
        token = lease["fencing_token"]
        check = locks.check(key, token).json()
        assert check == {
            "key": key,
            "fencing_token": token,
            "live": True,
            "expires_at": lease["expires_at"],
        }
        locks.release(key, owner, token)
        assert locks.check(key, token).json() == {
            "key": key,
            "fencing_token": token,
            "live": False,
            "expires_at": None,
        }

    def test_dead_after_expiry_and_after_force_release(self, locks: Locks, key: str) -> None:
        """Expired and force-released tokens are not live; the other slot's token still is."""
        _, short = take(locks, key, 3, ttl=0.3)
        _, kept = take(locks, key, 3, ttl=60)
        wait_for(lambda: not locks.check(key, short["fencing_token"]).json()["live"], "expiry")
        assert locks.check(key, kept["fencing_token"]).json()["live"] is True
        locks.force_release(key)
        assert locks.check(key, kept["fencing_token"]).json()["live"] is False

    def test_a_token_never_issued_is_not_live(self, locks: Locks, key: str) -> None:
        """A token the key never had (or a key never acquired) is live: false, not an error."""
        assert locks.check(key, 1).json()["live"] is False
        take(locks, key, 1)
        assert locks.check(key, 2).json()["live"] is False

    @pytest.mark.parametrize("token", ["0", "-1", "abc", "1.5", "9007199254740992"])
    def test_a_bad_token_is_422(self, locks: Locks, key: str, token: str) -> None:
        """The path's fencing token is a whole number from 1 to 2^53-1."""
        response = locks.check(key, token)
        assert response.status_code == 422
        assert "fencing_token" in response.json()["error"]["message"]
