"""The interoperability scenario with two Python clients generated from openapi.yaml.

    python scenario.py datamodel|openapi-generator BASE_URL   (keys in VOLCANO_*_KEY)

- datamodel: pydantic models written by datamodel-code-generator (out/volcano_models.py), sent
  with httpx; every answer is parsed by the models.
- openapi-generator: the Python client openapi-generator writes (out/og/volcano_og), with its
  own auth settings; it parses every answer itself.

Both also parse a lease with one field more than documented, as a later minor version may send.
After the original lock operations, each exercises the later ones through its generated code: a
limit-2 key with labelled holders (a third refused with lock_held, another limit refused with
limit_mismatch carrying the key's limit), the fence check, a long-poll watch answered by a change
made from a second thread, a listing with limit=1 followed to its end, a batch renewal with
one entry refused, and shared locks (two shared holders and their modes, a writer refused, then
in line and not passed by a later reader, mode_mismatch, and shared_with_limit three ways).
Then groups, every group operation: members joined with JSON and with bytes capabilities,
member_exists, members paged, a group's watch answered by a leave, a membership renewed and its
capabilities changed, a batch renewal of memberships with one refused (and replayed),
group_not_empty, a removal, the deletion, and groups listed a page at a time.
scripts/interop.sh generates both clients, then runs this once per client.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

OUT = Path(__file__).resolve().parent / "out"


@dataclass(frozen=True)
class Answer:
    """An answer as a client's generated code gave it: status, headers, parsed body."""

    status: int
    headers: Mapping[str, str]  # lower-case names
    body: dict[str, Any] | None
    variants: tuple[str, ...] = ()  # a batch renewal's results: the generated class of each


Renewal = dict[str, Any]  # one entry of a batch renewal: key, owner_token, fencing_token, ...
Capabilities = dict[str, Any] | None  # {"json": value} or {"base64": text}; None: none


class LockClient(Protocol):
    """The lock operations, through one generated client."""

    def acquire(
        self,
        key: str,
        token: str,
        ttl: float,
        *,
        request_id: str | None = None,
        limit: int | None = None,
        label: str | None = None,
        wait_seconds: float | None = None,
        shared: bool | None = None,
    ) -> Answer:
        """POST /v1/locks/{key}/acquire."""

    def get(self, key: str) -> Answer:
        """GET /v1/locks/{key}."""

    def watch(self, key: str, after_version: int, wait_seconds: float) -> Answer:
        """GET /v1/locks/{key}?after_version=&wait_seconds=."""

    def check(self, key: str, fencing_token: int) -> Answer:
        """GET /v1/locks/{key}/leases/{fencing_token}."""

    def list(self, prefix: str, after: str | None, limit: int) -> Answer:
        """GET /v1/locks?prefix=&after=&limit=."""

    def holders(self, key: str, after: int | None, limit: int) -> Answer:
        """GET /v1/locks/{key}/holders?after=&limit=."""

    def renew(
        self, key: str, token: str, fencing_token: int, ttl: float, label: str | None = None
    ) -> Answer:
        """POST /v1/locks/{key}/renew."""

    def renew_many(self, leases: list[Renewal], request_id: str | None = None) -> Answer:
        """POST /v1/leases/renew; `variants` names the class each result was decoded into."""

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        """POST /v1/locks/{key}/release."""

    def force_release(self, key: str) -> Answer:
        """DELETE /v1/locks/{key}."""

    def parse_lease(self, text: str) -> dict[str, Any]:
        """A LockLease body parsed by the generated models."""

    def create_group(self, group: str) -> Answer:
        """PUT /v1/groups/{group}."""

    def get_group(
        self, group: str, after_version: int | None = None, wait_seconds: float | None = None
    ) -> Answer:
        """GET /v1/groups/{group}, a long poll with after_version and wait_seconds."""

    def list_groups(self, prefix: str, after: str | None, limit: int) -> Answer:
        """GET /v1/groups?prefix=&after=&limit=."""

    def delete_group(self, group: str) -> Answer:
        """DELETE /v1/groups/{group}."""

    def join(
        self, group: str, member: str, token: str, ttl: float, capabilities: Capabilities
    ) -> Answer:
        """POST /v1/groups/{group}/members/{member}/join."""

    def renew_membership(
        self, group: str, member: str, token: str, fencing_token: int, ttl: float
    ) -> Answer:
        """POST /v1/groups/{group}/members/{member}/renew."""

    def update_capabilities(
        self, group: str, member: str, token: str, fencing_token: int, capabilities: Capabilities
    ) -> Answer:
        """POST /v1/groups/{group}/members/{member}/capabilities."""

    def leave(self, group: str, member: str, token: str, fencing_token: int) -> Answer:
        """POST /v1/groups/{group}/members/{member}/leave."""

    def get_member(self, group: str, member: str) -> Answer:
        """GET /v1/groups/{group}/members/{member}."""

    def list_members(self, group: str, after: str | None, limit: int) -> Answer:
        """GET /v1/groups/{group}/members?after=&limit=."""

    def remove_member(self, group: str, member: str) -> Answer:
        """DELETE /v1/groups/{group}/members/{member}."""

    def renew_memberships(
        self, memberships: list[Renewal], request_id: str | None = None
    ) -> Answer:
        """POST /v1/members/renew; `variants` names the class each result was decoded into."""


