"""Groups over real HTTP, on both backends: members as leases, capabilities, bounds, watching.

Every answer is checked against openapi.yaml (the `api` fixture). Watches are long polls in
threads of their own; whether one is parked on the server is read from the server's own count,
never guessed by sleeping.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import httpx
import pytest

from tests.conftest import LiveServer
from tests.support.raw import new_id, wait_for
from tests.support.server import serve_in_thread
from volcano_server import ServerConfig, create_app

CAPABILITY_MAX = 65_538


class Groups:
    """The group operations over raw HTTP, returning the raw responses."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def create(self, group: str, *, request_id: str | None = None) -> httpx.Response:
        return self.http.put(f"/v1/groups/{group}", headers=_rid(request_id))

    def delete(self, group: str) -> httpx.Response:
        return self.http.delete(f"/v1/groups/{group}")

    def get(self, group: str, **params: Any) -> httpx.Response:
        return self.http.get(f"/v1/groups/{group}", params=params)

    def join(
        self,
        group: str,
        member: str,
        owner: str,
        ttl: float = 30,
        *,
        capabilities: Any = None,
        request_id: str | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"owner_token": owner, "ttl_seconds": ttl}
        if capabilities is not None:
            body["capabilities"] = capabilities
        return self._post(group, member, "join", body, request_id)

    def renew(
        self, group: str, member: str, owner: str, fence: int, ttl: float = 30
    ) -> httpx.Response:
        body = {"owner_token": owner, "fencing_token": fence, "ttl_seconds": ttl}
        return self._post(group, member, "renew", body, None)

    def update(
        self, group: str, member: str, owner: str, fence: int, capabilities: Any
    ) -> httpx.Response:
        body = {"owner_token": owner, "fencing_token": fence, "capabilities": capabilities}
        return self._post(group, member, "capabilities", body, None)

    def leave(self, group: str, member: str, owner: str, fence: int) -> httpx.Response:
        body = {"owner_token": owner, "fencing_token": fence}
        return self._post(group, member, "leave", body, None)

    def remove(self, group: str, member: str) -> httpx.Response:
        return self.http.delete(f"/v1/groups/{group}/members/{member}")

    def member(self, group: str, member: str) -> httpx.Response:
        return self.http.get(f"/v1/groups/{group}/members/{member}")

    def members(self, group: str, **params: Any) -> httpx.Response:
        return self.http.get(f"/v1/groups/{group}/members", params=params)

    def listed(self, **params: Any) -> httpx.Response:
        return self.http.get("/v1/groups", params=params)

    def renew_many(
        self, entries: list[dict[str, Any]], *, request_id: str | None = None
    ) -> httpx.Response:
        return self.http.post(
            "/v1/members/renew", json={"memberships": entries}, headers=_rid(request_id)
        )

    def _post(
        self, group: str, member: str, what: str, body: dict[str, Any], request_id: str | None
    ) -> httpx.Response:
        return self.http.post(
            f"/v1/groups/{group}/members/{member}/{what}", json=body, headers=_rid(request_id)
        )


def _rid(request_id: str | None) -> dict[str, str]:
    return {} if request_id is None else {"X-Request-Id": request_id}


@pytest.fixture
def groups(api: httpx.Client) -> Groups:
    return Groups(api)


@pytest.fixture
def group(groups: Groups) -> str:
    """A group no other test uses, created."""
    name = f"g-{uuid.uuid4().hex[:12]}"
    assert groups.create(name).status_code == 201
    return name


def joined(groups: Groups, group: str, member: str = "w1", **kwargs: Any) -> dict[str, Any]:
    """Join and return the membership (owner token in it)."""
    response = groups.join(group, member, new_id(), **kwargs)
    assert response.status_code == 200, response.text
    membership: dict[str, Any] = response.json()
    return membership


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


