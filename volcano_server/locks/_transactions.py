"""The lock operations, each one transaction over the storage interface.

Each operation replays a stored outcome for a repeated request id, or loads the key's row,
decides (the pure rules of `_rules`), saves the row and stores the outcome under the request id.
Time is the storage's clock, read once inside the transaction once the key's row is locked.
Every transaction that can leave a key free (a release, a force release, an expiry found by a
timer, a waiter leaving) first hands it to the first waiter in line, so a free key never waits
for anyone to poll.

The rules for stored outcomes (docs/safety.md): an outcome is stored in the transaction that
decided it. A stored lease is replayed only while it is still the key's live lease (release,
expiry and force release end a lease without touching the outcomes that produced it, so the
replay looks). A lease handed to a waiting request by another transaction is stored
`undelivered`: if its client left before the answer, `undeliver` ends it and replaces the
outcome with a 409, unless a repeat of the request id had it replayed first; both take the
request id's row first, so exactly one of them happens.

Whether a transaction may block is an argument (`may_block`): False asks the storage to raise
`WouldBlock` instead, so the server can try cheap local work on its event loop first.

What a transaction did to leases (a grant, an end, a place in line) is counted once it has
committed (`_lockmetrics`): a transaction retried or rolled back counts nothing.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from .._config import WaitingSettings
from ..storage import (
    Lease,
    LockRow,
    OnLocked,
    StaleClock,
    Storage,
    StoredOutcome,
    Waiter,
    WouldBlock,
    WriteTx,
)
from ..telemetry._lockmetrics import End, Ended, Grant, Granted, Joined, LockEvent, LockMetrics
from ..wire._errors import ApiError
from ..wire._wire import Answer, dumps
from . import _batch
from ._batch import LeaseRenewal
from ._pulse import Pulse
from ._registry import Entry, KeyRef, Move, Registry
from ._revocations import Revocations
from ._rules import (
    HOLDERS_INLINE,
    Decision,
    Reach,
    Refusal,
    decide_acquire,
    decide_force_release,
    decide_handoff,
    decide_release,
    decide_renew,
    decide_renewals,
    has_room,
    holder_payload,
    lease_check,
    lease_payload,
    lock_held,
    lock_state,
    replaced,
    versioned,
    without,
)

__all__ = ["Caller", "LeaseRenewal", "Queued", "Transactions", "shutting_down"]

T = TypeVar("T")

LIST_PAGE_BYTES = 65_536
"""The most bytes of key states a page of `list_locks` holds past its first (openapi.yaml)."""

# How many waiters beyond the key's live leases a hand-off reads of its line at a time (those
# in line with a slot already, reserved ones, are never more than the live leases).
_LINE_PAGE = 16
# How many times a transaction is run again, each on a fresh clock, when the clock passed a
# lease it kept live before it could commit (`StaleClock`); then the request is answered 503.
_STALE_RUNS = 3


@attrs.frozen
class Caller:
    """Who asks, under which request id, and what the request is.

    Only a client-sent request id makes a request replayable; then `fingerprint` says what makes
    a repeat "the same request", decided once by the API from the validated request.
    """

    project_id: int
    request_id: str
    fingerprint: bytes | None = None
    credential: bytes = b""  # the service key's hash (a waiter's key can be revoked)

    @property
    def replayable(self) -> bool:
        """Whether the outcome is stored under the request id, to be replayed."""
        return self.fingerprint is not None


@attrs.frozen
class Queued:
    """An acquire that joined the key's queue; its request now waits for its turn."""


# What an operation's step returns: the row to save, and a decision (rendered and stored by
# `_mutate`), an answer made already (stored elsewhere, or never), or Queued.
Step = tuple[LockRow | None, Decision | Answer | Queued]
# What a transaction on a key returns: the row to save, and its result.
Touched = tuple[LockRow | None, T]