def run(client: LockClient, name: str) -> None:
    """Acquire, get, renew, conflict, release, force release, replay; raise on any surprise."""
    key = f"interop-{name.replace('-', '')}-{uuid.uuid4().hex[:8]}"

    def step(text: str) -> None:
        print(f"  {name}: {text}", flush=True)

    step("acquire")
    first = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(first.status == 200 and first.body is not None, "acquire", first)
    lease = first.body or {}
    _expect(lease["key"] == key and lease["ttl_seconds"] == 30, "acquire", first)
    fencing = lease["fencing_token"]

    step("get")
    state = client.get(key)
    _expect(state.status == 200, "get", state)
    _expect(_pick(state, "held", "fencing_token") == (True, fencing), "get", state)

    step("renew")
    renewed = client.renew(key, lease["owner_token"], fencing, 60)
    _expect(_pick(renewed, "fencing_token", "ttl_seconds") == (fencing, 60), "renew", renewed)

    step("conflict with Retry-After")
    conflict = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(conflict.status == 409, "conflict", conflict)
    _expect((conflict.body or {})["error"]["code"] == "lock_held", "conflict", conflict)
    _expect(int(conflict.headers["retry-after"]) >= 1, "conflict", conflict)

    step("release")
    released = client.release(key, lease["owner_token"], fencing)
    _expect(released.status == 204, "release", released)

    step("force release")
    taken = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(taken.status == 200 and (taken.body or {})["fencing_token"] > fencing, "take", taken)
    forced = client.force_release(key)
    expected = (True, (taken.body or {})["fencing_token"])
    _expect(_pick(forced, "released", "fencing_token") == expected, "force release", forced)

    step("replay with an upper-case caller-supplied token and request id")
    token, request_id = str(uuid.uuid4()).upper(), str(uuid.uuid4()).upper()
    original = client.acquire(key, token, 30, request_id=request_id)
    replay = client.acquire(key, token, 30, request_id=request_id)
    for answer in (original, replay):
        _expect(
            answer.status == 200 and (answer.body or {})["owner_token"] == token, "replay", answer
        )
        _expect(answer.headers["x-request-id"] == request_id, "replay", answer)
    _expect("idempotent-replayed" not in original.headers, "replay", original)
    _expect(replay.headers.get("idempotent-replayed") == "true", "replay", replay)
    _expect(replay.body == original.body, "replay", replay)
    cleanup = client.release(key, token, (original.body or {})["fencing_token"])
    _expect(cleanup.status == 204, "release", cleanup)

    step("a lease with a field added by a later version")
    added = {**(original.body or {}), "added_in_a_later_version": True}
    parsed = client.parse_lease(json.dumps(added, default=str))
    _expect(parsed["owner_token"] == token, "parse", Answer(200, {}, parsed))
    run_later_operations(client, key, step)
    run_groups(client, key, step)
    print(f"  {name}: scenario passed on {key}", flush=True)


def run_later_operations(client: LockClient, key: str, step: Callable[[str], None]) -> None:
    """Semaphores, labels, the fence check, watching, listing, batch renewal; raise on surprises."""
    later = _Later(client, key)
    step("a key never acquired: version 0, no token, no holders, limit 1")
    later.fresh()
    step("semaphore: two holders of a limit-2 key, their labels in holders, paged one by one")
    later.semaphore()
    step("a third holder refused with lock_held and Retry-After; another limit with limit_mismatch")
    later.refusals()
    step("fence check: a live token, a token never issued")
    later.fence_check()
    step("watch: a long poll from the current version answers when a renew changes a label")
    later.watch()
    step("a waiter in line: waiters 1, version unchanged")
    later.wait_in_line()
    step("release hands the slot to the waiter; the fence check says the released one is not live")
    later.release()
    step("listing a unique prefix one key a page, following next until null")
    later.listing()
    step("renewing many leases at once: one refused, the others renewed; replayed by request id")
    later.renew_many()
    step("shared: two shared holders, each holder's mode; a writer refused with lock_held")
    later.shared()
    step("mode_mismatch for the same owner in the other mode; shared_with_limit three ways")
    later.shared_refusals()
    step("a writer in line is not passed by a later reader; the last reader's release grants it")
    later.writer_in_line()
    step("force release of a semaphore and the listed keys; nothing of this run is left listed")
    later.clean_up()


