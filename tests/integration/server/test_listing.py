"""Listing the keys that are held or waited for, over real HTTP, on both backends.

Every test lists under a prefix of its own (its `key`), so the session's other keys stay out.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.raw import Locks, Waiter, new_id, wait_for


def page(api: httpx.Client, **params: Any) -> dict[str, Any]:
    """One page of `GET /v1/locks`, which must succeed."""
    response = api.get("/v1/locks", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def every_page(api: httpx.Client, prefix: str, limit: int) -> list[list[str]]:
    """The keys of each page, following `next` until it is null."""
    pages: list[list[str]] = []
    after = ""
    while True:
        body = page(api, prefix=prefix, after=after, limit=limit)
        pages.append([state["key"] for state in body["locks"]])
        if body["next"] is None:
            return pages
        assert body["next"] == pages[-1][-1]
        after = body["next"]


class TestList:
    def test_held_and_waited_keys_in_order(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Held keys and keys with a caller in line are listed in key order with their state;
        free, released and expired keys are not."""
        held = [f"{key}-c", f"{key}-a", f"{key}-b"]
        for name in held:
            assert locks.acquire(name, new_id()).status_code == 200
        owner = new_id()
        lease = locks.acquire(f"{key}-d", owner).json()
        assert locks.release(f"{key}-d", owner, lease["fencing_token"]).status_code == 204
        assert locks.acquire(f"{key}-e", new_id(), ttl=0.1).status_code == 200
        locks.get(f"{key}-f")
        waiter = Waiter(live_server.http(live_server.project), f"{key}-a", wait=20)
        wait_for(lambda: locks.state(f"{key}-a")["waiters"] == 1, "the waiter in line")
        wait_for(lambda: not locks.state(f"{key}-e")["held"], "the lease expired")
        body = page(locks.http, prefix=key)
        assert [state["key"] for state in body["locks"]] == sorted(held)
        assert body["next"] is None
        assert body["locks"][0] == locks.state(f"{key}-a")
        assert body["locks"][0]["waiters"] == 1
        locks.force_release(f"{key}-a")
        assert waiter.lease["key"] == f"{key}-a"

    def test_pages_follow_next(self, locks: Locks, key: str) -> None:
        """Seven keys in pages of three: three pages, next null on the last."""
        names = sorted(f"{key}-{index}" for index in range(7))
        for name in names:
            assert locks.acquire(name, new_id()).status_code == 200
        pages = every_page(locks.http, key, 3)
        assert pages == [names[:3], names[3:6], names[6:]]

    def test_a_full_last_page_has_no_next(self, locks: Locks, key: str) -> None:
        """Exactly `limit` keys left: that page says there is none after it."""
        for index in range(2):
            assert locks.acquire(f"{key}-{index}", new_id()).status_code == 200
        assert page(locks.http, prefix=key, limit=2)["next"] is None

    def test_another_projects_keys_are_not_listed(
        self, locks: Locks, live_server: LiveServer, key: str
    ) -> None:
        """Keys held in another project stay out of this project's list."""
        with live_server.http(live_server.other) as other:
            assert Locks(other).acquire(key, new_id()).status_code == 200
        assert page(locks.http, prefix=key)["locks"] == []

    def test_pages_are_complete_and_ordered_under_changes(self, locks: Locks, key: str) -> None:
        """Keys held throughout appear exactly once, in order, while other keys under the same
        prefix are acquired and released between the pages."""
        steady = sorted(f"{key}-s{index:02d}" for index in range(25))
        for name in steady:
            assert locks.acquire(name, new_id()).status_code == 200
        stop = threading.Event()

        def churn() -> None:
            with httpx.Client(base_url=str(locks.http.base_url), headers=locks.http.headers) as h:
                churner = Locks(h)
                index = 0
                while not stop.is_set():
                    name, owner = f"{key}-c{index % 30:02d}", new_id()
                    lease = churner.acquire(name, owner).json()
                    churner.release(name, owner, lease["fencing_token"])
                    index += 1

        thread = threading.Thread(target=churn, daemon=True)
        thread.start()
        try:
            for _ in range(3):
                listed = [name for one in every_page(locks.http, key, 4) for name in one]
                assert listed == sorted(set(listed))
                assert [name for name in listed if name in steady] == steady
        finally:
            stop.set()
            thread.join(10)


