"""The schedule explorer: Hypothesis chooses what happens next, the lease promise is judged after
every step, and a failure shrinks to a short schedule.

Two servers share one database (SQLite; PostgreSQL with the `postgres` marker); three clients
acquire (waiting or not, with or without a request id, with or without a label; as a lock, a
semaphore of 2 or 3 slots, or shared, so that shared and exclusive requests mix), renew (one
lease, some with a new label, or in a batch with an older token beside it), release (with their
latest or an older fencing token), force-release and read one key, retry requests with the same
request id, and close connections at any point of a request's life; a fourth client watches the
key, each long poll from the last version it heard, and must end on the server's state once
nothing changes any more; a viewer watches it naming a version of its own choosing (none, an
older one, the key's, one not reached). The same three clients campaign in an election (the
lock `groups:g`, as the spec makes a group's leader: waiting in line with their names as
labels), proclaim a new label by renewing their term and resign by releasing it, while an
observer follows its leaders with chained watches and must end on its state too. The schedule
also decides when each piece of storage work runs (or
fails before committing, or commits and loses its answer), when a PostgreSQL transaction stopped
at a clock read goes on, when time moves, and when a server is killed or restarted. `_checks`
says what must hold.

Beside these single steps, some rules play a short scenario aimed where broken rules hide (each
kept as a patch in `tests/explorer/mutations`, which must all be caught with CI's budget): probes
that renew or release with an owner token and a fencing token never granted together (another's
token, one never issued, a stranger's owner token; `_probes`), a replay after the lease its answer
told of ended (released, force-released, expired), and a release stalled at its clock read while a
waiter joins on the same server past its lane's 1 s patience, then answered after that waiter
(`test_found.py`'s stalled release, from wherever the schedule stands). Acquires may run at once.

CI runs a bounded budget (`SQLITE_SCHEDULES`, `POSTGRES_SCHEDULES`, the same schedules each
time); `--explore=N` runs N fresh schedules per backend, of up to 80 steps.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.explorer._checks import Checks, Reader
from tests.explorer._postgres import postgres_world
from tests.explorer._probes import NEVER_ISSUED, Probes
from tests.explorer._sqlite import SQLiteReader
from tests.explorer._world import Request, World, micros, sqlite_world
from tests.support.databases import fresh_postgres_database

KEY = "k"
CLIENTS = ("a", "b", "c")
WATCHER = "w"
# An election as the spec makes one (a group's leader, on the lock `groups:` + its name): the
# clients campaign with their names as labels, waiting in line, resign by releasing, proclaim a
# new label by renewing; an observer follows its leaders with chained watches.
ELECTION = "groups:g"
OBSERVER = "o"
# A watch naming any version (`Schedules.watch_from`): none, an older one, the key's, one ahead.
VIEWER = "v"
LABELS = (None, "x", "y")
SERVERS = ("s1", "s2")
FAULTS = ("none", "none", "none", "fail", "lost")
MODES = ("lock", "lock", "semaphore", "semaphore3", "shared", "shared")
# What the probes send (`Schedules.wrong_tokens`), batches included (with them, CI's fixed
# schedules on PostgreSQL first found a hand-off decided on a stale clock read answering a lease
# that had already expired: UntrueAnswer, closed by issue 34's rule that an answer is judged at
# the time it is sent).
PROBE_OPS = ("release", "release", "renew", "renew_many")
LIMITS = {"semaphore": 2, "semaphore3": 3}
# CI's budget: schedules of up to 40 steps per backend (`--explore=N` for N of up to 80).
SQLITE_SCHEDULES = 200
POSTGRES_SCHEDULES = 25
# Kinds of event a schedule may leave out (`Schedules.start`).
SWARM = (
    "kills",
    "faults",
    "force",
    "new tokens",
    "retries",
    "closes",
    "stale",
    "long waits",
    "limits",  # leave `limit` out of the body when it is 1 (the default)
    "semaphores",  # locks only: every acquire has limit 1
    "shared",  # no shared acquires: every lease is exclusive
    "watches",  # nobody watches the key
    "labels",  # no lease has a label
    "batches",  # no batch renewals
    "elections",  # nobody campaigns or observes
    "versions",  # no watch names a version of its choosing
)
# How long the schedule lets time run at its end, at most, for everything to come to rest.
SETTLING_ROUNDS = 40
SETTLING_STEP = 0.5
# And how long once at rest: a step, and two heartbeats (1 s each: `_watcher_comes_to_rest`).
AFTER_REST_STEPS = 5


class Schedules(RuleBasedStateMachine):
    """One world, and everything that can happen to it."""

    open_world: staticmethod = None  # set by each backend's test: () -> (world, reader, stack)

    def __init__(self) -> None:
        super().__init__()
        # The garbage collector runs when allocations say so, and what it finalizes (an async
        # generator's aclose, a task's) schedules callbacks on the servers' loop: at a moment
        # that depends on memory, not on the schedule, so the same schedule could take another
        # path, and Hypothesis's replay of a failure draw differently (FlakyStrategyDefinition).
        # A schedule runs without it; what it leaves is collected at its end.
        gc.disable()
        self._stack = contextlib.ExitStack()
        self._stack.callback(gc.collect)
        self._stack.callback(gc.enable)
        self.world, self.reader = self.open_world(self._stack)
        self.checks = Checks(self.world, self.reader, [KEY, ELECTION], elections=[ELECTION])
        self.probes = Probes(self.world, self.checks)
        self._ids = iter(uuid.UUID(int=n) for n in range(1, 1 << 62))
        self.tokens = {client: self._new_id() for client in CLIENTS}
        self.leases: dict[str, list[dict[str, object]]] = {client: [] for client in CLIENTS}
        self.terms: dict[str, list[dict[str, object]]] = {client: [] for client in CLIENTS}
        self.world.answer_hooks.append(self._keep_lease)

    def _idle(self, client: str) -> bool:
        """Whether `client` has no request out (clients send one at a time, as the SDK does)."""
        return not any(r.in_flight for r in self.world.requests if r.client == client)

    def _new_id(self) -> str:
        return str(next(self._ids))

    def _keep_lease(self, request: Request) -> None:
        told: list[dict[str, object]] = []
        if request.status == 200 and request.op in ("acquire", "renew"):
            told = [request.payload]
        if request.status == 200 and request.op == "renew_many":
            told = [r["lease"] for r in request.payload["results"] if "lease" in r]
        for lease in told:  # the leases of the key, and the terms of the election
            (self.leases if lease["key"] == KEY else self.terms)[request.client].append(lease)

    @initialize(swarm=st.sets(st.sampled_from(SWARM)))
    def start(self, swarm: set[str]) -> None:
        """Start the servers; leave some kinds of event out of this schedule altogether.

        Swarm testing: a schedule without kills or faults has room for more of the rest, and
        reaches deeper into what remains (Groce et al., "Swarm Testing", ISSTA 2012).
        """
        self.off = swarm
        if self.world.backend == "postgres":
            # Not yet on PostgreSQL: with them, CI's fixed schedules there reported
            # FlakyStrategyDefinition under load (4 of 7 runs at load ~10), not yet explained.
            self.off = swarm | {"elections", "versions"}
        for name in SERVERS:
            self.world.start_server(name)
        if "watches" not in self.off:
            self._watch(SERVERS[0], 4.0)  # the watcher is there from the start

    # -- what clients do --------------------------------------------------------------------

    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        ttl=st.sampled_from([1.0, 2.5]),
        wait=st.sampled_from([0, 0, 1.5, 4.0]),
        with_id=st.booleans(),
        mode=st.sampled_from(MODES),
        label=st.sampled_from(LABELS),
        at_once=st.booleans(),
    )
    def acquire(
        self,
        client: str,
        server: str,
        ttl: float,
        wait: float,
        with_id: bool,
        mode: str,
        label: str | None,
        at_once: bool,
    ) -> None:
        """Acquire (or wait in line for) the key, as a lock, a semaphore of 2 or 3 slots, or
        shared (a lock's shared lease: limit 1); `at_once`: its transaction runs to its end
        before anything else happens (a schedule reaches a held key in one step)."""
        if not self._idle(client):
            return
        body: dict[str, object] = {"owner_token": self.tokens[client], "ttl_seconds": ttl}
        if wait:
            body["wait_seconds"] = wait
        if label is not None and "labels" not in self.off:
            body["label"] = label
        if mode.startswith("semaphore") and "semaphores" in self.off:
            mode = "lock"
        if mode == "shared" and "shared" in self.off:
            mode = "lock"
        limit, shared = LIMITS.get(mode, 1), mode == "shared"
        if limit != 1 or "limits" not in self.off:
            body["limit"] = limit
        if shared or "limits" not in self.off:  # an exclusive acquire sends false, or nothing
            body["shared"] = shared
        rid = self._new_id() if with_id else None
        request = self.world.send(client, server, "acquire", KEY, body, request_id=rid)
        if at_once:
            self._through(request)

    def _through(self, request: Request) -> None:
        """Run the storage work `request` has pending to its end (past its clock reads); work
        it waits behind, or blocked on a row lock, is left to the schedule."""
        for _ in range(10):
            paused = [p for p in self.world.paused() if p.request is request]
            mine = [p for p in self.world.pending if p.request is request and self.world.can_run(p)]
            if paused:
                self.world.resume(paused[0])
            elif mine:
                self.world.run(mine[0])
            else:
                return

    def _live_leases(self, client: str) -> list[dict[str, object]]:
        """The leases `client` was told of under its current owner token, live by their
        answers' expiry now, latest first."""
        now = self.world.now_us()
        return [
            lease
            for lease in reversed(self.leases[client])
            if lease["owner_token"] == self.tokens[client]
            and micros(str(lease["expires_at"])) > now
        ]

    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        op=st.sampled_from(["renew", "release"]),
        older=st.booleans(),
        label=st.sampled_from((*LABELS, "")),
    )
    def renew_or_release(
        self, client: str, server: str, op: str, older: bool, label: str | None
    ) -> None:
        older = older and "stale" not in self.off
        if not self._idle(client):
            return
        mine = [
            lease for lease in self.leases[client] if lease["owner_token"] == self.tokens[client]
        ]
        tokens = sorted({int(lease["fencing_token"]) for lease in mine})  # type: ignore[call-overload]
        if not tokens:
            return
        token = tokens[0] if older else tokens[-1]
        body: dict[str, object] = {"owner_token": self.tokens[client], "fencing_token": token}
        if op == "renew":
            body["ttl_seconds"] = 2.5
            if label is not None and "labels" not in self.off:
                body["label"] = label
        self.world.send(client, server, op, KEY, body, request_id=self._new_id())

    @precondition(lambda self: "watches" not in self.off)
    @rule(server=st.sampled_from(SERVERS), wait=st.sampled_from([1.0, 4.0]))
    def watch(self, server: str, wait: float) -> None:
        """The watcher polls from the last version it heard, if it has no poll open."""
        if self._idle(WATCHER):
            self._watch(server, wait)

    def _watch(self, server: str, wait: float, watcher: str = WATCHER, key: str = KEY) -> None:
        heard = self.checks.watched.get(watcher)
        after = 0 if heard is None else heard["version"]
        body = {"after_version": after, "wait_seconds": wait}
        self.world.send(watcher, server, "watch", key, body)

    @precondition(lambda self: "versions" not in self.off)
    @rule(
        server=st.sampled_from(SERVERS),
        which=st.sampled_from(["none", "older", "last", "ahead"]),
        wait=st.sampled_from([1.0, 4.0]),
    )
    def watch_from(self, server: str, which: str, wait: float) -> None:
        """A watch of the key naming a version of its own choosing, whatever it heard before:
        none (0), one the key had before its latest, the key's latest (by the database), or
        one it has not reached. It is answered once the key's version differs from it (or its
        wait runs out), never with a lower one than it named if the key had reached that."""
        if not self._idle(VIEWER):
            return
        now = self.world.now_us()
        latest = self.reader.version(KEY, now)
        after = {"none": 0, "older": max(0, latest - 1), "last": latest, "ahead": latest + 2}
        body = {"after_version": after[which], "wait_seconds": wait}
        self.world.send(VIEWER, server, "watch", KEY, body)

    @precondition(lambda self: "elections" not in self.off)
    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        ttl=st.sampled_from([1.0, 2.5]),
        wait=st.sampled_from([0, 1.5, 4.0]),
        with_id=st.booleans(),
        at_once=st.booleans(),
    )
    def campaign(
        self, client: str, server: str, ttl: float, wait: float, with_id: bool, at_once: bool
    ) -> None:
        """Campaign for the election as the SDK does (`elections.campaign`): an exclusive
        acquire of limit 1 with the candidate's name as its label, waiting in line (or, with
        no wait, trying once)."""
        if not self._idle(client):
            return
        body: dict[str, object] = {
            "owner_token": self.tokens[client],
            "ttl_seconds": ttl,
            "label": f"member-{client}",
        }
        if wait:
            body["wait_seconds"] = wait
        rid = self._new_id() if with_id else None
        request = self.world.send(client, server, "acquire", ELECTION, body, request_id=rid)
        if at_once:
            self._through(request)

    @precondition(lambda self: "elections" not in self.off)
    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        op=st.sampled_from(["renew", "renew", "release"]),
        label=st.sampled_from(["", "member-x", None]),
    )
    def proclaim_or_resign(self, client: str, server: str, op: str, label: str | None) -> None:
        """The leader renews its latest term (`proclaim` with a new label, or none: a plain
        renewal) or resigns (releases it)."""
        if not self._idle(client):
            return
        mine = [term for term in self.terms[client] if term["owner_token"] == self.tokens[client]]
        if not mine:
            return
        body: dict[str, object] = {
            "owner_token": self.tokens[client],
            "fencing_token": max(int(term["fencing_token"]) for term in mine),  # type: ignore[call-overload]
        }
        if op == "renew":
            body["ttl_seconds"] = 2.5
            if label is not None:
                body["label"] = label
        self.world.send(client, server, op, ELECTION, body, request_id=self._new_id())

    @precondition(lambda self: "elections" not in self.off)
    @rule(server=st.sampled_from(SERVERS), wait=st.sampled_from([1.0, 4.0]))
    def observe(self, server: str, wait: float) -> None:
        """The observer (`elections.observe`) polls the election from the last version it
        heard, if it has no poll open."""
        if self._idle(OBSERVER):
            self._watch(server, wait, OBSERVER, ELECTION)

    @precondition(lambda self: "batches" not in self.off)
    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        both=st.booleans(),
        label=st.sampled_from((*LABELS, "")),
    )
    def renew_many(self, client: str, server: str, both: bool, label: str | None) -> None:
        """Renew the client's latest lease in a batch, with (`both`) its oldest token in the
        same batch: the entries are judged in order, as single renews; the first may carry a
        new label."""
        if not self._idle(client):
            return
        mine = [
            lease for lease in self.leases[client] if lease["owner_token"] == self.tokens[client]
        ]
        tokens = sorted({int(lease["fencing_token"]) for lease in mine})  # type: ignore[call-overload]
        if not tokens:
            return
        chosen = [tokens[-1], tokens[0]] if both and "stale" not in self.off else [tokens[-1]]
        entries = [
            {
                "key": KEY,
                "owner_token": self.tokens[client],
                "fencing_token": token,
                "ttl_seconds": 2.5,
            }
            for token in chosen
        ]
        if label is not None and "labels" not in self.off:
            entries[0]["label"] = label
        self.world.send(
            client, server, "renew_many", KEY, {"leases": entries}, request_id=self._new_id()
        )

    @precondition(lambda self: "force" not in self.off)
    @rule(server=st.sampled_from(SERVERS))
    def force_release(self, server: str) -> None:
        self.world.send("admin", server, "force_release", KEY, request_id=self._new_id())

    @precondition(lambda self: bool(self.probes.owners))
    @rule(
        server=st.sampled_from(SERVERS),
        op=st.sampled_from(PROBE_OPS),
        wrong=st.sampled_from(["theirs", "theirs", "never", "stranger"]),
        data=st.data(),
    )
    def wrong_tokens(self, server: str, op: str, wrong: str, data: st.DataObject) -> None:
        """A probe: renew or release (or a batch renewal: that entry first, the client's own
        live lease after it) naming an owner token and a fencing token never granted together,
        run at once: the client's own owner token with a token told to another
        (`theirs`) or never issued (`never`), or a stranger's owner token with a token told to
        someone (`stranger`). It names no lease, so it must be refused (`_probes`), and touch
        nothing: a release that heeded one token only would end the client's own lease, or
        another's. The client is one holding a lease when one does, and the token a live
        lease's when there is one: that is where a broken rule does harm."""
        idle = [name for name in CLIENTS if self._idle(name)]
        holding = [name for name in idle if self._live_leases(name)]
        if not idle:
            return
        client = data.draw(st.sampled_from(holding or idle))
        owner = self.tokens[client]
        told = sorted(item for item in self.probes.owners.items() if item[0][0] == KEY)
        if not told:
            return
        live = {(KEY, t) for t, _o, _u in self.reader.leases(KEY) if _u > self.world.now_us()}
        told = [item for item in told if item[0] in live] or told
        if wrong == "theirs":
            told = [(where, who) for where, who in told if who != owner]
            if not told:
                return
        ((_key, token), _who) = data.draw(st.sampled_from(told))
        if wrong == "never":
            token += NEVER_ISSUED
        if wrong == "stranger":
            owner = self._new_id()
        body: dict[str, object] = {"owner_token": owner, "fencing_token": token}
        if op != "release":
            body["ttl_seconds"] = 2.5
        if op == "renew_many":  # the wrong entry beside the client's own live lease, if any
            entries = [{"key": KEY, **body}]
            for lease in self._live_leases(client)[:1]:
                mine = {
                    "owner_token": lease["owner_token"],
                    "fencing_token": lease["fencing_token"],
                }
                entries.append({"key": KEY, **mine, "ttl_seconds": 2.5})
            body = {"leases": entries}
        self._through(self.world.send(client, server, op, KEY, body, request_id=self._new_id()))

    @rule(
        data=st.data(),
        server=st.sampled_from(SERVERS),
        same_server=st.sampled_from([True, True, False]),
        late=st.sampled_from([0.05, 0.5]),
        stall=st.sampled_from([1.05, 1.5, 3.0]),
        resume=st.booleans(),
    )
    def stalled_handoff(
        self,
        data: st.DataObject,
        server: str,
        same_server: bool,
        late: float,
        stall: float,
        resume: bool,
    ) -> None:
        """A release that stalls as it reads the clock (PostgreSQL; on SQLite it runs through),
        and a waiter that asks for the key `late` after that read, through the same server (its
        transaction waits for the key's lane up to its 1 s patience, then runs beside the
        stalled one) or the other. With `resume`, the release then goes on, handing the key
        to the waiter, and answers after it: the grant must count from the waiter's own send,
        not from the release's clock read (rule 5), whatever the order of their answers.

        The holder is a client holding a lease if one does; else one acquires first (at once):
        the scenario of `test_found.py`'s stalled release, from wherever the schedule stands."""
        idle = [name for name in CLIENTS if self._idle(name)]
        if len(idle) < 2:
            return
        holding = [name for name in idle if self._live_leases(name)]
        holder = data.draw(st.sampled_from(holding or idle))
        waiter = data.draw(st.sampled_from([name for name in idle if name != holder]))
        if not holding:
            ask = {"owner_token": self.tokens[holder], "ttl_seconds": 2.5}
            self._through(self.world.send(holder, server, "acquire", KEY, ask))
        live = self._live_leases(holder)
        if not live:
            return
        lease = live[0]
        body = {"owner_token": lease["owner_token"], "fencing_token": lease["fencing_token"]}
        release = self.world.send(holder, server, "release", KEY, body, request_id=self._new_id())
        started = [p for p in self.world.pending if p.request is release]
        if not started or not self.world.can_run(started[0]):
            return
        self.world.run(started[0])  # PostgreSQL: stops at its clock read
        self.world.advance(late)
        other = next(name for name in SERVERS if name != server)
        ask = {"owner_token": self.tokens[waiter], "ttl_seconds": 2.5, "wait_seconds": 4.0}
        waiting = self.world.send(waiter, server if same_server else other, "acquire", KEY, ask)
        self.world.advance(stall)  # past the lane's patience
        self._through(waiting)
        if resume:
            self._through(release)

    @rule(
        client=st.sampled_from(CLIENTS),
        server=st.sampled_from(SERVERS),
        again=st.sampled_from(SERVERS),
        op=st.sampled_from(["acquire", "acquire", "renew"]),
        end=st.sampled_from(["release", "release", "force", "expiry"]),
    )
    def replay_after_end(self, client: str, server: str, again: str, op: str, end: str) -> None:
        """A request whose answer told of a lease (acquire, or renew of the client's live one),
        the lease ended since (released by its holder, force-released, expired), then the same
        request id again: the replay must not tell of the ended lease (rule 3). Each request
        runs at once."""
        if not self._idle(client):
            return
        owner = self.tokens[client]
        if op == "acquire":
            body: dict[str, object] = {"owner_token": owner, "ttl_seconds": 1.0}
        else:
            live = self._live_leases(client)
            if not live:
                return
            body = {"owner_token": owner, "fencing_token": live[0]["fencing_token"]}
            body["ttl_seconds"] = 1.0
        rid = self._new_id()
        first = self.world.send(client, server, op, KEY, body, request_id=rid)
        self._through(first)
        if first.status != 200:
            return
        if end == "release":
            token = first.payload["fencing_token"]
            ending = {"owner_token": owner, "fencing_token": token}
            self._through(self.world.send(client, server, "release", KEY, ending))
        elif end == "force":
            self._through(self.world.send("admin", server, "force_release", KEY))
        else:
            self.world.advance(1.05)
        if self._idle(client):
            self._through(self.world.send(client, again, op, KEY, body, request_id=rid))

    @precondition(lambda self: "new tokens" not in self.off)
    @rule(client=st.sampled_from(CLIENTS))
    def new_owner_token(self, client: str) -> None:
        self.tokens[client] = self._new_id()

    @precondition(
        lambda self: "retries" not in self.off and any(r.request_id for r in self.world.requests)
    )
    @rule(data=st.data(), server=st.sampled_from(SERVERS))
    def retry(self, data: st.DataObject, server: str) -> None:
        """Send a request again with the same request id (the SDK's retry, a user's recovery)."""
        sent = [r for r in self.world.requests if r.request_id is not None]
        again = data.draw(st.sampled_from(sent))
        if again.in_flight or not self._idle(again.client):
            return  # a client retries a request it gave up on (or that was answered)
        self.world.send(
            again.client, server, again.op, again.key, again.body, request_id=again.request_id
        )

    @precondition(
        lambda self: "closes" not in self.off and any(r.in_flight for r in self.world.requests)
    )
    @rule(data=st.data(), then_run=st.booleans())
    def close(self, data: st.DataObject, then_run: bool) -> None:
        """A client closes its connection; with `then_run`, just as a transaction commits: the
        server hears of the close only after that transaction's effects."""
        open_ = [r for r in self.world.requests if r.in_flight]
        self.world.close(data.draw(st.sampled_from(open_)))
        runnable = [p for p in self.world.pending if self.world.can_run(p)]
        if then_run and runnable:
            self.world.run(data.draw(st.sampled_from(runnable)), settle=False)
            self.world.settle()

    # -- what the schedule does -------------------------------------------------------------

    @precondition(lambda self: any(self.world.can_run(p) for p in self.world.pending))
    @rule(data=st.data(), fault=st.sampled_from(FAULTS))
    def run(self, data: st.DataObject, fault: str) -> None:
        fault = "none" if "faults" in self.off else fault
        runnable = [p for p in self.world.pending if self.world.can_run(p)]
        self.world.run(data.draw(st.sampled_from(runnable)), fault)

    @precondition(lambda self: bool(self.world.paused()))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self.world.resume(data.draw(st.sampled_from(self.world.paused())))

    @precondition(lambda self: bool(self.world.announcements()))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """A NOTIFY reaches the servers (PostgreSQL)."""
        self.world.deliver(data.draw(st.integers(0, len(self.world.announcements()) - 1)))

    @rule()
    def drain(self) -> None:
        self.world.drain()

    @rule(seconds=st.sampled_from([0.05, 0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        if "long waits" in self.off:
            seconds = min(seconds, 0.5)
        self.world.advance(seconds)

    @precondition(
        lambda self: (
            "kills" not in self.off and sum(s.alive for s in self.world.servers.values()) > 1
        )
    )
    @rule(server=st.sampled_from(SERVERS))
    def kill(self, server: str) -> None:
        if self.world.servers[server].alive:
            self.world.kill_server(server)

    @precondition(lambda self: "kills" not in self.off)
    @rule(server=st.sampled_from(SERVERS))
    def restart(self, server: str) -> None:
        if not self.world.servers[server].alive:
            self.world.steps.append(f"restart {server}")
            self.world.start_server(server)

    # -- judging ----------------------------------------------------------------------------

    @invariant()
    def the_promise_holds(self) -> None:
        self.checks.after_step()
        self._verdict()

    def _verdict(self) -> None:
        if self.checks.violations:
            schedule = "\n".join(f"  {step}" for step in self.world.steps)
            problems = "\n".join(
                f"  {kind.__name__}: {text}" for kind, text in self.checks.violations
            )
            first = self.checks.violations[0][0]
            raise first(f"the lease promise broke:\n{problems}\nschedule:\n{schedule}")

    def teardown(self) -> None:
        try:
            if not self.checks.violations:
                self.world.drain()
                self.checks.after_step()
                self.checks.at_the_end()
                self._verdict()
                if any(r.client in (WATCHER, OBSERVER) for r in self.world.requests):
                    self._watcher_comes_to_rest()
        finally:
            self._stack.close()

    def _watcher_comes_to_rest(self) -> None:
        """Let time run until nothing changes, the watcher polling all along; then it must
        hold the key's state (the last promise of `_checks`).

        Once at rest, time runs a few steps more: a server's timer fires a moment after the
        expiry it waits for, so that its database agrees the lease has ended; and on SQLite a
        server polls the keys it watches only while it sees another server's heartbeat, which
        a schedule that ran every beat late may have let lapse: two heartbeats later each
        server has beaten, and then seen the others' beats and polled.
        """
        for _ in range(SETTLING_ROUNDS):
            self._rewatch()
            self.world.drain()
            self.checks.after_step()
            self._verdict()
            if self._at_rest():
                break
            self.world.advance(SETTLING_STEP)
        for _ in range(AFTER_REST_STEPS):
            self.world.advance(SETTLING_STEP)
            self._rewatch()
            self.world.drain()
        for watcher, key in self._chained():
            self.checks.watcher_agrees(watcher, key)
        self._verdict()

    def _chained(self) -> list[tuple[str, str]]:
        """The watchers that chain their polls, and their keys: those that watched."""
        chained = [(WATCHER, KEY), (OBSERVER, ELECTION)]
        return [(w, k) for w, k in chained if any(r.client == w for r in self.world.requests)]

    def _rewatch(self) -> None:
        alive = [name for name, server in self.world.servers.items() if server.alive]
        for watcher, key in self._chained():
            if alive and self._idle(watcher):
                self._watch(alive[0], 4.0, watcher, key)

    def _at_rest(self) -> bool:
        """No lease live, no request open but the watchers', no work waiting."""
        now = self.world.now_us()
        watchers = (WATCHER, OBSERVER, VIEWER)
        return (
            not any(
                until > now for key in (KEY, ELECTION) for _t, _o, until in self.reader.leases(key)
            )
            and all(r.client in watchers for r in self.world.requests if r.in_flight)
            and not self.world.pending
        )


def open_world(backend: str, stack: contextlib.ExitStack) -> tuple[World, Reader]:
    """A fresh world of `backend`, closed with `stack`."""
    return _postgres_world(stack) if backend == "postgres" else _sqlite_world(stack)


def _sqlite_world(stack: contextlib.ExitStack) -> tuple[World, Reader]:
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=_fast_tmp())))
    path = folder / "explorer.db"
    world = stack.enter_context(sqlite_world(path))
    reader = SQLiteReader(path)
    stack.callback(reader.close)
    return world, reader


