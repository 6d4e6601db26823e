"""Labels, versions and watching a key over real HTTP, on both backends.

Each watch is a long poll of its own, on its own connection, in a thread. Whether it is parked
on the server is read from the server's own count (`app.state.watches`), never guessed by
sleeping, so every change below is made while the watch is known to be waiting for it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for
from tests.support.server import serve_in_thread
from volcano_server import ServerConfig, create_app


@attrs.frozen
class Watched:
    """A server of this module's own on the session's database, and its app (to count watches)."""

    server: LiveServer
    app: Any

    def parked(self) -> int:
        """How many watches the server holds open now."""
        count: int = len(self.app.state.watches)
        return count

    def until_parked(self, count: int) -> None:
        """Wait until the server holds `count` watches open."""
        wait_for(lambda: self.parked() == count, f"{count} watches parked")


@pytest.fixture(scope="module")
def watched(live_server: LiveServer) -> Iterator[Watched]:
    """A second server on the session server's database, whose app the tests can read."""
    app = create_app(ServerConfig(database_url=live_server.database_url, access_log=False))
    with serve_in_thread(app) as url:
        yield Watched(attrs.evolve(live_server, url=url), app)


@pytest.fixture
def locks(watched: Watched) -> Iterator[Locks]:
    """Raw lock calls through the watched server."""
    with watched.server.http(watched.server.project) as http:
        yield Locks(http)


class Poll:
    """`GET /v1/locks/{key}?after_version=&wait_seconds=` in a thread of its own.

    It waits a minute by default, longer than `state` waits for its answer: a change that
    did not wake it fails the test instead of being found by the wait running out.
    """

    def __init__(self, server: LiveServer, key: str, after: int, wait: float = 60) -> None:
        self.response: httpx.Response | None = None
        self._http = server.http(server.project)
        params = {"after_version": after, "wait_seconds": wait}
        self._thread = threading.Thread(
            target=self._run, args=(key, params), name=f"poll-{key}", daemon=True
        )
        self._thread.start()

    def _run(self, key: str, params: dict[str, Any]) -> None:
        try:
            self.response = self._http.get(f"/v1/locks/{key}", params=params)
        finally:
            self._http.close()

    def state(self, timeout: float = 20) -> dict[str, Any]:
        """The state it was answered with."""
        self._thread.join(timeout)
        assert self.response is not None, "the watch was not answered"
        assert self.response.status_code == 200, self.response.text
        body: dict[str, Any] = self.response.json()
        return body


def watch_through(watched: Watched, key: str, after: int) -> Poll:
    """A watch of `key` from `after`, once it is parked on the server (or answered)."""
    before = watched.parked()
    poll = Poll(watched.server, key, after)
    wait_for(lambda: watched.parked() > before or poll.response is not None, "a watch parked")
    return poll