class TestCreateGroup:
    def test_a_new_group_is_empty_at_version_one(self, groups: Groups) -> None:
        """Create answers 201 with the group's state: version 1, no member, no token."""
        name = f"g-{uuid.uuid4().hex[:12]}"
        response = groups.create(name)
        assert response.status_code == 201
        assert response.json() == {"group": name, "version": 1, "fencing_token": None, "members": 0}

    def test_an_existing_group_is_group_exists(self, groups: Groups, group: str) -> None:
        """Creating it again is 409 group_exists."""
        assert code(groups.create(group)) == (409, "group_exists")

    def test_a_repeated_request_id_is_replayed(self, groups: Groups) -> None:
        """The same request id gets the stored 201, not a 409, and changes nothing."""
        name, request_id = f"g-{uuid.uuid4().hex[:12]}", new_id()
        first = groups.create(name, request_id=request_id)
        again = groups.create(name, request_id=request_id)
        assert (again.status_code, again.json()) == (201, first.json())
        assert again.headers["Idempotent-Replayed"] == "true"

    def test_created_again_its_history_goes_on(self, groups: Groups, group: str) -> None:
        """Deleted and created again: its version and its members' tokens never go back."""
        first = joined(groups, group)
        assert groups.leave(group, "w1", first["owner_token"], first["fencing_token"]).is_success
        before = groups.get(group).json()["version"]
        assert groups.delete(group).status_code == 204
        again = groups.create(group).json()
        assert again["version"] > before
        assert again["fencing_token"] == first["fencing_token"]
        assert joined(groups, group)["fencing_token"] > first["fencing_token"]

    def test_projects_are_isolated(self, live_server: LiveServer, group: str) -> None:
        """The same name in another project is another group."""
        with live_server.http(live_server.other) as other:
            assert code(Groups(other).get(group)) == (404, "group_not_found")
            assert Groups(other).create(group).status_code == 201


class TestDeleteGroup:
    def test_a_live_member_refuses_the_delete(self, groups: Groups, group: str) -> None:
        """409 group_not_empty while a member is live; deleted once it has left."""
        membership = joined(groups, group)
        assert code(groups.delete(group)) == (409, "group_not_empty")
        groups.leave(group, "w1", membership["owner_token"], membership["fencing_token"])
        assert groups.delete(group).status_code == 204
        assert code(groups.get(group)) == (404, "group_not_found")

    def test_expired_members_do_not_count(self, groups: Groups, group: str) -> None:
        """A member whose ttl ran out goes with the group."""
        joined(groups, group, ttl=0.1)
        wait_for(lambda: groups.get(group).json()["members"] == 0, "the member expired")
        assert groups.delete(group).status_code == 204

    def test_a_missing_group_is_not_found(self, groups: Groups) -> None:
        """Deleting a group that does not exist is 404 group_not_found."""
        assert code(groups.delete("never-made")) == (404, "group_not_found")