def _postgres_world(stack: contextlib.ExitStack) -> tuple[World, Reader]:
    url = stack.enter_context(fresh_postgres_database())
    return stack.enter_context(postgres_world(url))


def _fast_tmp() -> str | None:
    shm = Path("/dev/shm")  # noqa: S108 - a directory of our own is made inside it
    return str(shm) if shm.is_dir() else None


_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@pytest.fixture
def budget(request: pytest.FixtureRequest) -> Callable[[int], settings]:
    """The Hypothesis settings for a backend whose CI budget is `examples` schedules."""
    explore: int = request.config.getoption("--explore")

    def settings_for(examples: int) -> settings:
        return settings(
            max_examples=explore or examples,
            stateful_step_count=80 if explore else 40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            # CI runs the same schedules each time; --explore draws new ones.
            derandomize=not explore,
            database=None,
            print_blob=True,
            # The mutation runner times the search alone: a failure is reported unshrunk.
            phases=_NO_SHRINK if os.environ.get("VOLCANO_EXPLORER_NO_SHRINK") else tuple(Phase),
        )

    return settings_for


class TestSchedules:
    def test_sqlite(self, budget: Callable[[int], settings]) -> None:
        """The lease promise holds in every schedule tried, on SQLite."""
        Schedules.open_world = staticmethod(_sqlite_world)
        run_state_machine_as_test(Schedules, settings=budget(SQLITE_SCHEDULES))

    @pytest.mark.postgres
    def test_postgres(self, budget: Callable[[int], settings]) -> None:
        """The lease promise holds in every schedule tried, on PostgreSQL, transactions stopped
        at their clock reads included."""
        Schedules.open_world = staticmethod(_postgres_world)
        run_state_machine_as_test(Schedules, settings=budget(POSTGRES_SCHEDULES))