class _Effects:
    """What a transaction did to this server's waiting requests, and to leases (to count).

    Applied once it commits; forgotten (its entries put back) if it rolls back.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.granted: list[tuple[Entry, Lease, Answer]] = []
        self.joined: list[Entry] = []
        self.timed: list[tuple[KeyRef, float | None]] = []
        self.changed: list[KeyRef] = []  # keys whose version moved
        self.counted: list[LockEvent] = []

    def committed(
        self,
        time_handoff: Callable[[KeyRef, float | None], None],
        changed: Callable[[KeyRef], None],
        clock: tuple[int | None, float | None],
        metrics: LockMetrics,
    ) -> None:
        """`clock`: the storage clock after the commit, and when it was asked for."""
        if self.counted:
            metrics.record(self.counted)
        clock_us, clock_at = clock
        for entry in self.joined:
            entry.placed = True
        for entry, lease, answer in self.granted:
            entry.granted = lease
            told = attrs.evolve(answer, clock_us=clock_us, clock_at=clock_at)
            self._registry.move(entry, Move.COMMIT, told)
        for key_ref, seconds in self.timed:
            time_handoff(key_ref, seconds)
        for key_ref in self.changed:
            changed(key_ref)

    def rolled_back(self) -> None:
        for entry, lease, _ in self.granted:
            entry.unconfirmed = lease  # a commit lost on the way back may have made it
            self._registry.move(entry, Move.ROLL_BACK)
        for entry in self.joined:
            self._registry.forget(entry)


class Transactions:
    """Every lock transaction: the API's operations, the hand-offs, a waiting request's own.

    Acquire (waiting or not), renew, release, force release and get; settle (a timer's or an
    announcement's hand-off); give up, leave and undeliver (a waiting request's end); the
    heartbeat.
    """

    def __init__(
        self,
        storage: Storage,
        registry: Registry,
        *,
        retention_seconds: float,
        max_keys: int = 0,
        settings: WaitingSettings,
        time_handoff: Callable[[KeyRef, float | None], None],
        changed: Callable[[KeyRef], None],
        pulse: Pulse,
        revocations: Revocations,
        metrics: LockMetrics,
    ) -> None:
        """Built with what the transactions tell or ask of the waiting and watching code.

        `time_handoff(key, seconds)` re-times a key's hand-off after a commit (None: not held);
        `changed(key)` tells this server's watchers that a commit moved the key's version;
        `pulse` says whether other servers' heartbeats can be judged yet; `revocations`,
        whether a waiter's service key is known revoked (it is then never granted); `metrics`
        counts what committed transactions did to leases.
        """
        self._storage = storage
        self._metrics = metrics
        self._registry = registry
        self._time_handoff = time_handoff
        self._changed = changed
        self._pulse = pulse
        self._revocations = revocations
        self._retention_us = round(retention_seconds * 1_000_000)
        self._max_keys = max_keys
        self._reserve_us = round(settings.reserve_seconds * 1_000_000)
        self._rejoin_us = round(settings.rejoin_seconds * 1_000_000)
        self._lifetime_us = round(settings.heartbeat_lifetime * 1_000_000)

    # -- the operations of the API --------------------------------------------------------

    def acquire(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        *,
        limit: int = 1,
        label: str | None = None,
        shared: bool = False,
        entry: Entry | None = None,
        may_block: bool = True,
        on_locked: OnLocked | None = None,
    ) -> Answer | Queued:
        """Take a free slot of the key (`shared`: a shared lease), or extend the caller's own.

        With `entry` (a waiting acquire), a key whose slots are all held by others, or that
        others wait for, puts the caller in line (or back at its old place) and returns
        `Queued`. The lease carries `label` (none: None).
        """
        project_id = caller.project_id
        registry = self._registry

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            row, line_waits = self._serve_line(tx, row, now, effects)
            decision = decide_acquire(
                row,
                now,
                project_id=project_id,
                key=key,
                owner_token=owner_token,
                ttl=ttl_seconds,
                limit=limit,
                label=label,
                shared=shared,
                line_waits=line_waits,
            )
            if decision.done and self._over_key_quota(tx, project_id, row):
                return row, _quota_exceeded(self._max_keys)
            if decision.done:
                tx.delete_waiter(project_id, key, owner_token)  # it holds the key now
                registry.supersede(project_id, key, owner_token)
                effects.counted.append(Granted(key, _how_granted(decision, row)))
            elif decision.held_by_another and entry is not None:
                if registry.closing:
                    return row, shutting_down(caller.request_id)
                self._join(tx, effects, entry, row, now)
                if line_waits and has_room(row, now, shared=shared, limit=limit):
                    # Only the line kept it out: a place it kept from an earlier request may
                    # be ahead of those who wait, and then it is served now.
                    row = self._hand_off(tx, row, now, effects)
                return row, Queued()
            return decision.row or row, decision

        return self._mutate(
            caller, key, run, may_block=may_block, on_locked=on_locked, claims_lease=True
        )

    def renew(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        fencing_token: int,
        ttl_seconds: float,
        *,
        label: str | None = None,
        may_block: bool = True,
        on_locked: OnLocked | None = None,
    ) -> Answer:
        """Extend the live lease that matches both tokens; with `label`, relabel it."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_renew(
                row,
                now,
                key=key,
                owner_token=owner_token,
                fencing_token=fencing_token,
                ttl=ttl_seconds,
                label=label,
            )
            return decision.row or row, decision

        return _answer(
            self._mutate(
                caller, key, run, may_block=may_block, on_locked=on_locked, claims_lease=True
            )
        )

    def renew_many(
        self, caller: Caller, renewals: Sequence[LeaseRenewal], *, may_block: bool = True
    ) -> Answer:
        """Renew each lease as `renew` would, all in one transaction, one outcome for them all.

        The keys' rows are locked in key order (two batches never wait for each other in a
        circle) and the clock is read once they all are, so each entry is judged as a single
        renew would be; entries of one key are judged in order, each on the row the one before
        it left.
        """
        if not may_block:
            raise WouldBlock  # up to 500 renewals: longer than the event loop may be held
        project_id, request_id = caller.project_id, caller.request_id
        fingerprint = caller.fingerprint
        keys = sorted({renewal.key for renewal in renewals})
        by_key: dict[str, list[int]] = {}
        owners_of: dict[str, set[str]] = {}
        for i, renewal in enumerate(renewals):
            by_key.setdefault(renewal.key, []).append(i)
            owners_of.setdefault(renewal.key, set()).add(renewal.owner_token)

        def work(tx: WriteTx, effects: _Effects) -> Answer:
            prior = tx.claim_request(project_id, request_id) if fingerprint is not None else None
            # Only the named owners' leases of each key (however crowded it is; a replay's
            # stored answer names the same ones), unless requests wait here for the key:
            # their hand-off is timed by all of its leases.
            partial = {
                key: owners
                for key, owners in owners_of.items()
                if not self._registry.entries_of((project_id, key))
            }
            loaded = tx.load_locks(project_id, keys, owners=partial)
            now = tx.now_us()
            if prior is not None and fingerprint is not None:
                return self._replay_many(caller, loaded, now, prior, fingerprint)
            rows = dict(loaded)
            decisions: dict[int, Decision] = {}
            for key, entries in by_key.items():  # a key's entries in order, in one pass
                named = [
                    (r.owner_token, r.fencing_token, r.ttl_seconds, r.label)
                    for r in (renewals[i] for i in entries)
                ]
                row, decided = decide_renewals(loaded[key], now, key=key, renewals=named)
                if key in partial and any(d.refusal is not None for d in decided):
                    # A refusal's reason speaks of the key's other leases: count them.
                    crowd = tx.live_counts(project_id, key)
                    row, decided = decide_renewals(
                        loaded[key], now, key=key, renewals=named, crowd=crowd
                    )
                rows[key] = row or loaded[key]
                decisions.update(zip(entries, decided, strict=True))
            results: list[_batch.Result] = []
            for i, renewal in enumerate(renewals):
                decision = decisions[i]
                if decision.refusal is not None:
                    error = _error(decision.refusal)
                    results.append(_batch.refused(renewal.key, error, request_id))
                    continue
                assert decision.lease is not None  # noqa: S101 - a renewal's 200 has its lease
                assert decision.payload is not None  # noqa: S101 - and its body
                results.append(
                    _batch.renewed(renewal.key, decision.payload, decision.lease.expires_at_us)
                )
            saved = []
            for key in keys:  # as `_save` does: each row's version moved past what changed
                row, before = rows[key], loaded[key]
                if row is not None and row != before:
                    saved.append((versioned(before, row), before))
            tx.save_locks(saved)
            for row, before in saved:
                _kept_live_until(tx, before, row, now)
                self._changed_version(tx, effects, before, row)
            for key in keys:
                self._retime(effects, rows[key], now)
            answer = _batch.answer(results)
            if fingerprint is not None:
                tx.save_outcome(project_id, request_id, self._stored(fingerprint, answer, now))
            return answer

        return self._in_transaction(work, may_block=may_block, key=None)

    def release(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        fencing_token: int,
        *,
        may_block: bool = True,
        on_locked: OnLocked | None = None,
    ) -> Answer:
        """End the live lease that matches both tokens, and hand the key to the next in line."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_release(
                row, now, key=key, owner_token=owner_token, fencing_token=fencing_token
            )
            return self._hand_off(tx, decision.row or row, now, effects), decision

        return _answer(
            self._mutate(
                caller, key, run, may_block=may_block, on_locked=on_locked, ending=End.RELEASED
            )
        )

    def force_release(
        self, caller: Caller, key: str, *, may_block: bool = True, on_locked: OnLocked | None = None
    ) -> Answer:
        """End every live lease, whoever holds it, and hand the slots to the next in line."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_force_release(row, now, key=key)
            return self._hand_off(tx, decision.row or row, now, effects), decision

        ending = End.FORCE_RELEASED
        return _answer(
            self._mutate(caller, key, run, may_block=may_block, on_locked=on_locked, ending=ending)
        )

    def get(self, caller: Caller, key: str, *, may_block: bool = True) -> Answer:
        """Report the key's state without changing it."""
        with self._storage.read(may_block=may_block) as tx:
            tx.now_us()
            summary = tx.summarize(caller.project_id, key, holders=HOLDERS_INLINE)
        return Answer(200, dumps(lock_state(summary, key)))

    def list_locks(
        self, caller: Caller, *, prefix: str, after: str, limit: int, may_block: bool = True
    ) -> Answer:
        """One page of the keys with a live lease or a caller in line, in key order.

        At most `limit` keys and, past the first, LIST_PAGE_BYTES of their states.
        """
        if not may_block:
            raise WouldBlock  # up to 500 keys: longer than the event loop may be held
        with self._storage.read(may_block=may_block) as tx:
            tx.now_us()
            listed = tx.list_locks(
                caller.project_id,
                prefix=prefix,
                after=after,
                limit=limit + 1,
                holders=HOLDERS_INLINE,
            )
        states: list[bytes] = []
        size = 0
        for summary in listed[:limit]:
            state = dumps(lock_state(summary, summary.key))
            if states and size + len(state) > LIST_PAGE_BYTES:
                break
            states.append(state)
            size += len(state) + 1
        more = len(states) < len(listed)
        following = dumps(listed[len(states) - 1].key if more else None)
        return Answer(200, b'{"locks":[' + b",".join(states) + b'],"next":' + following + b"}")

    def holders(
        self, caller: Caller, key: str, *, after: int, limit: int, may_block: bool = True
    ) -> Answer:
        """One page of the key's live leases, by fencing token."""
        if not may_block:
            raise WouldBlock  # up to 100 leases: longer than the event loop may be held
        with self._storage.read(may_block=may_block) as tx:
            tx.now_us()
            leases = tx.list_holders(caller.project_id, key, after=after, limit=limit + 1)
        page = leases[:limit]
        body = {
            "holders": [holder_payload(lease) for lease in page],
            "next": page[-1].fencing_token if len(leases) > limit else None,
        }
        return Answer(200, dumps(body))

    def check(
        self, caller: Caller, key: str, fencing_token: int, *, may_block: bool = True
    ) -> Answer:
        """Whether `fencing_token` names a live lease of the key (the fence check)."""
        with self._storage.read(may_block=may_block) as tx:
            now = tx.now_us()
            row = tx.load_lock(caller.project_id, key)
        checked = lease_check(row, now, key, fencing_token)
        self._metrics.checked(key, live=checked["live"])
        return Answer(200, dumps(checked))

    # -- the life of a waiting request -----------------------------------------------------

    def settle(self, key_ref: KeyRef, *, may_block: bool = True) -> None:
        """Take a key reserved for one of ours, or hand a free key over.

        Run when a timer fires at a lease's expiry, when another server announces a
        reservation, or by polling; like every transaction on a key we wait for, it re-times
        the key's timer to the lease it leaves.
        """

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            if row is not None and row.held(now):
                row = self._take_reserved(tx, effects, row, now)
            return self._hand_off(tx, row, now, effects), None

        self._on_key(key_ref, run, may_block=may_block)

    def confirm(
        self, entry: Entry, *, may_block: bool = True, on_locked: OnLocked | None = None
    ) -> None:
        """Deliver the entry's unconfirmed grant if the database has it after all.

        A transaction that granted it rolled back, or committed and lost its answer: the
        entry went back in line, but the lease may be the key's, in the entry's name, its
        waiter row gone. Then the entry is granted that very lease now (its request answered
        with it); else it just waits on.
        """

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            return self._recover(tx, effects, entry, row, now), None

        self._on_key(entry.key_ref, run, may_block=may_block, on_locked=on_locked)

    def give_up(
        self, entry: Entry, *, may_block: bool = True, on_locked: OnLocked | None = None
    ) -> Answer | None:
        """The entry's wait ran out: a last hand-off, then out of line with 409 lock_held.

        None when the entry was granted the key meanwhile (by this very transaction, or by one
        whose commit it has not heard of yet): its request then waits for that answer.
        """

        def run(
            tx: WriteTx, effects: _Effects, now: int, row: LockRow | None
        ) -> Touched[Answer | None]:
            row = self._recover(tx, effects, entry, row, now)
            row = self._hand_off(tx, row, now, effects)
            if not self._registry.move(entry, Move.LEAVE):
                return row, None
            row = self._step_out(tx, entry, row, now)
            answer = _wait_ran_out(row, now, entry)
            if entry.fingerprint is not None:
                tx.save_outcome(
                    entry.project_id, entry.request_id, self._stored(entry.fingerprint, answer, now)
                )
            return row, answer

        return self._on_key(entry.key_ref, run, may_block=may_block, on_locked=on_locked)[2]

    def leave(
        self, entry: Entry, *, may_block: bool = True, on_locked: OnLocked | None = None
    ) -> None:
        """Take a LEAVING entry (client gone, shutdown) out of line; its place is kept a while.

        An unconfirmed grant the database has after all is ended first, as `undeliver` ends a
        lease nobody will hear of (unless a repeat of the request id had it replayed).
        """
        if entry.unconfirmed is not None:
            entry.granted, entry.unconfirmed = entry.unconfirmed, None
            self.undeliver(entry, may_block=may_block, on_locked=on_locked)

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            return self._hand_off(tx, self._step_out(tx, entry, row, now), now, effects), None

        self._on_key(entry.key_ref, run, may_block=may_block, on_locked=on_locked)

    def undeliver(
        self, entry: Entry, *, may_block: bool = True, on_locked: OnLocked | None = None
    ) -> None:
        """End the lease granted to an entry whose client left before it was answered.

        Only that very lease, unchanged: if a retry with the same owner token took it over (a
        new expiry), it stays. If the request id was stored, the lease ends only while its
        outcome is still undelivered, and the outcome becomes a 409 in the same transaction: a
        repeat of the request id that came first had the lease replayed, and keeps it.
        """
        granted = entry.granted

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            if granted is not None and row is not None and granted in row.live_leases(now):
                row = without(row, now, granted)
            return self._hand_off(tx, row, now, effects), None

        if entry.fingerprint is None:
            ending = End.UNDELIVERED
            self._on_key(
                entry.key_ref, run, may_block=may_block, on_locked=on_locked, ending=ending
            )
            return
        fingerprint = entry.fingerprint

        def claimed(tx: WriteTx, effects: _Effects) -> None:
            prior = tx.claim_request(entry.project_id, entry.request_id)
            if prior is None or not prior.undelivered:
                return  # replayed to a repeat of the request (or retained no more): it stays
            now = tx.now_us()
            loaded = tx.load_lock(entry.project_id, entry.key)
            row, _ = run(tx, effects, now, loaded)
            self._save(tx, effects, loaded, row, now, ending=End.UNDELIVERED)
            answer = _undelivered(entry, granted)
            tx.save_outcome(
                entry.project_id, entry.request_id, self._stored(fingerprint, answer, now)
            )

        self._in_transaction(claimed, may_block=may_block, key=entry.key_ref, on_locked=on_locked)

    def beat(self, server_id: str, lifetime_us: int, *, may_block: bool = True) -> tuple[bool, int]:
        """Record this server's heartbeat: whether any other server is alive, and its clock."""
        with self._storage.write(may_block=may_block) as tx:
            now = tx.now_us()
            tx.touch_server(server_id, now + lifetime_us)
            return tx.others_alive(server_id), now

    # -- hand-offs ------------------------------------------------------------------------

    def _hand_off(
        self, tx: WriteTx, row: LockRow | None, now: int, effects: _Effects
    ) -> LockRow | None:
        """Serve the key's line as far as the key has room (`_serve_line`)."""
        return self._serve_line(tx, row, now, effects)[0]

    def _serve_line(
        self, tx: WriteTx, row: LockRow | None, now: int, effects: _Effects
    ) -> tuple[LockRow | None, bool]:
        """Give the key to the waiters at the head of its line, in order, while they fit.

        Each waiter in turn gets a lease of the mode it asked for if one fits beside the live
        ones (`has_room`): an exclusive waiter alone, or the run of shared waiters at the head
        together, one slot each of a semaphore. The first that does not fit stops the hand-off,
        so nobody behind it passes it. Returns the row after, and whether someone still waits
        in line for room (then a newcomer must not take the key either).

        A waiter whose reservation lapsed (its server did not take the slot in time: a slow
        poll, a lost NOTIFY) is back in line at its own place, first if it was first: it is
        served like any waiter, never skipped for holding a slot it no longer holds. So is a
        request of this server's that another server stepped over or purged (`_back_in_line`).
        """
        if row is None:
            return row, False  # never acquired, so nobody can be waiting
        line = self._back_in_line(tx, row, now)
        while True:
            size = len(row.live_leases(now)) + _LINE_PAGE
            if line is None:
                line = tx.queued(row.project_id, row.key, size)
            moved = False
            for waiter in line:
                if row.lease_of(waiter.owner_token, now) is not None:
                    continue  # it holds a slot already (a live reservation, or a lease it took)
                if not has_room(row, now, shared=waiter.shared):
                    return row, True
                reach, entry = self._reach(waiter, now)
                handoff = decide_handoff(
                    row, now, waiter, reach, reserve_us=self._reserve_us, rejoin_us=self._rejoin_us
                )
                moved = True
                if handoff.waiter_state == "away":
                    self._update(tx, waiter, "away", handoff.until_us)
                    continue
                assert handoff.row is not None  # noqa: S101 - granted or reserved
                assert handoff.lease is not None  # noqa: S101 - granted or reserved
                row = handoff.row
                if entry is not None:
                    tx.delete_waiter(waiter.project_id, waiter.key, waiter.owner_token)
                    self._granted(tx, effects, entry, handoff.lease, now, how=Grant.AFTER_WAIT)
                else:
                    self._update(tx, waiter, "reserved", handoff.until_us)
                    tx.announce(waiter.server_id, waiter.seq)
            if not moved or len(line) < size:
                return row, False  # the whole line is served (or holds its slots already)
            line = None  # read again: the hand-offs above changed it

    def _back_in_line(self, tx: WriteTx, row: LockRow, now: int) -> list[Waiter] | None:
        """Put this server's waiting requests whose rows left the line back at their places.

        Another server steps over a waiter whose server's heartbeat has lapsed (its row
        `away`), and purges it later. After an outage every heartbeat had lapsed, and a server
        that reached the database again later than another can be judged dead by it while its
        requests still wait: their rows are then away or gone, and no hand-off would ever
        reach them (each would wait out its wait, then hear 409). Their own server, which
        holds them, puts each back at its own place (`seq`) with its heartbeat written, in any
        transaction that serves the key's line. Only the line's first page is read for it: a
        request further back is put back once the head reaches it. That page is returned when
        nobody was put back, for the hand-off that follows to start from (else None).

        A row gone is put back only for a request that joined before this server's heartbeat
        last lapsed (a purge needs that): else the owner token took the key through another
        server, which deleted its place, and this request was superseded there.
        """
        mine = self._registry.queued_of((row.project_id, row.key))
        if not mine:
            return None
        size = len(row.live_leases(now)) + _LINE_PAGE
        line = tx.queued(row.project_id, row.key, size)
        seen = {waiter.seq for waiter in line}
        last = line[-1].seq if len(line) == size else None  # the line goes on past it
        server_id = self._registry.server_id
        back = False
        for entry in mine:
            if entry.seq is None or entry.seq in seen or (last is not None and entry.seq > last):
                continue
            waiter = tx.find_waiter(entry.project_id, entry.key, entry.owner_token)
            if waiter is None and entry.placed_in_run != self._pulse.runs:
                tx.add_waiter(
                    entry.project_id,
                    entry.key,
                    entry.owner_token,
                    entry.ttl_seconds,
                    server_id,
                    label=entry.label,
                    shared=entry.shared,
                    seq=entry.seq,
                )
            elif waiter is not None and (waiter.seq, waiter.server_id, waiter.state) == (
                entry.seq,
                server_id,
                "away",
            ):
                self._update(tx, waiter, "waiting", None)
            else:
                continue  # superseded through another server (its place taken, or the key)
            back = True
        if not back:
            return line  # the hand-off that follows starts from it
        tx.touch_server(server_id, now + self._lifetime_us)
        return None

    def _recover(
        self, tx: WriteTx, effects: _Effects, entry: Entry, row: LockRow | None, now: int
    ) -> LockRow | None:
        """Grant the entry its unconfirmed lease again if the key has it live (`confirm`)."""
        lost = entry.unconfirmed
        if lost is None:
            return row
        if row is None or lost not in row.live_leases(now):
            entry.unconfirmed = None  # never committed, or ended since: nothing to deliver
            return row
        if entry.seq is None or self._registry.claim(entry.seq) is not entry:
            return row  # it left meanwhile: `leave` ends the lease
        entry.unconfirmed = None
        self._granted(tx, effects, entry, lost, now, how=Grant.AFTER_WAIT)
        return row

    def _reach(self, waiter: Waiter, now: int) -> tuple[Reach, Entry | None]:
        if waiter.server_id == self._registry.server_id:
            entry = self._claim(waiter.seq)
            return (Reach.HERE, entry) if entry is not None else (Reach.GONE, None)
        # Right after the database was away every heartbeat lapsed: judge none yet (`_pulse`).
        alive = waiter.server_alive or not self._pulse.judges(now, waiter.server_until_us)
        return (Reach.THERE if alive else Reach.GONE), None

    def _take_reserved(
        self, tx: WriteTx, effects: _Effects, row: LockRow, now: int
    ) -> LockRow | None:
        """Each live slot reserved for a waiter of ours becomes its full lease (ttl from now)."""
        registry = self._registry
        line = tx.queued(row.project_id, row.key, len(row.live_leases(now)) + _LINE_PAGE)
        for waiter in line:
            if waiter.state != "reserved" or waiter.server_id != registry.server_id:
                continue
            reservation = row.lease_of(waiter.owner_token, now)
            if reservation is None:
                continue  # it lapsed: the slot is free again
            entry = self._claim(waiter.seq)
            if entry is None:  # its request left: give the reservation back
                self._update(tx, waiter, "away", now + self._rejoin_us)
                row = without(row, now, reservation)
                continue
            tx.delete_waiter(waiter.project_id, waiter.key, waiter.owner_token)
            taken = attrs.evolve(
                reservation,
                expires_at_us=now + round(entry.ttl_seconds * 1_000_000),
                ttl_seconds=entry.ttl_seconds,
                granted_at_us=now,
            )
            row = replaced(row, now, reservation, taken)
            self._granted(tx, effects, entry, taken, now, how=Grant.HANDED_OVER)
        return row

    def _claim(self, seq: int) -> Entry | None:
        """The entry at `seq`, claimed for a grant; None if it left, or its key was revoked."""
        registry = self._registry
        entry = registry.entry_at(seq)
        if entry is not None and self._revocations.known_revoked(entry.credential):
            registry.revoke(entry)  # 401, and out of line: never granted on a revoked key
            return None
        return registry.claim(seq)

    def _granted(
        self, tx: WriteTx, effects: _Effects, entry: Entry, lease: Lease, now: int, *, how: Grant
    ) -> None:
        """The entry's lease and its stored outcome, undelivered until its client has it."""
        answer = Answer(
            200, dumps(lease_payload(entry.key, lease)), lease_until_us=lease.expires_at_us
        )
        if entry.fingerprint is not None:
            stored = attrs.evolve(self._stored(entry.fingerprint, answer, now), undelivered=True)
            tx.save_outcome(entry.project_id, entry.request_id, stored)
        effects.granted.append((entry, lease, answer))
        effects.counted.append(Granted(entry.key, how))

    def _join(
        self, tx: WriteTx, effects: _Effects, entry: Entry, row: LockRow | None, now: int
    ) -> None:
        """Put the entry in line: at its old place if its owner token has one, else last."""
        registry = self._registry
        mine = tx.find_waiter(entry.project_id, entry.key, entry.owner_token)
        if mine is None:
            ahead = tx.waiting_count(entry.project_id, entry.key)
            effects.counted.append(Joined(entry.key, ahead))
            seq = tx.add_waiter(
                entry.project_id,
                entry.key,
                entry.owner_token,
                entry.ttl_seconds,
                registry.server_id,
                label=entry.label,
                shared=entry.shared,
            )
        else:
            seq = mine.seq
            tx.update_waiter(
                seq,
                state="waiting",
                until_us=None,
                server_id=registry.server_id,
                ttl_seconds=entry.ttl_seconds,
                label=entry.label,
                shared=entry.shared,
            )
        tx.touch_server(registry.server_id, now + self._lifetime_us)
        entry.placed_in_run = self._pulse.runs
        registry.join(entry, seq)
        effects.joined.append(entry)

    def _step_out(self, tx: WriteTx, entry: Entry, row: LockRow | None, now: int) -> LockRow | None:
        """Mark the entry's row away (its place kept a while), giving back a reservation."""
        waiter = tx.find_waiter(entry.project_id, entry.key, entry.owner_token)
        if waiter is None or waiter.seq != entry.seq:
            return row  # already granted, or a newer request holds this place
        if waiter.state == "reserved" and row is not None:
            reservation = row.lease_of(entry.owner_token, now)
            if reservation is not None:
                row = without(row, now, reservation)
        self._update(tx, waiter, "away", now + self._rejoin_us)
        return row

    @staticmethod
    def _update(tx: WriteTx, waiter: Waiter, state: Any, until_us: int | None) -> None:
        tx.update_waiter(
            waiter.seq,
            state=state,
            until_us=until_us,
            server_id=waiter.server_id,
            ttl_seconds=waiter.ttl_seconds,
            label=waiter.label,
            shared=waiter.shared,
        )

    def _over_key_quota(self, tx: WriteTx, project_id: int, row: LockRow | None) -> bool:
        """Whether a grant that stores a new key would pass the project's quota of keys."""
        new = row is None or not row.stored
        return new and bool(self._max_keys) and tx.key_count(project_id) >= self._max_keys

    # -- transactions ----------------------------------------------------------------------

    def _mutate(
        self,
        caller: Caller,
        key: str,
        run: Callable[[WriteTx, _Effects, int, LockRow | None], Step],
        *,
        may_block: bool,
        on_locked: OnLocked | None = None,
        claims_lease: bool = False,
        ending: End | None = None,
    ) -> Answer | Queued:
        """One operation of the API: replay, or run it and store its outcome.

        `claims_lease`: the operation's 200 describes a lease (acquire, renew), which a replay
        gives back only while that lease is still the key's live one. `ending`: how a live
        lease this operation removes has ended (release, force release).
        """
        fingerprint = caller.fingerprint

        def work(tx: WriteTx, effects: _Effects) -> Answer | Queued:
            if fingerprint is not None:
                prior = tx.claim_request(caller.project_id, caller.request_id)
                if prior is not None:
                    return self._replay(
                        tx, caller, key, prior, fingerprint, claims_lease=claims_lease
                    )
            now = tx.now_us()
            loaded = tx.load_lock(caller.project_id, key)
            row, outcome = run(tx, effects, now, loaded)
            self._save(tx, effects, loaded, row, now, ending=ending)
            if isinstance(outcome, Queued | Answer):
                return outcome
            answer = _render(outcome, caller.request_id)
            if fingerprint is not None:
                tx.save_outcome(
                    caller.project_id, caller.request_id, self._stored(fingerprint, answer, now)
                )
            return answer

        key_ref = (caller.project_id, key)
        return self._in_transaction(work, may_block=may_block, key=key_ref, on_locked=on_locked)

    def _replay(
        self,
        tx: WriteTx,
        caller: Caller,
        key: str,
        prior: StoredOutcome,
        fingerprint: bytes,
        *,
        claims_lease: bool,
    ) -> Answer:
        """The stored answer to a repeated request id, if it still holds true."""
        if not hmac.compare_digest(prior.fingerprint, fingerprint):
            return ApiError.request_id_reused(caller.request_id).answer(caller.request_id)
        replayed = Answer(prior.status, prior.body, prior.retry_after, replayed=True)
        if not (claims_lease and prior.status == 200):
            return replayed
        lease = json.loads(prior.body)
        row = tx.load_lock(caller.project_id, key)
        live = _live_lease(row, tx.now_us(), lease)
        if live is None:
            return attrs.evolve(_ended(lease, caller.request_id), replayed=True)
        if prior.undelivered:  # this repeat delivers it: the server must not end it now
            delivered = attrs.evolve(prior, undelivered=False)
            tx.save_outcome(caller.project_id, caller.request_id, delivered)
        # The lease as it is now, never as stored: a later request of its owner may have
        # shortened it (a smaller ttl), and the client must not count on the stored expiry.
        # Unchanged, the stored body goes back byte for byte.
        told = lease_payload(lease["key"], live)
        body = prior.body if told == lease else dumps(told)
        return attrs.evolve(replayed, body=body, lease_until_us=live.expires_at_us)

    def _replay_many(
        self,
        caller: Caller,
        rows: dict[str, LockRow | None],
        now: int,
        prior: StoredOutcome,
        fingerprint: bytes,
    ) -> Answer:
        """The stored answer to a repeated batch, each lease that has ended since refused."""
        if not hmac.compare_digest(prior.fingerprint, fingerprint):
            return ApiError.request_id_reused(caller.request_id).answer(caller.request_id)
        if prior.status != 200:
            return Answer(prior.status, prior.body, prior.retry_after, replayed=True)

        def as_now(lease: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
            live = _live_lease(rows[lease["key"]], now, lease)
            return None if live is None else (lease_payload(lease["key"], live), live.expires_at_us)

        return _batch.replayed(prior.body, as_now, caller.request_id)

    def _on_key(
        self,
        key_ref: KeyRef,
        run: Callable[[WriteTx, _Effects, int, LockRow | None], Touched[T]],
        *,
        may_block: bool,
        on_locked: OnLocked | None = None,
        ending: End | None = None,
    ) -> tuple[LockRow | None, int, T]:
        """A transaction on one key's row that answers no API request: (row after, now, result)."""

        def work(tx: WriteTx, effects: _Effects) -> tuple[LockRow | None, int, T]:
            now = tx.now_us()
            loaded = tx.load_lock(*key_ref)
            row, result = run(tx, effects, now, loaded)
            self._save(tx, effects, loaded, row, now, ending=ending)
            return row, now, result

        return self._in_transaction(work, may_block=may_block, key=key_ref, on_locked=on_locked)

    def _save(
        self,
        tx: WriteTx,
        effects: _Effects,
        loaded: LockRow | None,
        row: LockRow | None,
        now: int,
        *,
        ending: End | None = None,
    ) -> None:
        """Save the key's row if it changed, with its version moved past what changed.

        Leases it drops are counted: expired ones as expiries, live ones as `ending` says (a
        reservation given back, never granted, counts as nothing). A moved version is told to
        this server's watchers once the transaction commits, and to other servers watching the
        key (an announcement). The key's hand-off is re-timed if requests wait for it here.
        """
        if row is None:
            return
        if row != loaded:
            if loaded is not None and loaded.leases:
                effects.counted.extend(_ends(loaded, row, now, ending))
            row = versioned(loaded, row)
            tx.save_lock(row, loaded)
            _kept_live_until(tx, loaded, row, now)
            self._changed_version(tx, effects, loaded, row)
        self._retime(effects, row, now)

    def _changed_version(
        self, tx: WriteTx, effects: _Effects, loaded: LockRow | None, row: LockRow
    ) -> None:
        """Tell a saved row's new version to the key's watchers, once the transaction commits.

        This server's watchers hear it from `effects`; other servers watching the key, from
        an announcement.
        """
        if loaded is not None and row.version == loaded.version:
            return
        key_ref = (row.project_id, row.key)
        effects.changed.append(key_ref)
        here = self._registry.server_id
        if any(server != here for server in tx.watched_by(*key_ref)):
            tx.announce_change(*key_ref)

    def _retime(self, effects: _Effects, row: LockRow | None, now: int) -> None:
        """Re-time the key's hand-off after this transaction, if requests wait here for it."""
        if row is None:
            return
        key_ref = (row.project_id, row.key)
        if self._registry.entries_of(key_ref):
            soonest = row.soonest_expiry(now)
            left = None if soonest is None else (soonest - now) / 1_000_000
            effects.timed.append((key_ref, left))

    def _in_transaction(
        self,
        work: Callable[[WriteTx, _Effects], T],
        *,
        may_block: bool,
        key: KeyRef | None,
        on_locked: OnLocked | None = None,
    ) -> T:
        """Run `work` in one write transaction; its effects on waiting requests follow.

        `key` is the key `work` locks first (then `on_locked` is called, by a backend that
        locks it early); None when it locks several itself.
        """
        for run in range(1, _STALE_RUNS + 1):
            effects = _Effects(self._registry)
            try:
                with self._storage.write(may_block=may_block, key=key, on_locked=on_locked) as tx:
                    result = work(tx, effects)
            except StaleClock:
                effects.rolled_back()
                if run == _STALE_RUNS:
                    raise
                continue  # again, on a fresh clock
            except BaseException:
                effects.rolled_back()
                # A commit lost on the way back (the connection dropped during COMMIT) may
                # have moved these keys' versions: their watchers here read them again, as
                # no announcement reaches this server and, alone on SQLite, no poll runs.
                for key_ref in effects.changed:
                    self._changed(key_ref)
                raise
            break
        committed, asked_at = tx.committed_us, tx.committed_at
        effects.committed(self._time_handoff, self._changed, (committed, asked_at), self._metrics)
        if isinstance(result, Answer) and effects.granted:
            # Its waiters are answered first: its client's next request comes after theirs.
            after = tuple(entry.answered for entry, _, _ in effects.granted)
            result = attrs.evolve(result, after=after)
        if isinstance(result, Answer) and result.lease_until_us is not None:
            return attrs.evolve(result, clock_us=committed, clock_at=asked_at)
        return result

    def _stored(self, fingerprint: bytes, answer: Answer, now: int) -> StoredOutcome:
        return StoredOutcome(
            fingerprint, answer.status, answer.body, answer.retry_after, now + self._retention_us
        )


def shutting_down(request_id: str) -> Answer:
    """503 for a waiting acquire that the server will not see through: it is shutting down."""
    message = "the server is shutting down; retry (a queued caller keeps its place a few seconds)"
    return ApiError.unavailable(message).answer(request_id)


def _how_granted(decision: Decision, row: LockRow | None) -> Grant:
    """An acquire's 200: a new lease takes the key's next token; the holder's own keeps its."""
    assert decision.lease is not None  # noqa: S101 - a 200 to acquire tells of its lease
    last = row.fencing_token if row is not None else 0
    return Grant.IMMEDIATE if decision.lease.fencing_token > last else Grant.ALREADY_HELD


def _ends(loaded: LockRow, row: LockRow, now: int, ending: End | None) -> list[Ended]:
    """The leases of `loaded` that `row` no longer has, and how long each was held.

    Expired ones ended at their expiry; live ones ended now, as `ending` says. Reservations
    (never granted: no grant time) are not leases anyone held.
    """
    kept = {lease.fencing_token for lease in row.leases}
    ended: list[Ended] = []
    for lease in loaded.leases:
        if lease.fencing_token in kept or lease.granted_at_us is None:
            continue
        if not lease.live(now):
            ended.append(Ended(row.key, End.EXPIRED, lease.expires_at_us - lease.granted_at_us))
        elif ending is not None:
            ended.append(Ended(row.key, ending, now - lease.granted_at_us))
    return ended


def _kept_live_until(tx: WriteTx, loaded: LockRow | None, row: LockRow, now: int) -> None:
    """Bound the commit by each lease live at `now` that `row` keeps but changes.

    A renewal (an acquire by the holder, a new label, a reservation taken) writes a lease that
    readers see only once the transaction commits; until then they see it as loaded, and once
    its old expiry passes, ended. Committed after that, with a clock read before it, the lease
    would be live again at an older version: so it commits only while that expiry is ahead.
    """
    if loaded is None:
        return
    after = {lease.fencing_token: lease for lease in row.leases}
    for lease in loaded.live_leases(now):
        kept = after.get(lease.fencing_token)
        if kept is not None and kept != lease:
            tx.commit_before(lease.expires_at_us)


def _quota_exceeded(keys: int) -> Decision:
    message = (
        f"this project has {keys} keys stored, its quota on this server (volcano-server serve"
        " --max-keys-per-project); keys are deleted once unused for the key retention"
    )
    return Decision(None, refusal=Refusal("quota_exceeded", message))


def _answer(result: Answer | Queued) -> Answer:
    assert isinstance(result, Answer)  # noqa: S101 - only acquire queues
    return result


def _live_lease(row: LockRow | None, now: int, lease: dict[str, Any]) -> Lease | None:
    """The key's live lease that a stored LockLease body names (owner and token), as it is now."""
    if row is None:
        return None
    return next(
        (
            live
            for live in row.live_leases(now)
            if live.owner_token == lease["owner_token"]
            and live.fencing_token == lease["fencing_token"]
        ),
        None,
    )


def _ended(lease: dict[str, Any], request_id: str) -> Answer:
    message = (
        f"the lease this request produced (fencing token {lease['fencing_token']} on"
        f" {lease['key']}) is no longer live: it was released, expired or force-released since"
    )
    return ApiError.lease_not_held(message).answer(request_id)


def _undelivered(entry: Entry, granted: Lease | None) -> Answer:
    token = granted.fencing_token if granted is not None else "?"
    message = (
        f"the lease granted to this request (fencing token {token} on {entry.key}) was"
        " released: the client left before the answer was sent"
    )
    return ApiError.lease_not_held(message).answer(entry.request_id)


def _wait_ran_out(row: LockRow | None, now: int, entry: Entry) -> Answer:
    message = f"the wait for {entry.key} ran out"
    retry_after = 1
    if row is not None and row.held(now):
        held = lock_held(row, now, entry.key, shared=entry.shared).refusal
        assert held is not None  # noqa: S101 - lock_held is a refusal
        message += f"; {held.message}"
        retry_after = held.retry_after or 1
    return ApiError.lock_held(message, retry_after).answer(entry.request_id)


def _render(decision: Decision, request_id: str) -> Answer:
    """A decision as the contract answers it: 200 with what it tells, 204, or its refusal."""
    if decision.refusal is not None:
        return _error(decision.refusal).answer(request_id)
    if decision.payload is None:
        return Answer(204, b"")
    until = decision.lease.expires_at_us if decision.lease is not None else None
    return Answer(200, dumps(decision.payload), lease_until_us=until)


def _error(refusal: Refusal) -> ApiError:
    limit, retry_after = refusal.limit, refusal.retry_after
    return ApiError.refused(refusal.reason, refusal.message, retry_after=retry_after, limit=limit)