class _Later:
    """The steps of run_later_operations, sharing the leases they take."""

    LABEL_A = "worker-a.example.internal:8080"
    LABEL_B = "worker-b.example.internal:9090"

    def __init__(self, client: LockClient, key: str) -> None:
        self.client, self.key, self.sem = client, key, f"{key}-sem"
        self.a: dict[str, Any] = {}
        self.b: dict[str, Any] = {}
        self.held: dict[str, Any] = {}
        self.listed: list[dict[str, Any]] = []
        self.w: dict[str, Any] = {}  # the waiter's lease
        self.pool = ThreadPoolExecutor(2)  # second requests: a watch, a waiting acquire
        self.waiting: Future[Answer] | None = None
        self.shared_key = f"{key}-shared"
        self.readers: list[dict[str, Any]] = []

    def take(self, key: str, limit: int, label: str | None = None) -> dict[str, Any]:
        answer = self.client.acquire(key, str(uuid.uuid4()), 30, limit=limit, label=label)
        _expect(answer.status == 200 and answer.body is not None, f"acquire {key}", answer)
        return answer.body or {}

    def state(self, key: str) -> dict[str, Any]:
        answer = self.client.get(key)
        _expect(answer.status == 200 and answer.body is not None, f"get {key}", answer)
        return answer.body or {}

    def check(self, key: str, fencing_token: int) -> tuple[bool, bool]:
        """(live, expires_at is not null), as the fence check answers."""
        answer = self.client.check(key, fencing_token)
        body = answer.body or {}
        _expect(answer.status == 200 and body.get("key") == key, "check", answer)
        _expect(body["fencing_token"] == fencing_token, "check", answer)
        return body["live"], body["expires_at"] is not None

    def fresh(self) -> None:
        fresh = self.state(f"{self.key}-fresh")
        fields = ("held", "expires_at", "fencing_token", "limit", "holders", "waiters", "version")
        seen = tuple(fresh[field] for field in fields)
        _expect(seen == (False, None, None, 1, [], 0, 0), "fresh", Answer(200, {}, fresh))

    def semaphore(self) -> None:
        self.a = a = self.take(self.sem, 2, self.LABEL_A)
        self.b = b = self.take(self.sem, 2)
        _expect(b["fencing_token"] > a["fencing_token"], "second holder", Answer(200, {}, b))
        self.held = held = self.state(self.sem)
        seen = (held["held"], held["limit"], held["waiters"], held["fencing_token"])
        _expect(seen == (True, 2, 0, b["fencing_token"]), "semaphore", Answer(200, {}, held))
        _expect(held["version"] >= 2, "semaphore version", Answer(200, {}, held))
        expected = [(a["fencing_token"], self.LABEL_A), (b["fencing_token"], None)]
        _expect(_holders(held) == expected, "holders", Answer(200, {}, held))
        first = self.client.holders(self.sem, None, 1)
        page = first.body or {}
        seen = (first.status, _holders(page), page.get("next"))
        _expect(seen == (200, expected[:1], a["fencing_token"]), "holders page 1", first)
        second = self.client.holders(self.sem, page["next"], 1)
        page = second.body or {}
        seen = (second.status, _holders(page), page.get("next"))
        _expect(seen == (200, expected[1:], None), "holders page 2", second)

    def refusals(self) -> None:
        third = self.client.acquire(self.sem, str(uuid.uuid4()), 30, limit=2)
        error = (third.body or {}).get("error") or {}
        _expect(third.status == 409 and error.get("code") == "lock_held", "third", third)
        _expect(error.get("limit") is None, "third", third)
        _expect(int(third.headers["retry-after"]) >= 1, "third", third)
        mismatch = self.client.acquire(self.sem, str(uuid.uuid4()), 30, limit=3)
        error = (mismatch.body or {}).get("error") or {}
        _expect(
            mismatch.status == 409 and error.get("code") == "limit_mismatch", "mismatch", mismatch
        )
        _expect(error.get("limit") == 2, "limit_mismatch's limit", mismatch)

    def fence_check(self) -> None:
        live = self.check(self.sem, self.a["fencing_token"])
        _expect(live == (True, True), "check live", Answer(200, {}, self.a))
        never = self.check(self.sem, self.b["fencing_token"] + 1000)
        _expect(never == (False, False), "check never issued", Answer(200, {}, self.b))

    def watch(self) -> None:
        version = self.held["version"]
        unchanged = self.client.watch(self.sem, version, 0.2)
        _expect(_pick(unchanged, "version") == (version,), "unchanged watch", unchanged)

        def poll(after: int) -> Answer:
            # Chain polls from the last version seen (the server may end one sooner than asked).
            for _ in range(20):
                answer = self.client.watch(self.sem, after, 30)
                _expect(answer.status == 200 and answer.body is not None, "watch", answer)
                if (answer.body or {})["version"] != after:
                    return answer
            raise SystemExit(f"watch: no change of {self.sem} after version {after}")

        a, b = self.a, self.b
        watching = self.pool.submit(poll, version)  # a second thread, open while the renew runs
        # Give the poll a moment to be open before the change (either order must be answered
        # with the new version; this makes the waiting path the usual one).
        time.sleep(0.25)
        renewed = self.client.renew(
            self.sem, b["owner_token"], b["fencing_token"], 30, label=self.LABEL_B
        )
        _expect(renewed.status == 200, "relabel", renewed)
        changed = watching.result(timeout=60)
        body = changed.body or {}
        _expect(body["version"] > version, "watch version", changed)
        expected = [(a["fencing_token"], self.LABEL_A), (b["fencing_token"], self.LABEL_B)]
        _expect(_holders(body) == expected, "watched holders", changed)

    def wait_in_line(self) -> None:
        before = self.state(self.sem)
        token = str(uuid.uuid4())

        def wait() -> Answer:
            # Waiting acquires, each rejoining its place in line (the server ends a wait after a
            # second here: interop.sh runs it with --max-wait 1), until a slot is granted.
            for _ in range(60):
                answer = self.client.acquire(
                    self.sem, token, 30, limit=2, label="waiter", wait_seconds=10
                )
                if answer.status == 200:
                    return answer
                error = (answer.body or {}).get("error") or {}
                _expect(answer.status == 409 and error.get("code") == "lock_held", "wait", answer)
            raise SystemExit(f"waiting for {self.sem}: no slot granted")

        self.waiting = self.pool.submit(wait)
        for _ in range(200):  # until the server reports the waiter in line
            queued = self.state(self.sem)
            if queued["waiters"] == 1:
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"{self.sem}: the waiter never showed in waiters")
        seen = (queued["version"], _holders(queued), queued["limit"])
        _expect(seen == (before["version"], _holders(before), 2), "queued", Answer(200, {}, queued))

    def release(self) -> None:
        released = self.client.release(self.sem, self.a["owner_token"], self.a["fencing_token"])
        _expect(released.status == 204, "release", released)
        if self.waiting is None:
            raise SystemExit("release: no waiter in line")
        granted = self.waiting.result(timeout=60)
        self.w = w = granted.body or {}
        ended = self.check(self.sem, self.a["fencing_token"])
        _expect(ended == (False, False), "check released", released)
        _expect(self.check(self.sem, w["fencing_token"]) == (True, True), "check waiter", granted)
        after = self.state(self.sem)
        expected = [(self.b["fencing_token"], self.LABEL_B), (w["fencing_token"], "waiter")]
        _expect(_holders(after) == expected, "holders after hand-off", Answer(200, {}, after))
        _expect(after["waiters"] == 0, "waiters after hand-off", Answer(200, {}, after))

    def listing(self) -> None:
        prefix = f"{self.key}-list-"
        self.listed = [self.take(f"{prefix}{suffix}", 1, "lister") for suffix in "cab"]
        keys: list[str] = []
        after: str | None = None
        pages = 0
        while pages < 10:
            page = self.client.list(prefix, after, 1)
            pages += 1
            body = page.body or {}
            _expect(page.status == 200 and len(body["locks"]) <= 1, "page", page)
            for lock in body["locks"]:
                _expect(lock["held"] and _holders(lock)[0][1] == "lister", "listed", page)
                keys.append(lock["key"])
            if body["next"] is None:
                break
            after = body["next"]
        else:
            raise SystemExit(f"listing {prefix}: next still not null after {pages} pages")
        _expect(keys == [f"{prefix}a", f"{prefix}b", f"{prefix}c"], f"listing {keys}", page)
        _expect(pages >= 3, "pages", page)

    def renew_many(self) -> None:
        def entry(lease: dict[str, Any], **more: Any) -> Renewal:
            fields = ("key", "owner_token", "fencing_token")
            return {**{field: lease[field] for field in fields}, "ttl_seconds": 45, **more}

        (l0, l1, _), a, b = self.listed, self.a, self.b
        leases = [entry(l0), entry(a), entry(b), entry(l1, label="relabelled")]
        request_id = str(uuid.uuid4()).upper()
        batch = self.client.renew_many(leases, request_id)
        results = (batch.body or {}).get("results", [])
        _expect(batch.status == 200 and len(results) == 4, "batch", batch)
        keys = [l0["key"], self.sem, self.sem, l1["key"]]
        _expect([result["key"] for result in results] == keys, "batch keys", batch)
        renewed, refused = "LeaseRenewed", "LeaseRefused"
        _expect(batch.variants == (renewed, refused, renewed, renewed), "batch variants", batch)
        for result, lease in zip(results, (l0, None, b, l1), strict=True):
            if lease is None:
                _expect(result["status"] == 409, "refused", batch)
                _expect(result["error"]["code"] == "lease_not_held", "refused", batch)
            else:
                got = (result["lease"]["fencing_token"], result["lease"]["ttl_seconds"])
                _expect(got == (lease["fencing_token"], 45), "renewed", batch)
        _expect(_holders(self.state(l1["key"]))[0][1] == "relabelled", "batch label", batch)
        replay = self.client.renew_many(leases, request_id)
        _expect(replay.headers.get("idempotent-replayed") == "true", "batch replay", replay)
        seen = (replay.status, replay.body, replay.variants, replay.headers["x-request-id"])
        _expect(seen == (200, batch.body, batch.variants, request_id), "batch replay", replay)

    def shared(self) -> None:
        for _ in range(2):
            answer = self.client.acquire(self.shared_key, str(uuid.uuid4()), 30, shared=True)
            _expect(answer.status == 200 and answer.body is not None, "shared", answer)
            self.readers.append(answer.body or {})
        r1, r2 = self.readers
        _expect(r2["fencing_token"] > r1["fencing_token"], "shared tokens", Answer(200, {}, r2))
        state = self.state(self.shared_key)
        modes = [(h["fencing_token"], h["mode"]) for h in state["holders"]]
        expected = [(r1["fencing_token"], "shared"), (r2["fencing_token"], "shared")]
        _expect(modes == expected, "shared holders", Answer(200, {}, state))
        writer = self.client.acquire(self.shared_key, str(uuid.uuid4()), 30)
        error = (writer.body or {}).get("error") or {}
        _expect(writer.status == 409 and error.get("code") == "lock_held", "writer", writer)

    def shared_refusals(self) -> None:
        r1 = self.readers[0]
        cases = [
            (self.shared_key, r1["owner_token"], {"shared": False}, 409, "mode_mismatch"),
            (self.shared_key, str(uuid.uuid4()), {"shared": True, "limit": 2}, 409, None),
            (self.sem, str(uuid.uuid4()), {"shared": True, "limit": 2}, 409, None),
            (self.sem, str(uuid.uuid4()), {"shared": True}, 409, None),
        ]
        for key, token, options, status, code in cases:
            answer = self.client.acquire(key, token, 30, **options)
            error = (answer.body or {}).get("error") or {}
            seen = (answer.status, error.get("code"))
            _expect(seen == (status, code or "shared_with_limit"), f"refused {options}", answer)

    def writer_in_line(self) -> None:
        token = str(uuid.uuid4())

        def write() -> Answer:
            for _ in range(60):  # each wait ends after a second (--max-wait 1): rejoin the line
                answer = self.client.acquire(self.shared_key, token, 30, wait_seconds=10)
                if answer.status == 200:
                    return answer
                error = (answer.body or {}).get("error") or {}
                _expect(answer.status == 409 and error.get("code") == "lock_held", "wait", answer)
            raise SystemExit(f"waiting to write {self.shared_key}: never granted")

        writing = self.pool.submit(write)
        for _ in range(200):
            if self.state(self.shared_key)["waiters"] == 1:
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"{self.shared_key}: the writer never showed in waiters")
        late = self.client.acquire(self.shared_key, str(uuid.uuid4()), 30, shared=True)
        error = (late.body or {}).get("error") or {}
        _expect(late.status == 409 and error.get("code") == "lock_held", "late reader", late)
        for reader in self.readers:
            token_pair = (reader["owner_token"], reader["fencing_token"])
            done = self.client.release(self.shared_key, *token_pair)
            _expect(done.status == 204, "reader release", done)
        written = writing.result(timeout=60)
        w = written.body or {}
        state = self.state(self.shared_key)
        modes = [(h["fencing_token"], h["mode"]) for h in state["holders"]]
        expected = [(w["fencing_token"], "exclusive")]
        _expect(modes == expected, "writer holds", Answer(200, {}, state))
        forced = self.client.force_release(self.shared_key)
        seen = _pick(forced, "released_count", "fencing_token")
        _expect(seen == (1, w["fencing_token"]), "force release shared", forced)

    def clean_up(self) -> None:
        held = [(self.sem, 2, self.w["fencing_token"])]  # b and the waiter: the highest token
        held += [(lease["key"], 1, lease["fencing_token"]) for lease in self.listed]
        for key, count, fencing_token in held:
            forced = self.client.force_release(key)
            seen = _pick(forced, "released", "released_count", "fencing_token")
            _expect(seen == (True, count, fencing_token), "force release", forced)
        self.pool.shutdown()
        empty = self.client.list(self.key, None, 100)
        _expect(_pick(empty, "locks", "next") == ([], None), "empty listing", empty)