class TestLabels:
    def test_an_acquire_labels_its_lease(self, locks: Locks, key: str) -> None:
        """The label sent with an acquire is shown with its holder; none is null."""
        response = locks.http.post(
            f"/v1/locks/{key}/acquire",
            json={"owner_token": new_id(), "ttl_seconds": 30, "label": "worker-7:8080"},
        )
        assert response.status_code == 200, response.text
        (holder,) = locks.state(key)["holders"]
        assert holder["label"] == "worker-7:8080"
        assert "label" not in response.json()

    def test_a_renew_keeps_or_replaces_the_label(self, locks: Locks, key: str) -> None:
        """A renew without label keeps it and the version; one with a new label changes both;
        an empty label is none."""
        owner = new_id()
        lease = acquire(locks, key, owner, label="a")
        version = locks.state(key)["version"]
        renew(locks, key, owner, lease["fencing_token"])
        assert (labels(locks, key), locks.state(key)["version"]) == (["a"], version)
        renew(locks, key, owner, lease["fencing_token"], label="a")
        assert (labels(locks, key), locks.state(key)["version"]) == (["a"], version)
        renew(locks, key, owner, lease["fencing_token"], label="b")
        assert (labels(locks, key), locks.state(key)["version"]) == (["b"], version + 1)
        renew(locks, key, owner, lease["fencing_token"], label="")
        assert (labels(locks, key), locks.state(key)["version"]) == ([None], version + 2)

    def test_a_waiters_label_goes_with_its_lease(
        self, locks: Locks, watched: Watched, key: str
    ) -> None:
        """A waiting acquire's label is its lease's once it is handed the key."""
        owner = new_id()
        lease = acquire(locks, key, owner, label="first")
        body = {"owner_token": new_id(), "ttl_seconds": 30, "wait_seconds": 15, "label": "next"}
        waiter = threading.Thread(
            target=lambda: locks.http.post(f"/v1/locks/{key}/acquire", json=body), daemon=True
        )
        waiter.start()
        wait_for(lambda: locks.state(key)["waiters"] == 1, "the waiter in line")
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        waiter.join(30)
        assert labels(locks, key) == ["next"]

    @pytest.mark.parametrize(
        "label", ["é", "tab\there", "new\nline", "\x7f", "x" * 201, 7, ["a"]], ids=repr
    )
    def test_a_label_outside_printable_ascii_is_refused(
        self, locks: Locks, key: str, label: object
    ) -> None:
        """A label is 0 to 200 characters from space to '~': anything else is 422 naming it."""
        for path, body in (
            ("acquire", {"owner_token": new_id(), "ttl_seconds": 30}),
            ("renew", {"owner_token": new_id(), "fencing_token": 1, "ttl_seconds": 30}),
        ):
            response = locks.http.post(f"/v1/locks/{key}/{path}", json={**body, "label": label})
            assert response.status_code == 422, response.text
            assert response.json()["error"]["message"].startswith("label:")

    def test_a_null_label_is_no_label(self, locks: Locks, key: str) -> None:
        """null is what a generated client sends for a field left out: an acquire's lease has
        no label, and a renew keeps the label it has."""
        owner = new_id()
        body = {"owner_token": owner, "ttl_seconds": 30, "label": None}
        response = locks.http.post(f"/v1/locks/{key}/acquire", json=body)
        assert response.status_code == 200, response.text
        assert labels(locks, key) == [None]
        renew(locks, key, owner, response.json()["fencing_token"], label="kept")
        body = {"owner_token": owner, "fencing_token": response.json()["fencing_token"]}
        again = locks.http.post(
            f"/v1/locks/{key}/renew", json={**body, "ttl_seconds": 30, "label": None}
        )
        assert again.status_code == 200, again.text
        assert labels(locks, key) == ["kept"]

    def test_every_printable_ascii_character_is_a_label(self, locks: Locks, key: str) -> None:
        """Space to '~', 95 characters, and 200 of them, are labels kept as sent."""
        for label in ("".join(map(chr, range(0x20, 0x7F))), "~" * 200):
            owner = new_id()
            lease = acquire(locks, key, owner, label=label)
            assert labels(locks, key) == [label]
            assert locks.release(key, owner, lease["fencing_token"]).status_code == 204


class TestVersion:
    def test_a_key_never_used_is_version_0(self, locks: Locks, key: str) -> None:
        """A key never acquired reports version 0."""
        assert locks.state(key)["version"] == 0

    def test_each_change_moves_it(self, locks: Locks, key: str) -> None:
        """A grant, a release, an expiry, a force release: each moves it by one."""
        owner = new_id()
        lease = acquire(locks, key, owner)
        assert locks.state(key)["version"] == 1
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert locks.state(key)["version"] == 2
        acquire(locks, key, new_id(), ttl=0.2)
        assert locks.state(key)["version"] == 3
        wait_for(lambda: not locks.state(key)["held"], "the lease expired")
        assert locks.state(key)["version"] == 4
        acquire(locks, key, new_id())
        assert locks.force_release(key).json()["released"] is True
        assert locks.state(key)["version"] == 6

    def test_a_semaphores_force_release_moves_it_once_per_lease(
        self, locks: Locks, key: str
    ) -> None:
        """Three holders force-released at once move the version by three."""
        for _ in range(3):
            assert locks.acquire(key, new_id(), limit=3).status_code == 200
        before = locks.state(key)["version"]
        assert locks.force_release(key).json()["released_count"] == 3
        assert locks.state(key)["version"] == before + 3

    def test_a_batch_renewal_storing_an_expiry_keeps_it(self, locks: Locks, key: str) -> None:
        """An expired lease is counted when it expires, with no write; the batch renewal that
        then drops it from the stored row must not count it again, nor go back."""
        assert locks.acquire(key, new_id(), 0.3, limit=2).status_code == 200
        owner = new_id()
        kept = locks.acquire(key, owner, 30, limit=2).json()
        wait_for(lambda: len(locks.state(key)["holders"]) == 1, "the short lease expired")
        before = locks.state(key)["version"]
        entry = {"key": key, "owner_token": owner, "ttl_seconds": 30}
        response = locks.renew_many([{**entry, "fencing_token": kept["fencing_token"]}])
        assert response.status_code == 200, response.text
        assert locks.state(key)["version"] == before


