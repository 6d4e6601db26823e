"""Renewing many leases in one request (`POST /v1/leases/renew`) over real HTTP, both backends:
each entry judged as a single renew, one transaction and one stored outcome per batch."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.raw import Locks, new_id, wait_for
from volcano_server.storage import open_storage

from .test_waiting import in_line, start_waiting


def held(locks: Locks, key: str, ttl: float = 30, owner: str | None = None) -> dict[str, Any]:
    """A fresh lease on `key`."""
    response = locks.acquire(key, owner or new_id(), ttl)
    assert response.status_code == 200, response.text
    lease: dict[str, Any] = response.json()
    return lease


def entry(lease: dict[str, Any], ttl: float = 60, **changes: Any) -> dict[str, Any]:
    """The batch entry that renews `lease` for `ttl` seconds."""
    fields = {
        "key": lease["key"],
        "owner_token": lease["owner_token"],
        "fencing_token": lease["fencing_token"],
        "ttl_seconds": ttl,
    }
    return {**fields, **changes}


def results(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["results"]
    return found


class TestRenewing:
    def test_every_lease_is_renewed_in_the_order_sent(self, locks: Locks, key: str) -> None:
        """Three leases on three keys: three results in order, tokens kept, ttl and expiry new."""
        leases = [held(locks, f"{key}-{n}", ttl=5) for n in (2, 0, 1)]
        answered = results(locks.renew_many([entry(lease, ttl=60) for lease in leases]))
        assert [r["key"] for r in answered] == [lease["key"] for lease in leases]
        for lease, result in zip(leases, answered, strict=True):
            renewed = result["lease"]
            assert renewed["fencing_token"] == lease["fencing_token"]
            assert renewed["owner_token"] == lease["owner_token"]
            assert renewed["ttl_seconds"] == 60
            assert renewed["expires_at"] > lease["expires_at"]
            assert locks.state(lease["key"])["expires_at"] == renewed["expires_at"]

    def test_a_refused_entry_changes_nothing_and_the_rest_renew(
        self, locks: Locks, key: str
    ) -> None:
        """An entry naming a released lease is 409 lease_not_held in its place, with the batch's
        request id; the entries around it are renewed."""
        first, gone, last = (held(locks, f"{key}-{n}") for n in range(3))
        assert locks.release(gone["key"], gone["owner_token"], gone["fencing_token"]).is_success
        request_id = new_id()
        answered = results(
            locks.renew_many([entry(first), entry(gone), entry(last)], request_id=request_id)
        )
        assert "lease" in answered[0]
        assert "lease" in answered[2]
        refused = answered[1]
        assert (refused["key"], refused["status"]) == (gone["key"], 409)
        assert refused["error"]["code"] == "lease_not_held"
        assert refused["error"]["request_id"] == request_id
        assert "lease" not in refused
        assert locks.state(gone["key"])["held"] is False

    def test_a_key_never_acquired_is_refused(self, locks: Locks, key: str) -> None:
        """Renewing a key that has no row is refused, and makes no row."""
        ghost = {"key": key, "owner_token": new_id(), "fencing_token": 1, "ttl_seconds": 30}
        (result,) = results(locks.renew_many([ghost]))
        assert result["error"]["code"] == "lease_not_held"
        assert "never been acquired" in result["error"]["message"]
        assert locks.state(key)["fencing_token"] is None

    def test_the_same_owners_older_token_never_touches_its_newer_lease(
        self, locks: Locks, key: str
    ) -> None:
        """An owner that acquired again: its older fencing token in a batch is refused and the
        newer lease keeps its expiry (as for a single renew, docs/safety.md rule 8)."""
        owner = new_id()
        old = held(locks, key, owner=owner)
        assert locks.release(key, owner, old["fencing_token"]).status_code == 204
        new = held(locks, key, owner=owner)
        (result,) = results(locks.renew_many([entry(old, ttl=600)]))
        assert result["error"]["code"] == "lease_not_held"
        state = locks.state(key)
        assert (state["fencing_token"], state["expires_at"]) == (
            new["fencing_token"],
            new["expires_at"],
        )

    def test_entries_of_one_key_are_judged_in_order(self, locks: Locks, key: str) -> None:
        """Two slots of a semaphore in one batch are both renewed; an entry sent twice is
        renewed twice; a stale entry after them is refused."""
        slots = [locks.acquire(key, new_id(), 30, limit=2).json() for _ in range(2)]
        answered = results(
            locks.renew_many(
                [
                    entry(slots[0]),
                    entry(slots[1]),
                    entry(slots[1], ttl=90),
                    entry(slots[0], fencing_token=slots[1]["fencing_token"]),
                ]
            )
        )
        assert [r["lease"]["fencing_token"] for r in answered[:3]] == [1, 2, 2]
        assert answered[2]["lease"]["ttl_seconds"] == 90
        assert answered[3]["error"]["code"] == "lease_not_held"
        holders = locks.state(key)["holders"]
        assert {h["fencing_token"]: h["expires_at"] for h in holders} == {
            1: answered[0]["lease"]["expires_at"],
            2: answered[2]["lease"]["expires_at"],
        }

    def test_another_projects_lease_is_not_renewed(
        self, live_server: LiveServer, locks: Locks, key: str
    ) -> None:
        """Projects are isolated: a lease of this project named by another project's batch is
        refused there, and keeps its expiry here."""
        lease = held(locks, key)
        with live_server.http(live_server.other) as other:
            (result,) = results(Locks(other).renew_many([entry(lease)]))
        assert result["error"]["code"] == "lease_not_held"
        assert locks.state(key)["expires_at"] == lease["expires_at"]

    def test_five_hundred_at_once(self, locks: Locks, key: str) -> None:
        """The largest batch, 500 leases of the longest keys, fits the body limit and renews all."""
        stem = f"{key}-".ljust(250, "x")
        leases = [held(locks, f"{stem}{n:03d}", ttl=60) for n in range(500)]
        answered = results(locks.renew_many([entry(lease, ttl=86400) for lease in leases]))
        assert len(answered) == 500
        assert all(r["lease"]["ttl_seconds"] == 86400 for r in answered)


class TestIdempotency:
    def test_a_repeat_replays_and_changes_nothing(self, locks: Locks, key: str) -> None:
        """The same request id and body: the stored results, Idempotent-Replayed, no new expiry."""
        leases = [held(locks, f"{key}-{n}") for n in range(2)]
        request_id = new_id()
        first = locks.renew_many([entry(lease) for lease in leases], request_id=request_id)
        again = locks.renew_many([entry(lease) for lease in leases], request_id=request_id)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert "Idempotent-Replayed" not in first.headers

    def test_a_repeat_refuses_a_lease_that_ended_since(self, locks: Locks, key: str) -> None:
        """A replay never tells of an ended lease: the released one turns 409 lease_not_held in
        its place (still replayed), the live one is given back."""
        kept, ended = (held(locks, f"{key}-{n}") for n in range(2))
        request_id = new_id()
        body = [entry(kept), entry(ended)]
        first = results(locks.renew_many(body, request_id=request_id))
        locks.release(ended["key"], ended["owner_token"], ended["fencing_token"])
        again = locks.renew_many(body, request_id=request_id)
        replayed = results(again)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert replayed[0] == first[0]
        assert replayed[1]["error"]["code"] == "lease_not_held"
        assert "no longer live" in replayed[1]["error"]["message"]
        assert locks.state(ended["key"])["held"] is False

    def test_a_repeat_tells_each_lease_as_it_is_now(self, locks: Locks, key: str) -> None:
        """A replay tells the lease as it is now, never its stored expiry: shortened since by
        a single renew, the replayed result has the new expiry and ttl (issue 34)."""
        lease = held(locks, key)
        request_id = new_id()
        body = [entry(lease, ttl=60)]
        results(locks.renew_many(body, request_id=request_id))
        shorter = locks.renew(key, lease["owner_token"], lease["fencing_token"], 5).json()
        replayed = results(locks.renew_many(body, request_id=request_id))
        assert replayed[0]["lease"] == shorter

    def test_a_different_body_is_request_id_reused(self, locks: Locks, key: str) -> None:
        """The same request id with another batch: 409 request_id_reused, nothing renewed."""
        lease = held(locks, key)
        request_id = new_id()
        assert locks.renew_many([entry(lease)], request_id=request_id).status_code == 200
        reused = locks.renew_many([entry(lease, ttl=61)], request_id=request_id)
        assert reused.status_code == 409
        assert reused.json()["error"]["code"] == "request_id_reused"

    def test_a_single_renews_request_id_is_not_a_batchs(self, locks: Locks, key: str) -> None:
        """A request id used by a single renew is reused when a batch sends it."""
        lease = held(locks, key)
        request_id = new_id()
        single = locks.renew(
            key, lease["owner_token"], lease["fencing_token"], 60, request_id=request_id
        )
        assert single.status_code == 200
        batch = locks.renew_many([entry(lease)], request_id=request_id)
        assert batch.json()["error"]["code"] == "request_id_reused"


class TestValidation:
    @pytest.mark.parametrize(
        ("change", "where"),
        [
            ({"key": "a b"}, "leases[2].key"),
            ({"fencing_token": 0}, "leases[2].fencing_token"),
            ({"fencing_token": 2**53}, "leases[2].fencing_token"),
            ({"ttl_seconds": 0}, "leases[2].ttl_seconds"),
            ({"owner_token": "nope"}, "leases[2].owner_token"),
            ({"label": "x" * 201}, "leases[2].label"),
            ({"label": "tab\there"}, "leases[2].label"),
        ],
    )
    def test_a_bad_entry_is_422_naming_its_index(
        self, locks: Locks, key: str, change: dict[str, Any], where: str
    ) -> None:
        """One bad entry refuses the whole batch before anything runs, naming the entry."""
        lease = held(locks, key)
        batch = [entry(lease), entry(lease), entry(lease, **change)]
        response = locks.renew_many(batch)
        assert response.status_code == 422
        assert response.json()["error"]["message"].startswith(f"{where}:")
        assert locks.state(key)["expires_at"] == lease["expires_at"]

    @pytest.mark.parametrize("count", [0, 501])
    def test_zero_or_more_than_500_entries_is_422(self, locks: Locks, key: str, count: int) -> None:
        """A batch has 1 to 500 entries."""
        ghost = {"key": key, "owner_token": new_id(), "fencing_token": 1, "ttl_seconds": 1}
        response = locks.renew_many([ghost] * count)
        assert response.status_code == 422
        assert response.json()["error"]["message"].startswith("leases:")

    @pytest.mark.parametrize("body", [{}, {"leases": {}}, {"leases": [], "extra": 1}, []])
    def test_a_body_of_another_shape_is_refused(self, api: httpx.Client, body: Any) -> None:
        """Not an object with a `leases` array: 400 or 422, never a 5xx."""
        response = api.post("/v1/leases/renew", json=body)
        assert response.status_code in (400, 422), response.text

    def test_a_body_over_256_kib_is_413(self, api: httpx.Client) -> None:
        """The batch's own body limit: 256 KiB (the other operations keep 16 KiB)."""
        response = api.post(
            "/v1/leases/renew",
            content=b'{"leases": [' + b" " * 262_144 + b"]}",
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert "262144" in response.json()["error"]["message"]

    def test_credentials_are_judged_first(self, live_server: LiveServer) -> None:
        """No credentials: 401, whatever the body."""
        with live_server.http(None) as anonymous:
            response = anonymous.post("/v1/leases/renew", json={"leases": []})
        assert response.status_code == 401


class TestConcurrency:
    def test_batches_locking_keys_in_opposite_orders_never_deadlock(
        self, live_server: LiveServer, locks: Locks, key: str
    ) -> None:
        """Two clients renew the same two leases in opposite orders, again and again, at once:
        every batch is answered 200 with both renewed (keys are locked in one order)."""
        pair = [held(locks, f"{key}-{n}", ttl=60) for n in range(2)]
        failures: list[str] = []

        def renew(order: list[dict[str, Any]]) -> None:
            with live_server.http(live_server.project) as http:
                for _ in range(40):
                    response = Locks(http).renew_many([entry(lease) for lease in order])
                    if response.status_code != 200 or any(
                        "lease" not in r for r in response.json()["results"]
                    ):
                        failures.append(response.text)

        threads = [threading.Thread(target=renew, args=(order,)) for order in (pair, pair[::-1])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []

    def test_a_waiter_gets_the_key_when_a_shortened_lease_expires(
        self, live_server: LiveServer, locks: Locks, key: str
    ) -> None:
        """A batch renews a lease for less time while another owner waits for the key: the
        waiter is handed the key at the new expiry (the key's timer follows the batch), well
        before the old one (60 s, past the waiter's own 20 s wait)."""
        lease = held(locks, key, ttl=60)
        waiter = start_waiting(live_server, key, wait=20)
        wait_for(lambda: in_line(live_server, key) == 1, "the waiter in line")
        (result,) = results(locks.renew_many([entry(lease, ttl=0.5)]))
        assert result["lease"]["ttl_seconds"] == 0.5
        assert waiter.lease["fencing_token"] == lease["fencing_token"] + 1


class TestCrowdedKeys:
    """A batch reads only the leases it names of each key, however many others the key has,
    and answers as if it had read them all: its cost is what it names, not what others hold."""

    def crowd(self, locks: Locks, key: str, count: int, limit: int) -> list[dict[str, Any]]:
        made = [locks.acquire(key, new_id(), 30, limit=limit) for _ in range(count)]
        assert all(response.status_code == 200 for response in made), made[-1].text
        return [response.json() for response in made]

    def test_only_the_named_owners_leases_are_read(
        self, live_server: LiveServer, locks: Locks, key: str
    ) -> None:
        """In the batch's transaction the key's row holds the named owners' leases alone."""
        leases = self.crowd(locks, key, 12, limit=20)
        named = {leases[3]["owner_token"], leases[7]["owner_token"]}
        storage = open_storage(live_server.database_url)
        try:
            with storage.write() as tx:
                project = next(p for p in range(1, 100) if tx.load_lock(p, key) is not None)
            with storage.write() as tx:
                row = tx.load_locks(project, [key], owners={key: named})[key]
                counts = tx.live_counts(project, key)
        finally:
            storage.close()
        assert row is not None
        assert [x.fencing_token for x in row.leases] == [
            leases[3]["fencing_token"],
            leases[7]["fencing_token"],
        ]
        assert (row.fencing_token, row.limit) == (leases[-1]["fencing_token"], 20)
        assert counts == (12, leases[-1]["fencing_token"])

    def test_renewals_touch_the_named_leases_alone(self, locks: Locks, key: str) -> None:
        """Two of twelve holders renewed: the other ten keep their expiry; the version moves by
        nothing a renewal without a label change would not move it by."""
        leases = self.crowd(locks, key, 12, limit=20)
        before = {
            h["fencing_token"]: h
            for h in locks.http.get(f"/v1/locks/{key}/holders").json()["holders"]
        }
        version = locks.state(key)["version"]
        answered = results(
            locks.renew_many([entry(leases[3], ttl=90), entry(leases[7], ttl=90, label="x")])
        )
        assert [r["lease"]["ttl_seconds"] for r in answered] == [90, 90]
        after = {
            h["fencing_token"]: h
            for h in locks.http.get(f"/v1/locks/{key}/holders").json()["holders"]
        }
        renewed = {leases[3]["fencing_token"], leases[7]["fencing_token"]}
        assert after.keys() == before.keys()
        for token, holder in after.items():
            if token in renewed:
                assert holder["expires_at"] > before[token]["expires_at"]
            else:
                assert holder == before[token]
        assert after[leases[7]["fencing_token"]]["label"] == "x"
        assert locks.state(key)["version"] == version + 1  # the one label changed

    @pytest.mark.parametrize(("limit", "count"), [(1, 1), (20, 5), (20, 1)])
    def test_refusals_speak_of_the_leases_not_read(
        self, locks: Locks, key: str, limit: int, count: int
    ) -> None:
        """The reasons a refused entry gives are those a single renew gives, which speak of the
        key's leases the batch did not name (a lock's holder, how many are live): the batch
        counts them when it refuses."""
        leases = self.crowd(locks, key, count, limit=limit)
        last = leases[-1]
        stranger = {**last, "owner_token": new_id()}
        batch = [
            entry(stranger),
            entry({**stranger, "fencing_token": last["fencing_token"] + 100}),
        ]
        answered = results(locks.renew_many(batch))
        single = [
            locks.renew(key, e["owner_token"], e["fencing_token"], 60).json()["error"]["message"]
            for e in batch
        ]
        assert [r["error"]["message"] for r in answered] == single
        assert "no lease is live" not in single[0]
