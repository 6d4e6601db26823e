"""The lease promise, judged after every step of a schedule from what clients heard and what the
database holds.

- **At most one holder**: no client is told it holds a lease of a key while another client still
  holds one of it by its own reckoning (until `first send + ttl` of the latest request that gave
  or renewed it, as the SDK reckons; a client has one request out at a time), unless that one
  sent a release first or a force release ran meanwhile (an administrator's act, which the
  protected resource's fencing covers). At most `limit` exclusive holders, that is, and any
  number of shared ones:
- **Never an exclusive holder beside a shared one**, by the clients' reckoning when one is told
  of a lease, and in the database after every step; and no shared lease on a semaphore.
- **Every 200 is true when heard**: a lease in an answer, fresh or replayed, is the key's live
  lease (same owner and fencing token) by the server's clock at the moment the client hears it.
- **No lease is dated early**: `first send + ttl <= expires_at` for every lease in an answer.
- **Fencing tokens never repeat and never go back**: a token names one owner only, and the key's
  last token never decreases.
- **A stale fencing token touches nothing**: renew or release with a token older than one the
  same owner has since been granted is refused (409); so is such an entry of a batch renewal.
- **Waiters in arrival order**: when a transaction gives a key to a new holder, no waiter still
  waiting in line ahead of it (or, for a newcomer, in line at all) was passed over while its
  request was open and its server alive: an exclusive waiter is never overtaken by a shared
  request that came after it, and a shared one never by the run it belongs to (those are
  granted together, by one transaction).
- **Nobody holds what nobody heard of** (at the end, once all work is done): every live lease
  belongs to an owner that was told of it, or that still has a request open for the key.
- **A key's version never goes back**, and no watch is told of a version the key has not
  reached; the versions one watcher hears never go back either.
- **A version names one state**: whenever the key is at the version a watcher last heard, its
  holders (fencing tokens and labels) are the ones the watcher heard of.
- **A watcher ends on the server's state** (at the end, once nothing changes any more): the
  last state it heard has the key's version, holders and labels, and the watch it has open
  waits from that version.
- **A watch answers when the key's version passes the one it names**: never with that very
  version before its wait ran out, and never with a lower one when the key had reached the
  one it names before it asked (whatever version a watch names: the last heard, an older
  one, none).
- **No state names a lease after it ended**: a watch's state at a version the key reached
  only once a lease had ended never names that lease.
- **One leader at a time** (an election: a limit-1 key whose candidates wait in line with
  their member names as labels, resign by releasing, proclaim a new label by renewing, and
  whose observers chain watches): no state names two leaders; a state that is the key's
  current one when heard names the candidate that leads by its own reckoning, if one does,
  and no other; the terms one observer hears never go back as its versions move on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from tests.explorer._world import Pending, Request, World, micros

__all__ = ["Checks", "Reader", "Violation"]


class Violation(AssertionError):
    """The lease promise broke; each property has its own subclass, so that the explorer
    reports (and shrinks) each kind of failure on its own."""


class TwoHolders(Violation):
    """Two clients told they hold the key at once."""


class UntrueAnswer(Violation):
    """A 200 describing a lease that is not the key's live one when heard."""


class DatedEarly(Violation):
    """A lease whose expiry is before its request's first send + ttl."""


class ExclusiveNotAlone(Violation):
    """An exclusive holder beside a shared one, or a shared lease on a semaphore."""


class TokenReissued(Violation):
    """A fencing token granted to two owners."""


class TokenWentBack(Violation):
    """A key's last fencing token decreased."""


class StaleTokenAccepted(Violation):
    """A renew or release with a superseded fencing token was not refused."""


class PassedOver(Violation):
    """A waiter in line was passed over while its request was open."""


class LeaseNobodyHeard(Violation):
    """A lease handed to a waiter that left was never taken back."""


class VersionWentBack(Violation):
    """A key's version decreased, or a watch heard of one it had not reached."""


class VersionStale(Violation):
    """The key's holders changed, and its version did not."""


class WatcherBehind(Violation):
    """A watcher's last state is not the key's, once nothing changes any more."""


class VersionNotPassed(Violation):
    """A watch answered with the very version it named before its wait ran out."""


