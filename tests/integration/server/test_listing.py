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