class TestJoinGroup:
    def test_members_take_the_groups_next_tokens(self, groups: Groups, group: str) -> None:
        """Each new member gets a greater fencing token, and the group counts it."""
        first, second = joined(groups, group, "w1"), joined(groups, group, "w2")
        assert second["fencing_token"] > first["fencing_token"]
        state = groups.get(group).json()
        assert (state["members"], state["fencing_token"]) == (2, second["fencing_token"])

    def test_another_owner_of_a_live_member_is_member_exists(
        self, groups: Groups, group: str
    ) -> None:
        """A live member's name is its holder's: 409 member_exists with Retry-After."""
        joined(groups, group, ttl=30)
        response = groups.join(group, "w1", new_id())
        assert code(response) == (409, "member_exists")
        assert 1 <= int(response.headers["Retry-After"]) <= 30

    def test_the_holder_joining_again_keeps_its_membership(
        self, groups: Groups, group: str
    ) -> None:
        """The same owner token gets the same fencing token back, with a later expiry."""
        first = joined(groups, group, ttl=5)
        again = groups.join(group, "w1", first["owner_token"], 60).json()
        assert again["fencing_token"] == first["fencing_token"]
        assert again["expires_at"] > first["expires_at"]

    def test_a_missing_group_is_not_found(self, groups: Groups) -> None:
        """Joining a group that does not exist is 404 group_not_found (tooz's GroupNotCreated)."""
        assert code(groups.join("never-made", "w1", new_id())) == (404, "group_not_found")

    def test_an_expired_member_leaves_by_itself(self, groups: Groups, group: str) -> None:
        """Unless renewed, a member leaves when its ttl runs out; its name is free again."""
        first = joined(groups, group, ttl=0.1)
        wait_for(lambda: groups.member(group, "w1").status_code == 404, "the member expired")
        assert code(groups.member(group, "w1")) == (404, "member_not_found")
        assert joined(groups, group)["fencing_token"] > first["fencing_token"]

    def test_a_replay_tells_the_membership_as_it_is_now(self, groups: Groups, group: str) -> None:
        """A repeated join tells the membership as it is now (shortened since by a renewal),
        never the expiry stored with it (issue 34)."""
        owner, request_id = new_id(), new_id()
        first = groups.join(group, "w1", owner, 60, request_id=request_id).json()
        shorter = groups.renew(group, "w1", owner, first["fencing_token"], 5).json()
        again = groups.join(group, "w1", owner, 60, request_id=request_id)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == shorter

    def test_a_replay_of_a_membership_that_ended_is_refused(
        self, groups: Groups, group: str
    ) -> None:
        """A repeated join whose membership has left since is 409 lease_not_held, replayed."""
        owner, request_id = new_id(), new_id()
        first = groups.join(group, "w1", owner, request_id=request_id).json()
        groups.leave(group, "w1", owner, first["fencing_token"])
        again = groups.join(group, "w1", owner, request_id=request_id)
        assert code(again) == (409, "lease_not_held")
        assert again.headers["Idempotent-Replayed"] == "true"