class TestWatch:
    def test_a_watch_waits_for_a_grant(self, watched: Watched, locks: Locks, key: str) -> None:
        """A watch of a free key is answered by the grant that comes while it waits."""
        poll = watch_through(watched, key, 0)
        acquire(locks, key, new_id(), label="leader")
        state = poll.state()
        assert (state["version"], state["held"], state["holders"][0]["label"]) == (
            1,
            True,
            "leader",
        )

    def test_a_watcher_sees_every_change(self, watched: Watched, locks: Locks, key: str) -> None:
        """Grant, renew with a new label, release, expiry (no request made), force release:
        each wakes a watch parked from the version before it."""
        owner = new_id()
        seen = [0]

        def step(change: Any) -> dict[str, Any]:
            poll = watch_through(watched, key, seen[-1])
            change()
            state = poll.state()
            assert state["version"] > seen[-1]
            seen.append(state["version"])
            return state

        granted: dict[str, Any] = {}
        state = step(lambda: granted.update(acquire(locks, key, owner, label="a")))
        assert [h["label"] for h in state["holders"]] == ["a"]
        state = step(lambda: renew(locks, key, owner, granted["fencing_token"], label="b"))
        assert [h["label"] for h in state["holders"]] == ["b"]
        state = step(lambda: locks.release(key, owner, granted["fencing_token"]))
        assert state["held"] is False
        acquire(locks, key, owner, ttl=1)
        seen.append(locks.state(key)["version"])
        state = step(lambda: None)  # the lease expires: the server's timer wakes the watch
        assert state["held"] is False
        acquire(locks, key, new_id())
        seen.append(locks.state(key)["version"])
        state = step(lambda: locks.force_release(key))
        assert state["held"] is False
        assert seen == sorted(set(seen))

    def test_a_batch_renewal_with_a_label_wakes_a_watch(
        self, watched: Watched, locks: Locks, key: str
    ) -> None:
        """A new label in a batch entry is a change like a single renew's; an entry keeping
        the label, or one refused, changes nothing."""
        owner = new_id()
        lease = acquire(locks, key, owner, label="a")
        other = acquire(locks, f"{key}-other", new_id())
        version = locks.state(key)["version"]
        entry = {"key": key, "owner_token": owner, "fencing_token": lease["fencing_token"]}
        kept = {**entry, "ttl_seconds": 30}
        refused = {**entry, "key": f"{key}-other", "owner_token": new_id()}
        refused["fencing_token"] = other["fencing_token"]
        refused["ttl_seconds"] = 30
        response = locks.renew_many([kept, refused])
        assert [r.get("status", 200) for r in response.json()["results"]] == [200, 409]
        assert locks.state(key)["version"] == version
        poll = watch_through(watched, key, version)
        response = locks.renew_many([{**kept, "label": "b"}])
        assert response.status_code == 200, response.text
        state = poll.state()
        assert (state["version"], labels(locks, key)) == (version + 1, ["b"])
        assert [h["label"] for h in state["holders"]] == ["b"]

    def test_a_different_version_is_answered_at_once(self, locks: Locks, key: str) -> None:
        """A watch from a version the key has left (older or newer) is answered at once."""
        acquire(locks, key, new_id())
        for after in (0, 5):
            response = locks.http.get(
                f"/v1/locks/{key}", params={"after_version": after, "wait_seconds": 60}, timeout=10
            )
            assert response.json()["version"] == 1

    def test_a_wait_that_runs_out_answers_with_the_state(self, locks: Locks, key: str) -> None:
        """Nothing changed within wait_seconds: 200 with the same version."""
        lease = acquire(locks, key, new_id())
        response = locks.http.get(
            f"/v1/locks/{key}", params={"after_version": 1, "wait_seconds": 0.3}
        )
        assert response.status_code == 200
        assert response.json()["version"] == 1
        assert response.json()["holders"][0]["fencing_token"] == lease["fencing_token"]

    def test_a_renewal_keeping_the_label_does_not_answer(
        self, watched: Watched, locks: Locks, key: str
    ) -> None:
        """A renewal that keeps the label leaves a parked watch waiting; the next change
        answers it."""
        owner = new_id()
        lease = acquire(locks, key, owner)
        poll = watch_through(watched, key, 1)
        renew(locks, key, owner, lease["fencing_token"])
        assert watched.parked() >= 1
        assert poll.response is None
        assert locks.release(key, owner, lease["fencing_token"]).status_code == 204
        assert poll.state()["version"] == 2

    def test_a_watcher_that_disconnects_leaves_at_once(
        self, watched: Watched, locks: Locks, key: str
    ) -> None:
        """Closing the connection of a parked watch takes it off the server's count."""
        host, port = watched.server.url.removeprefix("http://").split(":")
        headers = "".join(f"{k}: {v}\r\n" for k, v in watched.server.project.headers().items())
        before = watched.parked()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                f"GET /v1/locks/{key}?after_version=0&wait_seconds=60 HTTP/1.1\r\n"
                f"Host: {host}\r\n{headers}\r\n".encode()
            )
            watched.until_parked(before + 1)
        watched.until_parked(before)

    def test_changes_faster_than_polls_end_on_the_latest(
        self, watched: Watched, locks: Locks, key: str
    ) -> None:
        """A watcher chaining polls while 40 changes race it ends on the key's last version,
        every version it saw greater than the one before."""
        done = threading.Event()

        def churn() -> None:
            with watched.server.http(watched.server.project) as http:
                writer = Locks(http)
                for _ in range(20):
                    owner = new_id()
                    lease = acquire(writer, key, owner)
                    assert writer.release(key, owner, lease["fencing_token"]).status_code == 204
            done.set()

        writer = threading.Thread(target=churn, daemon=True)
        writer.start()
        seen = [0]
        while True:
            finished = done.is_set()
            response = locks.http.get(
                f"/v1/locks/{key}", params={"after_version": seen[-1], "wait_seconds": 0.5}
            )
            version = response.json()["version"]
            assert version >= seen[-1]
            if version == seen[-1] and finished:
                break
            if version != seen[-1]:
                seen.append(version)
        writer.join(10)
        assert seen[-1] == locks.state(key)["version"] == 40
        assert seen == sorted(set(seen))