def run_groups(client: LockClient, key: str, step: Callable[[str], None]) -> None:
    """Every group operation, through the generated client; raise on any surprise."""
    group = f"{key}-group"
    member_bytes = "AAH/"  # bytes 00 01 ff in base64

    step("groups: create; again is group_exists")
    created = client.create_group(group)
    _expect(created.status == 201, "create group", created)
    seen = _pick(created, "group", "version", "fencing_token", "members")
    _expect(seen == (group, 1, None, 0), "created", created)
    again = client.create_group(group)
    _expect(_code(again) == (409, "group_exists"), "create again", again)

    step("join with JSON and with bytes capabilities; another owner is member_exists")
    m1 = client.join(group, "m1", str(uuid.uuid4()), 30, {"json": {"port": 8080}})
    m2 = client.join(group, "m2", str(uuid.uuid4()), 30, {"base64": member_bytes})
    for answer in (m1, m2):
        _expect(answer.status == 200 and answer.body is not None, "join", answer)
    one, two = m1.body or {}, m2.body or {}
    _expect(two["fencing_token"] > one["fencing_token"], "tokens", m2)
    taken = client.join(group, "m1", str(uuid.uuid4()), 30, None)
    _expect(_code(taken) == (409, "member_exists"), "member_exists", taken)
    _expect(int(taken.headers["retry-after"]) >= 1, "member_exists", taken)

    step("members a page at a time, with their capabilities; one member alone")
    members: list[dict[str, Any]] = []
    after: str | None = None
    for _ in range(5):
        page = client.list_members(group, after, 1)
        body = page.body or {}
        _expect(page.status == 200 and len(body["members"]) <= 1, "members page", page)
        members += body["members"]
        if body["next"] is None:
            break
        after = body["next"]
    shown = [(m["member"], _given(m["capabilities"])) for m in members]
    expected = [("m1", {"json": {"port": 8080}}), ("m2", {"base64": member_bytes})]
    _expect(shown == expected, f"members {shown}", Answer(200, {}, None))
    alone = client.get_member(group, "m2")
    seen = ((alone.body or {}).get("member"), _given((alone.body or {}).get("capabilities")))
    _expect(seen == ("m2", {"base64": member_bytes}), "m2", alone)

    _group_changes(client, group, step, one, two)