class TermAfterItEnded(Violation):
    """A watch's state names a lease at a version the key reached only after that lease ended
    (for an election: a leader's term told after it ended)."""


class TwoLeaders(Violation):
    """An election's state names two leaders, or a leader other than the candidate that
    leads by its own reckoning, or none while one does."""


class TermWentBack(Violation):
    """An observer heard a lower leader's term at a version no older than a higher one's."""


LeaseRow = tuple[int, str, int]
"""(fencing token, owner token, expires_at_us) of one stored lease."""


class Reader:
    """Reads of the database outside every server (committed state only)."""

    def key(self, key: str) -> tuple[int, int] | None:
        """(last fencing token, limit) of the key's row, or None for a key never acquired."""
        raise NotImplementedError

    def leases(self, key: str) -> list[LeaseRow]:
        """The key's stored leases (live or not), by fencing token."""
        raise NotImplementedError

    def waiters(self, key: str) -> list[tuple[int, str, str, str]]:
        """(seq, owner, state, server id) of each waiter row of the key, by seq."""
        raise NotImplementedError

    def alive_servers(self, now_us: int) -> set[str]:
        """Ids of servers whose heartbeat runs past `now_us`."""
        raise NotImplementedError

    def saved_version(self, key: str) -> int:
        """The version saved in the key's row (0 for a key never acquired)."""
        raise NotImplementedError

    def labels(self, key: str) -> dict[int, str | None]:
        """The label of each stored lease of the key, by fencing token."""
        raise NotImplementedError

    def modes(self, key: str) -> dict[int, bool]:
        """Whether each stored lease of the key is shared, by fencing token."""
        raise NotImplementedError

    def version(self, key: str, now_us: int) -> int:
        """The key's version at `now_us`: as saved, plus each stored lease expired by then."""
        expired = sum(until <= now_us for _token, _owner, until in self.leases(key))
        return self.saved_version(key) + expired


@attrs.define
class _Belief:
    owner: str
    client: str
    key: str
    token: int
    until_us: int
    shared: bool = False
    ended_us: int | None = None  # a release sent, a renewal refused
    deposed_us: int | None = None  # force-released: the holder is to be fenced off

    def holds_at(self, at_us: int) -> bool:
        ends = [t for t in (self.ended_us, self.deposed_us) if t is not None]
        return self.until_us > at_us and all(t > at_us for t in ends)