class TestWatchParameters:
    @pytest.mark.parametrize(
        ("query", "named"),
        [
            ("after_version=-1&wait_seconds=1", "after_version"),
            ("after_version=x&wait_seconds=1", "after_version"),
            ("after_version=1.5&wait_seconds=1", "after_version"),
            ("after_version=9007199254740992", "after_version"),
            ("after_version=1&wait_seconds=61", "wait_seconds"),
            ("after_version=1&wait_seconds=-0.5", "wait_seconds"),
            ("after_version=1&wait_seconds=1e3", "wait_seconds"),
            ("after_version=1&wait_seconds=", "wait_seconds"),
            ("after_version=1&after_version=2", "after_version"),
            ("after_versoin=1&wait_seconds=30", "after_versoin"),
        ],
    )
    def test_a_bad_parameter_is_named(
        self, api: httpx.Client, key: str, query: str, named: str
    ) -> None:
        """A malformed, out of range, repeated or unknown query parameter is 422 naming it."""
        response = api.get(f"/v1/locks/{key}?{query}")
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"].startswith(f"{named}:")

    def test_wait_seconds_alone_answers_at_once(self, api: httpx.Client, key: str) -> None:
        """Without after_version there is nothing to wait for: the state, at once."""
        response = api.get(f"/v1/locks/{key}", params={"wait_seconds": 60}, timeout=10)
        assert response.json()["version"] == 0