def _group_changes(
    client: LockClient,
    group: str,
    step: Callable[[str], None],
    one: dict[str, Any],
    two: dict[str, Any],
) -> None:
    """The second half of run_groups, on the members it joined (`one` holds m1, `two` m2)."""
    step("watch: a group's long poll answers when a member leaves")
    version = (client.get_group(group).body or {})["version"]
    with ThreadPoolExecutor(1) as pool:
        watching = pool.submit(client.get_group, group, version, 30)
        time.sleep(0.25)  # the poll open first, usually: either order is answered the same
        left = client.leave(group, "m2", two["owner_token"], two["fencing_token"])
        _expect(left.status == 204, "leave", left)
        changed = watching.result(timeout=60)
    body = changed.body or {}
    _expect(changed.status == 200 and body["version"] > version, "group watch", changed)
    _expect(body["members"] == 1, "group watch members", changed)

    step("renew a membership, change its capabilities")
    renewed = client.renew_membership(group, "m1", one["owner_token"], one["fencing_token"], 60)
    _expect(
        _pick(renewed, "fencing_token", "ttl_seconds") == (one["fencing_token"], 60),
        "renew",
        renewed,
    )
    updated = client.update_capabilities(
        group, "m1", one["owner_token"], one["fencing_token"], {"json": {"port": 9090}}
    )
    _expect(updated.status == 200, "capabilities", updated)
    read = client.get_member(group, "m1")
    _expect(_given((read.body or {}).get("capabilities")) == {"json": {"port": 9090}}, "caps", read)

    step("renew memberships at once: one refused (it left); replayed by request id")
    fields = ("group", "member", "owner_token", "fencing_token")
    entries = [{**{f: m[f] for f in fields}, "ttl_seconds": 45} for m in (one, two)]
    request_id = str(uuid.uuid4()).upper()
    batch = client.renew_memberships(entries, request_id)
    results = (batch.body or {}).get("results", [])
    _expect(batch.status == 200 and len(results) == 2, "membership batch", batch)
    _expect(batch.variants == ("MembershipRenewed", "MembershipRefused"), "variants", batch)
    _expect(results[0]["membership"]["ttl_seconds"] == 45, "renewed", batch)
    _expect(
        (results[1]["status"], results[1]["error"]["code"]) == (409, "lease_not_held"),
        "refused",
        batch,
    )
    replay = client.renew_memberships(entries, request_id)
    _expect(replay.headers.get("idempotent-replayed") == "true", "batch replay", replay)
    _expect((replay.body, replay.variants) == (batch.body, batch.variants), "batch replay", replay)

    step("group_not_empty; a member removed without its token; deleted; group_not_found")
    not_empty = client.delete_group(group)
    _expect(_code(not_empty) == (409, "group_not_empty"), "not empty", not_empty)
    removal = client.remove_member(group, "m1")
    seen = _pick(removal, "removed", "fencing_token")
    _expect(seen == (True, one["fencing_token"]), "remove", removal)
    deleted = client.delete_group(group)
    _expect(deleted.status == 204, "delete group", deleted)
    gone = client.get_group(group)
    _expect(_code(gone) == (404, "group_not_found"), "deleted group", gone)

    _group_listing(client, group, step)