class Checks:
    """Watches a world's answers and its database; `violations` lists what broke."""

    def __init__(
        self, world: World, reader: Reader, keys: Iterable[str], *, elections: Iterable[str] = ()
    ) -> None:
        self.world = world
        self.reader = reader
        self.keys = tuple(keys)
        self.elections = frozenset(elections)  # keys used as elections: limit 1, one leader
        self.violations: list[tuple[type[Violation], str]] = []
        self._owner_of: dict[tuple[str, int], str] = {}
        self._highest: dict[str, int] = {}
        self._beliefs: list[_Belief] = []
        self._granted: dict[tuple[str, str], int] = {}  # (owner, key) -> latest token told
        self._line: dict[str, list[tuple[int, str, str, str]]] = {}
        self._seen: dict[str, int] = {}  # key -> highest token seen held after a transaction
        self._queued: set[tuple[str, str]] = set()  # (key, owner) seen in line since it last sent
        self._versions: dict[str, int] = {}  # key -> highest version seen in the database
        self.watched: dict[str, dict[str, Any]] = {}  # watch client -> the last state it heard
        self._own_grants: set[tuple[str, int]] = set()  # (key, token) an acquire's own tx granted
        self._alive: dict[str, set[int]] = {}  # key -> tokens live at the last look
        self._ended: dict[tuple[str, int], int] = {}  # (key, token) -> a version after its end
        self._reached: dict[int, int] = {}  # watch request id -> the key's version when sent
        self._named: set[str] = set()  # keys some request named so far
        self._terms: dict[tuple[str, str], tuple[int, int]] = {}  # (client, key) -> (version, term)
        world.answer_hooks.append(self._heard)
        world.send_hooks.append(self._sent)
        world.commit_hooks.append(self._committed)

    def problem(self, kind: type[Violation], text: str) -> None:
        """Record a violation of `kind` (with the virtual time)."""
        self.violations.append((kind, f"t={self.world.loop.time():.3f}s: {text}"))

    # -- what clients send and hear ---------------------------------------------------------

    def _in_use(self) -> list[str]:
        """The keys some request named: the others have not changed (nor been read)."""
        return [key for key in self.keys if key in self._named]

    def _sent(self, request: Request) -> None:
        body = request.body or {}
        self._named.add(request.key)
        self._named.update(entry["key"] for entry in body.get("leases", ()))
        if request.op == "watch":
            now = self.world.now_us()
            self._look(request.key, now)
            self._reached[request.id] = self._versions.get(request.key, 0)
        if request.op == "acquire":
            self._queued.discard((request.key, body["owner_token"]))
        if request.op in ("acquire", "renew"):
            self._may_shorten(request, body, request.key)
        if request.op == "renew_many":
            for entry in body["leases"]:
                self._may_shorten(request, entry, entry["key"])
        if request.op == "release" and "fencing_token" in body:
            for belief in self._beliefs_of(body["owner_token"], request.key, body["fencing_token"]):
                belief.ended_us = request.sent_us if belief.ended_us is None else belief.ended_us
        # A retry is the same request again, judged when it was first sent.
        if request.op in ("renew", "release") and "fencing_token" in body and not request.retry:
            request.stale = self._stale(body["owner_token"], request.key, body["fencing_token"])
        if request.op == "renew_many" and not request.retry:
            request.stale_entries = tuple(
                index
                for index, entry in enumerate(body["leases"])
                if self._stale(entry["owner_token"], entry["key"], entry["fencing_token"])
            )

    def _may_shorten(self, request: Request, body: dict[str, Any], key: str) -> None:
        """A request that may set its owner's lease to `first send + ttl` (an acquire by the
        holder, a renewal) is the latest that gave or renewed it, answered or not: its owner
        counts on no more than that (the explorer found a client told 409 while it still
        counted on an answer older than its own unanswered, shorter acquire)."""
        if "ttl_seconds" not in body:
            return
        until = request.first_sent_us + round(body["ttl_seconds"] * 1_000_000)
        token = body.get("fencing_token")
        for belief in self._beliefs:
            if (belief.owner, belief.key) == (body["owner_token"], key) and token in (
                None,
                belief.token,
            ):
                belief.until_us = min(belief.until_us, until)

    def _stale(self, owner: str, key: str, token: int) -> bool:
        latest = self._granted.get((owner, key))
        return latest is not None and token < latest

    def _heard(self, request: Request) -> None:
        if request.status == 200 and request.op == "watch":
            self._watch_heard(request, request.payload)
        if request.status == 200 and request.op in ("acquire", "renew"):
            self._lease(request, request.payload)
        elif request.op == "renew" and request.status == 409 and request.body is not None:
            self._refused(request, request.body, request.key)
        elif request.op == "renew_many" and request.status == 200 and request.body is not None:
            self._heard_batch(request, request.body["leases"], request.payload["results"])
        if getattr(request, "stale", False) and request.status not in (409, None, 503):
            self.problem(
                StaleTokenAccepted,
                f"{request.describe()} carried a stale fencing token yet got {request.status}",
            )

    def _refused(self, request: Request, entry: dict[str, Any], key: str) -> None:
        """A renewal refused: its owner no longer believes it holds that lease."""
        for belief in self._beliefs_of(entry["owner_token"], key, entry["fencing_token"]):
            belief.ended_us = belief.ended_us or request.answered_us

    def _heard_batch(
        self, request: Request, entries: list[dict[str, Any]], results: list[dict[str, Any]]
    ) -> None:
        """Each result of a batch, as the answer of a single renew sent with it."""
        for index, (entry, result) in enumerate(zip(entries, results, strict=True)):
            if "lease" in result:
                self._lease(request, result["lease"])
            else:
                self._refused(request, entry, entry["key"])
            if index in request.stale_entries and "lease" in result:
                self.problem(
                    StaleTokenAccepted,
                    f"{request.describe()} entry {index} carried a stale fencing token yet was"
                    " renewed",
                )

    def _committed(self, pending: Pending) -> None:
        """After each transaction: a force release that ran deposes every holder of the key
        (heard of or not); and the key's line is judged (`_changed_hands`)."""
        request = pending.request
        now = self.world.now_us()
        if request is not None and request.op == "force_release":
            for belief in self._beliefs:
                if belief.key == request.key and belief.deposed_us is None and belief.holds_at(now):
                    belief.deposed_us = now
        alive = self.reader.alive_servers(now)
        for key in self._in_use():
            line = self.reader.waiters(key)
            seen = self._seen.get(key, 0)
            for token, owner, _until in self._live(key, now):
                if token > seen:  # granted by this transaction
                    if _asked_by(request, key, owner):
                        self._own_grants.add((key, token))
                    holders = {o for _t, o, _u in self._live(key, now)}
                    before = self._line.get(key, [])
                    self._passed_over(key, token, owner, before, line, alive, holders)
                    self._seen[key] = max(token, self._seen.get(key, 0))
            self._line[key] = line
            self._queued.update((key, owner) for _q, owner, state, _s in line if state != "away")

    def _lease(self, request: Request, lease: dict[str, Any]) -> None:
        key, token, owner = lease["key"], lease["fencing_token"], lease["owner_token"]
        now = request.answered_us
        assert now is not None
        expires = micros(lease["expires_at"])
        ttl_us = round(lease["ttl_seconds"] * 1_000_000)
        told = f"{request.describe()} was told it holds token {token}"
        live = self._live(key, now)
        if not any((t, o) == (token, owner) for t, o, _until in live):
            self.problem(UntrueAnswer, f"{told}, but the live leases are {live} at {now}")
        if expires < request.first_sent_us + ttl_us:
            early = (request.first_sent_us + ttl_us - expires) / 1000
            self.problem(
                DatedEarly, f"{told} until {expires}, {early:.3f} ms before its first send + ttl"
            )
        first = self._owner_of.setdefault((key, token), owner)
        if first != owner:
            self.problem(TokenReissued, f"{told}, a token already granted to another owner")
        self._granted[owner, key] = max(token, self._granted.get((owner, key), 0))
        others = [b for b in self._beliefs if b.key == key and b.token != token and b.holds_at(now)]
        stored = self.reader.key(key)
        limit = stored[1] if stored is not None else 1
        shared = self.reader.modes(key).get(token, bool((request.body or {}).get("shared")))
        holding = ", ".join(
            f"{b.client} token {b.token} ({'shared' if b.shared else 'exclusive'}) until"
            f" {b.until_us}"
            for b in others
        )
        if any(b.shared != shared for b in others):  # exclusive beside shared, either way
            mode = "shared" if shared else "exclusive"
            self.problem(
                ExclusiveNotAlone,
                f"{told} ({mode}) while {holding} still hold it by their own reckoning",
            )
        elif not shared and len(others) + 1 > limit:
            self.problem(
                TwoHolders,
                f"{told} while {holding} still hold it by their own reckoning (limit {limit})",
            )
        # A client has one request out at a time, so its latest answer is the server's latest
        # word on its lease: a shorter ttl shortens it (renew, or acquire by the holder).
        deadline = request.first_sent_us + ttl_us
        mine = self._beliefs_of(owner, key, token)
        if mine and mine[-1].ended_us is None and mine[-1].deposed_us is None:
            mine[-1].until_us = deadline
        else:
            self._beliefs.append(_Belief(owner, request.client, key, token, deadline, shared))

    def _watch_heard(self, request: Request, state: dict[str, Any]) -> None:
        now = request.answered_us
        assert now is not None
        key = request.key
        self._look(key, now)
        version = state["version"]
        actual = self.reader.version(key, now)
        if version > actual:
            self.problem(
                VersionWentBack,
                f"{request.describe()} heard version {version}; the key is at {actual}",
            )
        body = request.body or {}
        after = body.get("after_version", 0)
        last = self.watched.get(request.client)
        if last is not None and after == last["version"] and version < after:
            self.problem(
                VersionWentBack,
                f"{request.describe()} heard version {version} after {last['version']}",
            )
        elif after <= self._reached.get(request.id, 0) and version < after:
            self.problem(
                VersionWentBack,
                f"{request.describe()} heard version {version}, below the version {after} it"
                " named, which the key had reached before it asked",
            )
        wait_us = round(body.get("wait_seconds", 0) * 1_000_000)
        if version == after and now < request.sent_us + wait_us:
            early = (request.sent_us + wait_us - now) / 1_000_000
            self.problem(
                VersionNotPassed,
                f"{request.describe()} was answered version {version}, the one it named,"
                f" {early:g}s before its wait ran out",
            )
        for holder in state["holders"]:
            ended = self._ended.get((key, holder["fencing_token"]))
            if ended is not None and version >= ended:
                self.problem(
                    TermAfterItEnded,
                    f"{request.describe()} heard version {version} naming token"
                    f" {holder['fencing_token']}, whose lease had ended by version {ended}",
                )
        if key in self.elections:
            self._leaders_heard(request, state, actual)
        self.watched[request.client] = state

    def _leaders_heard(self, request: Request, state: dict[str, Any], actual: int) -> None:
        """An election's state: one leader at most, the one that leads by its own reckoning
        when the state is the key's current one, and terms that never go back."""
        now = request.answered_us
        assert now is not None
        key, version = request.key, state["version"]
        terms = [holder["fencing_token"] for holder in state["holders"]]
        told = f"{request.describe()} heard version {version}"
        if len(terms) > 1:
            self.problem(TwoLeaders, f"{told} naming leaders {terms}")
        leading = sorted(
            {(b.token, b.client) for b in self._beliefs if b.key == key and b.holds_at(now)}
        )
        # A candidate granted the key may not have heard yet: only one that leads by its
        # own reckoning binds the current state to name it.
        if version == actual and len(leading) == 1 and terms[:1] != [leading[0][0]]:
            token, client = leading[0]
            self.problem(
                TwoLeaders,
                f"{told} naming leaders {terms}, the key's current state, while {client} leads"
                f" in term {token} by its own reckoning",
            )
        if terms:
            term = max(terms)
            seen = self._terms.get((request.client, key))
            if seen is not None and version >= seen[0] and term < seen[1]:
                self.problem(
                    TermWentBack,
                    f"{told} naming term {term}, after term {seen[1]} at version {seen[0]}",
                )
            if seen is None or term > seen[1]:
                self._terms[request.client, key] = (version, term)

    def _look(self, key: str, now: int) -> None:
        """Note the version at which each lease of `key` seen live is seen ended."""
        live = {token for token, _o, _u in self._live(key, now)}
        version = self.reader.version(key, now)
        for token in self._alive.get(key, set()) - live:
            self._ended.setdefault((key, token), version)
        self._alive[key] = live
        self._versions[key] = max(version, self._versions.get(key, 0))

    def _holders(self, key: str, now: int) -> list[tuple[int, str | None]]:
        """The key's live leases in the database: (fencing token, label), by token."""
        labels = self.reader.labels(key)
        return sorted((token, labels.get(token)) for token, _o, _u in self._live(key, now))

    def _same_version_same_holders(self, key: str, version: int, now: int) -> None:
        for client, state in self.watched.items():
            if state["key"] != key:
                continue
            heard = sorted((h["fencing_token"], h["label"]) for h in state["holders"])
            if state["version"] == version and heard != self._holders(key, now):
                self.problem(
                    VersionStale,
                    f"{client} heard version {version} with holders {heard}; the key is still"
                    f" at version {version} with holders {self._holders(key, now)}",
                )

    def watcher_agrees(self, client: str, key: str) -> None:
        """Once nothing changes any more: `client`'s last state is the key's, and its open
        watch (if any) waits from that version."""
        now = self.world.now_us()
        version = self.reader.version(key, now)
        holders = self._holders(key, now)
        last = self.watched.get(client)
        heard = (
            (0, [])
            if last is None
            else (
                last["version"],
                sorted((h["fencing_token"], h["label"]) for h in last["holders"]),
            )
        )
        if heard != (version, holders):
            self.problem(
                WatcherBehind,
                f"{client} last heard version {heard[0]} holders {heard[1]}; the key is at"
                f" version {version} holders {holders}",
            )
        open_ = [r for r in self.world.requests if r.client == client and r.in_flight]
        for request in open_:
            after = (request.body or {}).get("after_version")
            if after != version:
                self.problem(
                    WatcherBehind,
                    f"{request.describe()} still waits from version {after}; the key is at"
                    f" {version}",
                )

    def _beliefs_of(self, owner: str, key: str, token: int) -> list[_Belief]:
        return [b for b in self._beliefs if (b.owner, b.key, b.token) == (owner, key, token)]

    # -- the database, after each step ------------------------------------------------------

    def _live(self, key: str, now: int) -> list[LeaseRow]:
        return [lease for lease in self.reader.leases(key) if lease[2] > now]

    def after_step(self) -> None:
        """Judge the database as it stands after a step."""
        now = self.world.now_us()
        for key in self._in_use():
            version = self.reader.version(key, now)
            if version < self._versions.get(key, 0):
                self.problem(VersionWentBack, f"{key}'s version went back to {version}")
            self._look(key, now)
            self._same_version_same_holders(key, version, now)
            stored = self.reader.key(key)
            if stored is not None:
                if stored[0] < self._highest.get(key, 0):
                    self.problem(
                        TokenWentBack, f"{key}'s last fencing token went back to {stored[0]}"
                    )
                self._highest[key] = max(stored[0], self._highest.get(key, 0))
                live = self._live(key, now)
                modes = self.reader.modes(key)
                shared = [token for token, _o, _u in live if modes.get(token)]
                if shared and (len(shared) < len(live) or stored[1] != 1):
                    self.problem(
                        ExclusiveNotAlone,
                        f"{key} has live leases {[t for t, _o, _u in live]}, shared {shared},"
                        f" limit {stored[1]}",
                    )
                elif not shared and len(live) > stored[1]:
                    self.problem(
                        TwoHolders, f"{key} has {len(live)} live leases, limit {stored[1]}"
                    )

    def _passed_over(
        self,
        key: str,
        token: int,
        new_owner: str,
        before: list[tuple[int, str, str, str]],
        after: list[tuple[int, str, str, str]],
        alive: set[str],
        holders: set[str],
    ) -> None:
        """A `reserved` row counts as in line too once its reservation has lapsed (its owner
        holds no live lease): it must be served again, first, not passed over."""
        theirs = next((seq for seq, owner, _s, _srv in before if owner == new_owner), None)
        in_line = ("waiting", "reserved")
        still_waiting = {
            owner for _seq, owner, state, _srv in after if state in in_line and owner not in holders
        }
        for seq, owner, state, server_id in before:
            if theirs is not None and seq >= theirs:
                break
            if (
                state in in_line
                and owner in still_waiting
                and server_id in alive
                and self._open_wait(owner, key)
            ):
                taker = "a waiter behind it" if theirs is not None else "a newcomer (barging)"
                self.problem(
                    PassedOver, f"token {token} went to {taker} while {owner[:8]} waited in line"
                )

    def _open_wait(self, owner: str, key: str) -> bool:
        return any(
            r.in_flight
            and r.op == "acquire"
            and r.key == key
            and (r.body or {}).get("owner_token") == owner
            and (r.body or {}).get("wait_seconds")
            for r in self.world.requests
        )

    def at_the_end(self) -> None:
        """Once all work is done: no live lease that its owner never heard of."""
        now = self.world.now_us()
        for key in self._in_use():
            for token, owner, _until in self._live(key, now):
                self._nobody_heard(key, token, owner)

    def _nobody_heard(self, key: str, token: int, owner: str) -> None:
        reserved = any(
            o == owner and st == "reserved" for _q, o, st, _s in self.reader.waiters(key)
        )
        if not reserved:  # a slot set aside for a waiter of another server lapses on its own
            told = (key, token) in self._owner_of
            asking = any(
                r.in_flight and r.key == key and (r.body or {}).get("owner_token") == owner
                for r in self.world.requests
            )
            # A lease granted by an acquire's own transaction may have lost its answer on the
            # way (a retry with the request id recovers it); one handed to a waiter in line
            # whose request left must have been taken back.
            own = (key, token) in self._own_grants
            if (key, owner) in self._queued and not (told or asking or own):
                self.problem(
                    LeaseNobodyHeard,
                    f"{key} is held under token {token} by a waiter that left, never told of it",
                )


def _asked_by(request: Request | None, key: str, owner: str) -> bool:
    """Whether `request` is an acquire of `key` by `owner`: its own transaction granted it."""
    return (
        request is not None
        and request.op == "acquire"
        and request.key == key
        and (request.body or {}).get("owner_token") == owner
    )