class TestShares:
    def test_watches_count_against_the_projects_waiting_share(
        self, live_server: LiveServer, key: str
    ) -> None:
        """With room for two waiting requests, a third watch and a waiting acquire get 429;
        another project is not refused."""
        config = ServerConfig(
            database_url=live_server.database_url, access_log=False, max_waiters_per_project=2
        )
        app = create_app(config)
        with serve_in_thread(app) as url:
            server = Watched(attrs.evolve(live_server, url=url), app)
            polls = [Poll(server.server, key, 0, wait=20) for _ in range(2)]
            server.until_parked(2)
            with server.server.http(server.server.project) as http:
                refused = http.get(f"/v1/locks/{key}?after_version=0&wait_seconds=5")
                assert (refused.status_code, refused.json()["error"]["code"]) == (
                    429,
                    "rate_limited",
                )
                waiting = Locks(http).acquire(key, new_id(), wait=5)
                assert waiting.status_code == 429
            with server.server.http(server.server.other) as http:
                other = http.get(f"/v1/locks/{key}?after_version=1&wait_seconds=5")
                assert other.status_code == 200
            with server.server.http(server.server.project) as http:
                acquire(Locks(http), key, new_id())
            assert [poll.state()["version"] for poll in polls] == [1, 1]

    def test_shutting_down_answers_every_watch(self, live_server: LiveServer, key: str) -> None:
        """A server shutting down answers its parked watches with the key's state."""
        app = create_app(ServerConfig(database_url=live_server.database_url, access_log=False))
        with serve_in_thread(app) as url:
            server = Watched(attrs.evolve(live_server, url=url), app)
            poll = Poll(server.server, key, 0, wait=60)
            server.until_parked(1)
        assert poll.state(timeout=20)["version"] == 0


class TestAcrossServers:
    def test_a_change_through_one_server_wakes_a_watch_on_another(
        self, watched: Watched, api: httpx.Client, key: str
    ) -> None:
        """A watch parked on this module's server hears a grant and a release made through the
        session's server (PostgreSQL: NOTIFY; SQLite: the servers poll)."""
        other = Locks(api)
        owner = new_id()
        poll = watch_through(watched, key, 0)
        lease = acquire(other, key, owner)
        assert poll.state()["version"] == 1
        poll = watch_through(watched, key, 1)
        assert other.release(key, owner, lease["fencing_token"]).status_code == 204
        assert poll.state()["held"] is False


def acquire(
    locks: Locks, key: str, owner: str, *, ttl: float = 30, label: str | None = None
) -> dict[str, Any]:
    """Acquire `key` for `owner` (with `label`), which must succeed."""
    body: dict[str, Any] = {"owner_token": owner, "ttl_seconds": ttl}
    if label is not None:
        body["label"] = label
    response = locks.http.post(f"/v1/locks/{key}/acquire", json=body)
    assert response.status_code == 200, response.text
    lease: dict[str, Any] = response.json()
    return lease


def renew(locks: Locks, key: str, owner: str, fence: int, *, label: str | None = None) -> None:
    """Renew, which must succeed; with `label`, relabel."""
    body: dict[str, Any] = {"owner_token": owner, "fencing_token": fence, "ttl_seconds": 30}
    if label is not None:
        body["label"] = label
    response = locks.http.post(f"/v1/locks/{key}/renew", json=body)
    assert response.status_code == 200, response.text


def labels(locks: Locks, key: str) -> list[str | None]:
    """The labels of the key's holders."""
    return [holder["label"] for holder in locks.state(key)["holders"]]