class TestListParameters:
    @pytest.mark.parametrize(
        ("query", "named"),
        [
            ("limit=0", "limit"),
            ("limit=501", "limit"),
            ("limit=ten", "limit"),
            ("prefix=a%2Fb", "prefix"),
            ("prefix=" + "a" * 256, "prefix"),
            ("after=a%20b", "after"),
            ("after=a&after=b", "after"),
            ("cursor=x", "cursor"),
        ],
    )
    def test_a_bad_parameter_is_named(self, api: httpx.Client, query: str, named: str) -> None:
        """A malformed, out of range, repeated or unknown parameter is 422 naming it."""
        response = api.get(f"/v1/locks?{query}")
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"].startswith(f"{named}:")

    def test_only_get(self, api: httpx.Client) -> None:
        """Listing is GET only: another method is 405 with Allow."""
        response = api.post("/v1/locks", json={})
        assert (response.status_code, response.headers["Allow"]) == (405, "GET")


def crowd(locks: Locks, key: str, count: int, *, label: str = "x" * 200) -> list[int]:
    """`count` holders of the semaphore `key` (limit 1,000), each with `label`; their tokens."""
    tokens = []
    for _ in range(count):
        body = {"owner_token": new_id(), "ttl_seconds": 60, "limit": 1000, "label": label}
        lease = locks.http.post(f"/v1/locks/{key}/acquire", json=body)
        assert lease.status_code == 200, lease.text
        tokens.append(lease.json()["fencing_token"])
    return tokens


class TestBounds:
    """Issue 33: no answer grows with what a project stored."""

    def test_a_state_shows_twenty_holders_and_counts_them_all(self, locks: Locks, key: str) -> None:
        """A key of 60 holders: get, a watch and a list page each show the 20 ending soonest,
        soonest first, and `holder_count` 60; every owner token stays out."""
        crowd(locks, key, 60)
        state = locks.state(key)
        assert (len(state["holders"]), state["holder_count"]) == (20, 60)
        expiries = [holder["expires_at"] for holder in state["holders"]]
        assert expiries == sorted(expiries)
        assert state["expires_at"] == expiries[0]
        watched = locks.http.get(
            f"/v1/locks/{key}", params={"after_version": 0, "wait_seconds": 5}
        ).json()
        assert (len(watched["holders"]), watched["holder_count"]) == (20, 60)
        (listed,) = page(locks.http, prefix=key)["locks"]
        assert listed == state

    def test_holders_page_through_every_live_lease(self, locks: Locks, key: str) -> None:
        """GET /v1/locks/{key}/holders: every live lease by fencing token, pages following
        `next`; a released one is gone; never an owner token."""
        tokens = crowd(locks, key, 45, label="h")
        owner = new_id()
        body = {"owner_token": owner, "ttl_seconds": 60, "limit": 1000}
        ended = locks.http.post(f"/v1/locks/{key}/acquire", json=body).json()["fencing_token"]
        released = {"owner_token": owner, "fencing_token": ended}
        assert locks.http.post(f"/v1/locks/{key}/release", json=released).status_code == 204
        seen: list[int] = []
        after = 0
        while True:
            answer = locks.http.get(
                f"/v1/locks/{key}/holders", params={"after": after, "limit": 20}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert "owner_token" not in answer.text
            seen += [holder["fencing_token"] for holder in body["holders"]]
            if body["next"] is None:
                break
            after = body["next"]
        assert seen == tokens

    def test_a_page_of_fat_keys_stops_at_64_kib(self, locks: Locks, key: str) -> None:
        """Fourteen keys of 20 holders with 200-character labels (about 5.5 KB of state each):
        a page asked for 500 keys holds no more than 64 KiB of them and names a `next`;
        following it lists all fourteen exactly once."""
        names = [f"{key}-{index:02d}" for index in range(14)]
        for name in names:
            crowd(locks, name, 20)
        answer = locks.http.get("/v1/locks", params={"prefix": key, "limit": 500})
        first = answer.json()
        assert 1 <= len(first["locks"]) < 14
        assert len(answer.content) <= 65_536 + 200
        assert first["next"] == first["locks"][-1]["key"]
        assert [name for one in every_page(locks.http, key, 500) for name in one] == names

    @pytest.mark.parametrize(
        ("query", "named"), [("limit=0", "limit"), ("limit=101", "limit"), ("after=-1", "after")]
    )
    def test_a_bad_holders_parameter_is_named(
        self, api: httpx.Client, query: str, named: str
    ) -> None:
        """A page size outside 1..100, or a negative `after`: 422 naming it."""
        response = api.get(f"/v1/locks/k/holders?{query}")
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"].startswith(f"{named}:")