def _group_listing(client: LockClient, group: str, step: Callable[[str], None]) -> None:
    """Groups listed a page at a time (the end of run_groups)."""
    step("groups listed a page at a time, then deleted")
    prefix = f"{group}-list-"
    for suffix in "ba":
        made = client.create_group(f"{prefix}{suffix}")
        _expect(made.status == 201, "create", made)
    names: list[str] = []
    after = None
    for _ in range(5):
        page = client.list_groups(prefix, after, 1)
        body = page.body or {}
        _expect(page.status == 200, "groups page", page)
        names += [state["group"] for state in body["groups"]]
        if body["next"] is None:
            break
        after = body["next"]
    _expect(names == [f"{prefix}a", f"{prefix}b"], f"groups {names}", Answer(200, {}, None))
    for name in names:
        _expect(client.delete_group(name).status == 204, "delete", Answer(200, {}, None))


def _given(capabilities: dict[str, Any] | None) -> dict[str, Any] | None:
    """Capabilities as given: openapi-generator's to_dict() also shows the other form as null."""
    if capabilities is None:
        return None
    return {form: value for form, value in capabilities.items() if value is not None}


def _code(answer: Answer) -> tuple[int, str | None]:
    return answer.status, ((answer.body or {}).get("error") or {}).get("code")


def _holders(state: dict[str, Any]) -> list[tuple[int, str | None]]:
    """A LockState's holders as sorted (fencing token, label) pairs."""
    return sorted((holder["fencing_token"], holder["label"]) for holder in state["holders"])


def _pick(answer: Answer, *fields: str) -> tuple[Any, ...]:
    body = answer.body or {}
    return tuple(body.get(field) for field in fields)


def _expect(condition: bool, what: str, answer: Answer) -> None:
    if not condition:
        raise SystemExit(f"{what}: unexpected answer {answer}")