class TestCapabilities:
    @pytest.mark.parametrize(
        "capabilities",
        [
            {"json": {"host": "10.0.0.7", "ports": [80, 443], "tags": None, "é": 1.5}},
            {"json": "a string"},
            {"base64": base64.b64encode(bytes(range(256))).decode()},
        ],
    )
    def test_they_come_back_as_given(
        self, groups: Groups, group: str, capabilities: dict[str, Any]
    ) -> None:
        """JSON and bytes capabilities are shown as they were given, by get and list."""
        joined(groups, group, capabilities=capabilities)
        assert groups.member(group, "w1").json()["capabilities"] == capabilities
        assert groups.members(group).json()["members"][0]["capabilities"] == capabilities

    def test_the_bound_is_65538_bytes(self, groups: Groups, group: str) -> None:
        """65,538 bytes fit, in either form; one byte more is 422 naming the field."""
        most = bytes(CAPABILITY_MAX)
        joined(groups, group, "b", capabilities={"base64": base64.b64encode(most).decode()})
        joined(groups, group, "j", capabilities={"json": "x" * (CAPABILITY_MAX - 2)})
        too_many = groups.join(
            group, "b2", new_id(), capabilities={"base64": base64.b64encode(most + b"x").decode()}
        )
        assert code(too_many) == (422, "validation_error")
        assert "base64: must be at most 87384 characters" in too_many.json()["error"]["message"]
        too_long = groups.join(group, "j2", new_id(), capabilities={"json": "x" * CAPABILITY_MAX})
        assert code(too_long) == (422, "validation_error")
        assert "holds 65540 bytes" in too_long.json()["error"]["message"]

    def test_escaped_capabilities_fit_the_group_body_limit(
        self, groups: Groups, group: str
    ) -> None:
        """The most JSON capabilities hold, sent with every character escaped (six times as
        long), fits a join's body, and is stored at its compact size."""
        count = CAPABILITY_MAX - 2  # "a" is one byte stored, six sent as \u0061; and two quotes
        body = (
            f'{{"owner_token":"{new_id()}","ttl_seconds":30,"capabilities":{{"json":"'
            + "\\u0061" * count
            + '"}}'
        )
        response = groups.http.post(
            f"/v1/groups/{group}/members/w1/join",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert groups.member(group, "w1").json()["capabilities"] == {"json": "a" * count}

    def test_bodies_over_512_kib_are_refused(self, groups: Groups, group: str) -> None:
        """A join's body has its own limit, 524,288 bytes: over it is 413."""
        response = groups.join(group, "w1", new_id(), capabilities={"json": "x" * 524_288})
        assert code(response) == (413, "payload_too_large")

    def test_an_update_moves_the_version_unless_the_same(self, groups: Groups, group: str) -> None:
        """New capabilities are a change of the group; the same ones are not; null clears."""
        membership = joined(groups, group, capabilities={"json": 1})
        owner, fence = membership["owner_token"], membership["fencing_token"]
        before = groups.get(group).json()["version"]
        assert groups.update(group, "w1", owner, fence, {"json": 1}).status_code == 200
        assert groups.get(group).json()["version"] == before
        assert groups.update(group, "w1", owner, fence, None).status_code == 200
        assert groups.get(group).json()["version"] > before
        assert groups.member(group, "w1").json()["capabilities"] is None

    def test_exactly_one_form(self, groups: Groups, group: str) -> None:
        """Capabilities are one of json or base64: both, or neither, is 422."""
        for capabilities in ({}, {"json": 1, "base64": "AA=="}, {"base64": "not base64"}):
            response = groups.join(group, "w1", new_id(), capabilities=capabilities)
            assert code(response) == (422, "validation_error")


class TestRenewLeaveRemove:
    def test_renewal_keeps_the_membership(self, groups: Groups, group: str) -> None:
        """A renewal moves the expiry; the token and the group's version stay."""
        membership = joined(groups, group, ttl=5)
        version = groups.get(group).json()["version"]
        renewed = groups.renew(group, "w1", membership["owner_token"], membership["fencing_token"])
        assert renewed.json()["fencing_token"] == membership["fencing_token"]
        assert renewed.json()["expires_at"] > membership["expires_at"]
        assert groups.get(group).json()["version"] == version

    def test_only_the_holder_renews_updates_or_leaves(self, groups: Groups, group: str) -> None:
        """Another owner token, or another fencing token, is 409 lease_not_held."""
        membership = joined(groups, group)
        fence = membership["fencing_token"]
        for response in (
            groups.renew(group, "w1", new_id(), fence),
            groups.renew(group, "w1", membership["owner_token"], fence + 1),
            groups.update(group, "w1", new_id(), fence, None),
            groups.leave(group, "w1", new_id(), fence),
        ):
            assert code(response) == (409, "lease_not_held")

    def test_a_missing_group_is_not_found(self, groups: Groups) -> None:
        """Renew, leave and remove in a group that does not exist: 404 group_not_found."""
        for response in (
            groups.renew("never-made", "w1", new_id(), 1),
            groups.leave("never-made", "w1", new_id(), 1),
            groups.remove("never-made", "w1"),
        ):
            assert code(response) == (404, "group_not_found")

    def test_removal_needs_no_owner_token(self, groups: Groups, group: str) -> None:
        """Removing a member ends it whoever holds it; its holder's renewal is then refused."""
        membership = joined(groups, group)
        removed = groups.remove(group, "w1").json()
        assert removed == {
            "group": group,
            "member": "w1",
            "removed": True,
            "fencing_token": membership["fencing_token"],
        }
        renewal = groups.renew(group, "w1", membership["owner_token"], membership["fencing_token"])
        assert code(renewal) == (409, "lease_not_held")
        assert groups.remove(group, "w1").json()["removed"] is False


class TestRenewMemberships:
    def test_each_entry_is_judged_alone(self, groups: Groups, group: str) -> None:
        """Renewed entries and refused ones (409, 404) side by side, in order."""
        membership = joined(groups, group)
        entry = {
            "group": group,
            "member": "w1",
            "owner_token": membership["owner_token"],
            "fencing_token": membership["fencing_token"],
            "ttl_seconds": 60,
        }
        results = groups.renew_many(
            [entry, {**entry, "fencing_token": 999}, {**entry, "group": "never-made"}]
        ).json()["results"]
        assert results[0]["membership"]["fencing_token"] == membership["fencing_token"]
        assert [(r.get("status"), r.get("error", {}).get("code")) for r in results[1:]] == [
            (409, "lease_not_held"),
            (404, "group_not_found"),
        ]

    def test_a_replay_refuses_what_ended_since(self, groups: Groups, group: str) -> None:
        """A repeated batch gets its stored results, each membership ended since refused."""
        first, second = joined(groups, group, "w1"), joined(groups, group, "w2")
        entries = [
            {
                "group": group,
                "member": m["member"],
                "owner_token": m["owner_token"],
                "fencing_token": m["fencing_token"],
                "ttl_seconds": 60,
            }
            for m in (first, second)
        ]
        request_id = new_id()
        assert (
            "membership" in groups.renew_many(entries, request_id=request_id).json()["results"][1]
        )
        groups.leave(group, "w2", second["owner_token"], second["fencing_token"])
        again = groups.renew_many(entries, request_id=request_id)
        assert again.headers["Idempotent-Replayed"] == "true"
        results = again.json()["results"]
        assert "membership" in results[0]
        assert (results[1]["member"], results[1]["error"]["code"]) == ("w2", "lease_not_held")

    def test_500_entries_of_the_longest_names_fit(self, groups: Groups) -> None:
        """The batch's body limit takes 500 entries with 240-character groups and 200-character
        members."""
        long_group = "g" + uuid.uuid4().hex + "x" * (240 - 33)
        assert groups.create(long_group).status_code == 201
        entry = {
            "group": long_group,
            "member": "m" * 200,
            "owner_token": new_id(),
            "fencing_token": 2**53 - 1,
            "ttl_seconds": 86400,
        }
        response = groups.renew_many([entry] * 500)
        assert response.status_code == 200
        assert len(response.json()["results"]) == 500


class TestListing:
    def test_groups_are_listed_in_pages(self, groups: Groups) -> None:
        """Existing groups under a prefix, in order, a page at a time; deleted ones are not."""
        prefix = f"p-{uuid.uuid4().hex[:8]}-"
        names = [f"{prefix}{n}" for n in range(5)]
        for name in names:
            groups.create(name)
        groups.delete(names[2])
        seen: list[str] = []
        after = ""
        while True:
            page = groups.listed(prefix=prefix, limit=2, after=after).json()
            seen += [state["group"] for state in page["groups"]]
            if page["next"] is None:
                break
            after = page["next"]
        assert seen == [names[0], names[1], names[3], names[4]]

    def test_members_are_paged_by_count(self, groups: Groups, group: str) -> None:
        """Members in order, `limit` at a time, each page naming the group's version."""
        for name in ("a", "b", "c"):
            joined(groups, group, name)
        first = groups.members(group, limit=2).json()
        assert [m["member"] for m in first["members"]] == ["a", "b"]
        assert first["version"] == groups.get(group).json()["version"]
        last = groups.members(group, limit=2, after=first["next"]).json()
        assert ([m["member"] for m in last["members"]], last["next"]) == (["c"], None)

    def test_members_are_paged_by_bytes(self, groups: Groups, group: str) -> None:
        """A page carries at most 256 KiB of capabilities: five members of 64 KiB take two."""
        big = {"base64": base64.b64encode(bytes(65_536)).decode()}
        for name in ("a", "b", "c", "d", "e"):
            joined(groups, group, name, capabilities=big)
        first = groups.members(group, limit=500).json()
        assert [m["member"] for m in first["members"]] == ["a", "b", "c", "d"]
        last = groups.members(group, limit=500, after=first["next"]).json()
        assert ([m["member"] for m in last["members"]], last["next"]) == (["e"], None)

    def test_a_missing_group_has_no_members(self, groups: Groups) -> None:
        """Listing the members of a group that does not exist is 404 group_not_found."""
        assert code(groups.members("never-made")) == (404, "group_not_found")


# -- watching ---------------------------------------------------------------------------------


@attrs.frozen
class Watched:
    """A server of this module's own on the session's database, and its app (to count watches)."""

    server: LiveServer
    app: Any

    def until_parked(self, count: int) -> None:
        wait_for(lambda: len(self.app.state.watches) == count, f"{count} watches parked")


@pytest.fixture(scope="module")
def watched(live_server: LiveServer) -> Iterator[Watched]:
    """A second server on the session server's database: changes made through the first one
    reach its watchers as another server's would (NOTIFY, or SQLite polling)."""
    app = create_app(ServerConfig(database_url=live_server.database_url, access_log=False))
    with serve_in_thread(app) as url:
        yield Watched(attrs.evolve(live_server, url=url), app)


class Poll:
    """`GET /v1/groups/{group}?after_version=&wait_seconds=` in a thread of its own."""

    def __init__(self, server: LiveServer, group: str, after: int, wait: float = 60) -> None:
        self.response: httpx.Response | None = None
        self._http = server.http(server.project)
        params = {"after_version": after, "wait_seconds": wait}
        self._thread = threading.Thread(target=self._run, args=(group, params), daemon=True)
        self._thread.start()

    def _run(self, group: str, params: dict[str, Any]) -> None:
        try:
            self.response = self._http.get(f"/v1/groups/{group}", params=params)
        finally:
            self._http.close()

    def answer(self, timeout: float = 20) -> httpx.Response:
        self._thread.join(timeout)
        assert self.response is not None, "the watch was not answered"
        return self.response


class TestWatchGroup:
    def test_a_join_elsewhere_answers_the_watch(
        self, groups: Groups, group: str, watched: Watched
    ) -> None:
        """A watch held by one server is answered when a member joins through another."""
        version = groups.get(group).json()["version"]
        poll = Poll(watched.server, group, version)
        watched.until_parked(1)
        joined(groups, group)
        state = poll.answer().json()
        assert (state["members"], state["version"] > version) == (1, True)

    def test_an_expiry_answers_the_watch(
        self, groups: Groups, group: str, watched: Watched
    ) -> None:
        """A member whose ttl runs out moves the version with no write: the watch hears it."""
        joined(groups, group, ttl=1)
        version = groups.get(group).json()["version"]
        poll = Poll(watched.server, group, version)
        watched.until_parked(1)
        state = poll.answer().json()
        assert (state["members"], state["version"]) == (0, version + 1)

    def test_a_deletion_answers_404(self, groups: Groups, group: str, watched: Watched) -> None:
        """A watched group that is deleted answers its watch with 404 group_not_found."""
        version = groups.get(group).json()["version"]
        poll = Poll(watched.server, group, version)
        watched.until_parked(1)
        groups.delete(group)
        assert code(poll.answer()) == (404, "group_not_found")

    def test_a_missing_group_is_answered_at_once(self, watched: Watched) -> None:
        """A watch of a group that does not exist is answered 404 at once, whatever version."""
        started = time.monotonic()
        with watched.server.http(watched.server.project) as http:
            response = Groups(http).get("never-made", after_version=0, wait_seconds=30)
        assert code(response) == (404, "group_not_found")
        assert time.monotonic() - started < 30  # not held for the wait: no timing claim past that