class DatamodelClient:
    """httpx with the pydantic models datamodel-code-generator wrote.

    Answers are compared as the models dump them (model_dump(mode="json")): with the generator's
    defaults, as interop.sh runs it, every scalar schema the spec names and reuses (LockKey,
    Uuid/OwnerToken, FencingToken, Version, TtlSeconds, Label) is a RootModel, so on a parsed
    LockState `state.version == 4` is False and `state.fencing_token + 1` raises TypeError (the
    value is `.root`). `--collapse-root-models` makes them plain int and str.
    """

    def __init__(self, base_url: str, anon_key: str, service_key: str) -> None:
        import httpx

        sys.path.insert(0, str(OUT))
        import volcano_models

        self.models = volcano_models
        credentials = {"apikey": anon_key, "Authorization": f"Bearer {service_key}"}
        self.http = httpx.Client(base_url=base_url, headers=credentials, timeout=30)

    def _send(
        self,
        method: str,
        path: str,
        model: Any,
        body: Any = None,
        *,
        request_id: str | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> Answer:
        # The models carry no operations: paths and query parameters are written here by hand.
        # By alias (capabilities' `json` is the field `json_`, BaseModel having a json()), and
        # only the fields set (Capabilities takes exactly one of its two).
        dump = {"mode": "json", "by_alias": True, "exclude_unset": True}
        response = self.http.request(
            method,
            path,
            params={name: value for name, value in (query or {}).items() if value is not None},
            json=None if body is None else body.model_dump(**dump),
            headers={"X-Request-Id": request_id} if request_id else {},
        )
        parsed, variants = None, ()
        if response.content:
            reader = model if response.is_success else self.models.Error
            decoded = reader.model_validate_json(response.content)
            parsed = decoded.model_dump(**dump)
            if isinstance(
                decoded, self.models.RenewLeasesResult | self.models.RenewMembershipsResult
            ):
                # Each result is a RootModel of the renewed | the refused.
                variants = tuple(type(result.root).__name__ for result in decoded.results)
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, headers, parsed, variants)

    def acquire(
        self,
        key: str,
        token: str,
        ttl: float,
        *,
        request_id: str | None = None,
        limit: int | None = None,
        label: str | None = None,
        wait_seconds: float | None = None,
        shared: bool | None = None,
    ) -> Answer:
        # AcquireRequest types limit, wait_seconds and shared `X | None` (they have defaults),
        # but null is no value the spec allows (the server answers 422): pass them only when
        # given.
        given = {"limit": limit, "wait_seconds": wait_seconds, "shared": shared}
        body = self.models.AcquireRequest(
            owner_token=token,
            ttl_seconds=ttl,
            label=label,
            **{name: value for name, value in given.items() if value is not None},
        )
        return self._send(
            "POST", f"/v1/locks/{key}/acquire", self.models.LockLease, body, request_id=request_id
        )

    def get(self, key: str) -> Answer:
        return self._send("GET", f"/v1/locks/{key}", self.models.LockState)

    def watch(self, key: str, after_version: int, wait_seconds: float) -> Answer:
        query = {"after_version": after_version, "wait_seconds": wait_seconds}
        return self._send("GET", f"/v1/locks/{key}", self.models.LockState, query=query)

    def check(self, key: str, fencing_token: int) -> Answer:
        return self._send("GET", f"/v1/locks/{key}/leases/{fencing_token}", self.models.LeaseCheck)

    def list(self, prefix: str, after: str | None, limit: int) -> Answer:
        query = {"prefix": prefix, "after": after, "limit": limit}
        return self._send("GET", "/v1/locks", self.models.LockList, query=query)

    def holders(self, key: str, after: int | None, limit: int) -> Answer:
        query = {"after": after, "limit": limit}
        return self._send("GET", f"/v1/locks/{key}/holders", self.models.HolderList, query=query)

    def renew(
        self, key: str, token: str, fencing_token: int, ttl: float, label: str | None = None
    ) -> Answer:
        body = self.models.RenewRequest(
            owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl, label=label
        )
        return self._send("POST", f"/v1/locks/{key}/renew", self.models.LockLease, body)

    def renew_many(self, leases: list[Renewal], request_id: str | None = None) -> Answer:
        body = self.models.RenewLeasesRequest(
            leases=[self.models.LeaseRenewal(**lease) for lease in leases]
        )
        return self._send(
            "POST", "/v1/leases/renew", self.models.RenewLeasesResult, body, request_id=request_id
        )

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        body = self.models.ReleaseRequest(owner_token=token, fencing_token=fencing_token)
        return self._send("POST", f"/v1/locks/{key}/release", None, body)

    def force_release(self, key: str) -> Answer:
        return self._send("DELETE", f"/v1/locks/{key}", self.models.ForceReleaseResult)

    def parse_lease(self, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self.models.LockLease.model_validate_json(text).model_dump(
            mode="json"
        )
        return result

    def _capabilities(self, capabilities: Capabilities) -> Any:
        return None if capabilities is None else self.models.Capabilities(**capabilities)

    def create_group(self, group: str) -> Answer:
        return self._send("PUT", f"/v1/groups/{group}", self.models.GroupState)

    def get_group(
        self, group: str, after_version: int | None = None, wait_seconds: float | None = None
    ) -> Answer:
        query = {"after_version": after_version, "wait_seconds": wait_seconds}
        return self._send("GET", f"/v1/groups/{group}", self.models.GroupState, query=query)

    def list_groups(self, prefix: str, after: str | None, limit: int) -> Answer:
        query = {"prefix": prefix, "after": after, "limit": limit}
        return self._send("GET", "/v1/groups", self.models.GroupList, query=query)

    def delete_group(self, group: str) -> Answer:
        return self._send("DELETE", f"/v1/groups/{group}", None)

    def join(
        self, group: str, member: str, token: str, ttl: float, capabilities: Capabilities
    ) -> Answer:
        fields: dict[str, Any] = {"owner_token": token, "ttl_seconds": ttl}
        if capabilities is not None:
            fields["capabilities"] = self._capabilities(capabilities)
        body = self.models.JoinRequest(**fields)
        path = f"/v1/groups/{group}/members/{member}/join"
        return self._send("POST", path, self.models.Membership, body)

    def renew_membership(
        self, group: str, member: str, token: str, fencing_token: int, ttl: float
    ) -> Answer:
        body = self.models.RenewMembershipRequest(
            owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl
        )
        path = f"/v1/groups/{group}/members/{member}/renew"
        return self._send("POST", path, self.models.Membership, body)

    def update_capabilities(
        self, group: str, member: str, token: str, fencing_token: int, capabilities: Capabilities
    ) -> Answer:
        body = self.models.CapabilitiesRequest(
            owner_token=token,
            fencing_token=fencing_token,
            capabilities=self._capabilities(capabilities),
        )
        path = f"/v1/groups/{group}/members/{member}/capabilities"
        return self._send("POST", path, self.models.Membership, body)

    def leave(self, group: str, member: str, token: str, fencing_token: int) -> Answer:
        body = self.models.LeaveRequest(owner_token=token, fencing_token=fencing_token)
        return self._send("POST", f"/v1/groups/{group}/members/{member}/leave", None, body)

    def get_member(self, group: str, member: str) -> Answer:
        path = f"/v1/groups/{group}/members/{member}"
        return self._send("GET", path, self.models.GroupMember)

    def list_members(self, group: str, after: str | None, limit: int) -> Answer:
        query = {"after": after, "limit": limit}
        path = f"/v1/groups/{group}/members"
        return self._send("GET", path, self.models.MemberList, query=query)

    def remove_member(self, group: str, member: str) -> Answer:
        path = f"/v1/groups/{group}/members/{member}"
        return self._send("DELETE", path, self.models.MemberRemoval)

    def renew_memberships(
        self, memberships: list[Renewal], request_id: str | None = None
    ) -> Answer:
        body = self.models.RenewMembershipsRequest(
            memberships=[self.models.MembershipRenewal(**entry) for entry in memberships]
        )
        return self._send(
            "POST",
            "/v1/members/renew",
            self.models.RenewMembershipsResult,
            body,
            request_id=request_id,
        )


class OpenApiGeneratorClient:
    """The Python client openapi-generator wrote, configured with its own auth settings."""

    def __init__(self, base_url: str, anon_key: str, service_key: str) -> None:
        sys.path.insert(0, str(OUT / "og"))
        import volcano_og

        self.og = volcano_og
        config = volcano_og.Configuration(
            host=base_url, api_key={"anonKey": anon_key}, access_token=service_key
        )
        api = volcano_og.ApiClient(config)
        self.locks = volcano_og.LocksApi(api)
        self.groups = volcano_og.GroupsApi(api)

    def _call(self, operation: Callable[..., Any], **arguments: Any) -> Answer:
        try:
            response = operation(**arguments)
        except self.og.ApiException as exc:
            body = exc.data.to_dict() if exc.data is not None else None
            return Answer(exc.status, _lower(exc.headers or {}), body)
        data, variants = response.data, ()
        if isinstance(data, self.og.RenewLeasesResult | self.og.RenewMembershipsResult):
            # Each result is a wrapper holding the oneOf it matched.
            variants = tuple(type(result.actual_instance).__name__ for result in data.results)
        body = data.to_dict() if data is not None else None
        return Answer(response.status_code, _lower(response.headers or {}), body, variants)

    def acquire(
        self,
        key: str,
        token: str,
        ttl: float,
        *,
        request_id: str | None = None,
        limit: int | None = None,
        label: str | None = None,
        wait_seconds: float | None = None,
        shared: bool | None = None,
    ) -> Answer:
        given = {"limit": limit, "wait_seconds": wait_seconds, "shared": shared}
        body = self.og.AcquireRequest(
            owner_token=token,
            ttl_seconds=ttl,
            label=label,
            **{name: value for name, value in given.items() if value is not None},
        )
        return self._call(
            self.locks.acquire_lock_with_http_info,
            key=key,
            acquire_request=body,
            x_request_id=request_id,
        )

    def get(self, key: str) -> Answer:
        return self._call(self.locks.get_lock_with_http_info, key=key)

    def watch(self, key: str, after_version: int, wait_seconds: float) -> Answer:
        return self._call(
            self.locks.get_lock_with_http_info,
            key=key,
            after_version=after_version,
            wait_seconds=wait_seconds,
        )

    def check(self, key: str, fencing_token: int) -> Answer:
        return self._call(
            self.locks.check_lease_with_http_info, key=key, fencing_token=fencing_token
        )

    def list(self, prefix: str, after: str | None, limit: int) -> Answer:
        return self._call(
            self.locks.list_locks_with_http_info, prefix=prefix, after=after, limit=limit
        )

    def holders(self, key: str, after: int | None, limit: int) -> Answer:
        return self._call(self.locks.list_holders_with_http_info, key=key, after=after, limit=limit)

    def renew(
        self, key: str, token: str, fencing_token: int, ttl: float, label: str | None = None
    ) -> Answer:
        body = self.og.RenewRequest(
            owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl, label=label
        )
        return self._call(self.locks.renew_lock_with_http_info, key=key, renew_request=body)

    def renew_many(self, leases: list[Renewal], request_id: str | None = None) -> Answer:
        body = self.og.RenewLeasesRequest(
            leases=[self.og.LeaseRenewal(**lease) for lease in leases]
        )
        return self._call(
            self.locks.renew_leases_with_http_info,
            renew_leases_request=body,
            x_request_id=request_id,
        )

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        body = self.og.ReleaseRequest(owner_token=token, fencing_token=fencing_token)
        return self._call(self.locks.release_lock_with_http_info, key=key, release_request=body)

    def force_release(self, key: str) -> Answer:
        return self._call(self.locks.force_release_lock_with_http_info, key=key)

    def parse_lease(self, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self.og.LockLease.from_json(text).to_dict()
        return result

    def _capabilities(self, capabilities: Capabilities) -> Any:
        # By field name, so that only the one given is set: from_dict sets both, and to_dict
        # then sends the nullable `json` as null beside `base64`.
        if capabilities is None:
            return None
        if "base64" in capabilities:
            return self.og.Capabilities(var_base64=capabilities["base64"])
        return self.og.Capabilities(var_json=capabilities["json"])

    def create_group(self, group: str) -> Answer:
        return self._call(self.groups.create_group_with_http_info, group=group)

    def get_group(
        self, group: str, after_version: int | None = None, wait_seconds: float | None = None
    ) -> Answer:
        return self._call(
            self.groups.get_group_with_http_info,
            group=group,
            after_version=after_version,
            wait_seconds=wait_seconds,
        )

    def list_groups(self, prefix: str, after: str | None, limit: int) -> Answer:
        return self._call(
            self.groups.list_groups_with_http_info, prefix=prefix, after=after, limit=limit
        )

    def delete_group(self, group: str) -> Answer:
        return self._call(self.groups.delete_group_with_http_info, group=group)

    def join(
        self, group: str, member: str, token: str, ttl: float, capabilities: Capabilities
    ) -> Answer:
        fields: dict[str, Any] = {"owner_token": token, "ttl_seconds": ttl}
        if capabilities is not None:
            fields["capabilities"] = self._capabilities(capabilities)
        return self._call(
            self.groups.join_group_with_http_info,
            group=group,
            member=member,
            join_request=self.og.JoinRequest(**fields),
        )

    def renew_membership(
        self, group: str, member: str, token: str, fencing_token: int, ttl: float
    ) -> Answer:
        body = self.og.RenewMembershipRequest(
            owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl
        )
        return self._call(
            self.groups.renew_membership_with_http_info,
            group=group,
            member=member,
            renew_membership_request=body,
        )

    def update_capabilities(
        self, group: str, member: str, token: str, fencing_token: int, capabilities: Capabilities
    ) -> Answer:
        body = self.og.CapabilitiesRequest(
            owner_token=token,
            fencing_token=fencing_token,
            capabilities=self._capabilities(capabilities),
        )
        return self._call(
            self.groups.update_capabilities_with_http_info,
            group=group,
            member=member,
            capabilities_request=body,
        )

    def leave(self, group: str, member: str, token: str, fencing_token: int) -> Answer:
        body = self.og.LeaveRequest(owner_token=token, fencing_token=fencing_token)
        return self._call(
            self.groups.leave_group_with_http_info, group=group, member=member, leave_request=body
        )

    def get_member(self, group: str, member: str) -> Answer:
        return self._call(self.groups.get_member_with_http_info, group=group, member=member)

    def list_members(self, group: str, after: str | None, limit: int) -> Answer:
        return self._call(
            self.groups.list_members_with_http_info, group=group, after=after, limit=limit
        )

    def remove_member(self, group: str, member: str) -> Answer:
        return self._call(self.groups.remove_member_with_http_info, group=group, member=member)

    def renew_memberships(
        self, memberships: list[Renewal], request_id: str | None = None
    ) -> Answer:
        body = self.og.RenewMembershipsRequest(
            memberships=[self.og.MembershipRenewal(**entry) for entry in memberships]
        )
        return self._call(
            self.groups.renew_memberships_with_http_info,
            renew_memberships_request=body,
            x_request_id=request_id,
        )


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


CLIENTS = {"datamodel": DatamodelClient, "openapi-generator": OpenApiGeneratorClient}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in CLIENTS:
        sys.exit(__doc__)
    name, url = sys.argv[1:]
    keys = (os.environ["VOLCANO_ANON_KEY"], os.environ["VOLCANO_SERVICE_KEY"])
    run(CLIENTS[name](url, *keys), name)
