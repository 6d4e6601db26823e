"""The lock operations, each one transaction over the storage interface.

Each operation replays a stored outcome for a repeated request id, or loads the key's row,
decides (the pure rules of `_rules`), saves the row and stores the outcome under the request id.
Time is the storage's clock, read once inside the transaction. Every transaction that can leave
a key free (a release, a force release, an expiry found by a timer, a waiter leaving) first
hands it to the first waiter in line, so a free key never waits for anyone to poll.

How a transaction may wait is an argument (`may_wait`): False asks the storage to raise
`WouldBlock` instead, so the server can try cheap local work on its event loop first.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from ._errors import ApiError
from ._rules import (
    Decision,
    Reach,
    decide_acquire,
    decide_force_release,
    decide_handoff,
    decide_release,
    decide_renew,
    lease_payload,
    lock_held,
    lock_state,
    vacated,
)
from ._waiting import Entry, Move, WaitingRoom, shutting_down
from ._wire import Answer, dumps
from .storage import LockRow, Storage, StoredOutcome, Waiter, WriteTx

__all__ = ["Answer", "Caller", "LockService", "Queued"]

T = TypeVar("T")


@attrs.frozen
class Caller:
    """Who asks, under which request id, and what the request is.

    Only a client-sent request id makes a request replayable; then `fingerprint` says what makes
    a repeat "the same request", decided once by the API from the validated request.
    """

    project_id: int
    request_id: str
    fingerprint: bytes | None = None

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
    """What a transaction did to this server's waiting requests, applied once it commits."""

    def __init__(self, room: WaitingRoom) -> None:
        self._room = room
        self.granted: list[tuple[Entry, LockRow, Answer]] = []
        self.joined: list[Entry] = []
        self.watched: list[tuple[tuple[int, str], float | None]] = []

    def committed(self) -> None:
        for entry, row, answer in self.granted:
            entry.granted_row = row
            self._room.move(entry, Move.COMMIT, answer)
        for key_ref, seconds in self.watched:
            self._room.watch(key_ref, seconds)

    def rolled_back(self) -> None:
        for entry, _, _ in self.granted:
            self._room.move(entry, Move.ROLL_BACK)
        for entry in self.joined:
            self._room.forget(entry)


class LockService:
    """Acquire (waiting or not), renew, release, force release and get; and the hand-offs."""

    def __init__(
        self, storage: Storage, retention_seconds: float, room: WaitingRoom | None = None
    ) -> None:
        self._storage = storage
        self._retention_us = round(retention_seconds * 1_000_000)
        self.room = room if room is not None else WaitingRoom()
        settings = self.room.settings
        self._reserve_us = round(settings.reserve_seconds * 1_000_000)
        self._rejoin_us = round(settings.rejoin_seconds * 1_000_000)
        self._lifetime_us = round(settings.heartbeat_lifetime * 1_000_000)
        self.runs_inline = storage.runs_inline

    # -- the operations of the API --------------------------------------------------------

    def acquire(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        *,
        entry: Entry | None = None,
        may_wait: bool = True,
    ) -> Answer | Queued:
        """Take a free or expired key, or extend the caller's own live lease.

        With `entry` (a waiting acquire), a key held by another owner puts the caller in line
        (or back at its old place) and returns `Queued`.
        """
        project_id = caller.project_id

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            row = self._hand_off(tx, row, now, effects)
            decision = decide_acquire(
                row, now, project_id=project_id, key=key, owner_token=owner_token, ttl=ttl_seconds
            )
            if decision.status == 200:
                tx.delete_waiter(project_id, key, owner_token)  # it holds the key now
                self.room.supersede(project_id, key, owner_token)
            elif decision.held_by_another and entry is not None:
                if self.room.closing:
                    return row, shutting_down(caller.request_id)
                self._join(tx, effects, entry, row, now)
                return row, Queued()
            return decision.row or row, decision

        return self._mutate(caller, key, run, may_wait=may_wait)

    def renew(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        fencing_token: int,
        ttl_seconds: float,
        *,
        may_wait: bool = True,
    ) -> Answer:
        """Extend the live lease that matches both tokens."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_renew(
                row,
                now,
                key=key,
                owner_token=owner_token,
                fencing_token=fencing_token,
                ttl=ttl_seconds,
            )
            return decision.row or row, decision

        return _answer(self._mutate(caller, key, run, may_wait=may_wait))

    def release(
        self,
        caller: Caller,
        key: str,
        owner_token: str,
        fencing_token: int,
        *,
        may_wait: bool = True,
    ) -> Answer:
        """End the live lease that matches both tokens, and hand the key to the next in line."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_release(
                row, now, key=key, owner_token=owner_token, fencing_token=fencing_token
            )
            return self._hand_off(tx, decision.row or row, now, effects), decision

        return _answer(self._mutate(caller, key, run, may_wait=may_wait))

    def force_release(self, caller: Caller, key: str, *, may_wait: bool = True) -> Answer:
        """End the live lease, whoever holds it, and hand the key to the next in line."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Step:
            decision = decide_force_release(row, now, key=key)
            return self._hand_off(tx, decision.row or row, now, effects), decision

        return _answer(self._mutate(caller, key, run, may_wait=may_wait))

    def get(self, caller: Caller, key: str, *, may_wait: bool = True) -> Answer:
        """Report the key's state without changing it."""
        with self._storage.read(wait=may_wait) as tx:
            now = tx.now_us()
            row = tx.load_lock(caller.project_id, key)
        return Answer(200, dumps(lock_state(row, now, key)))

    async def synced(self, *, here: bool = False) -> None:
        """Return once every transaction committed so far is on disk: answer only then."""
        await self._storage.synced(here=here)

    # -- the life of a waiting request -----------------------------------------------------

    def settle(self, key_ref: tuple[int, str], *, may_wait: bool = True) -> None:
        """Take a key reserved for one of ours, or hand a free key over.

        Run when a timer fires at a lease's expiry, when another server announces a
        reservation, or by polling; like every transaction on a key we wait for, it re-times
        the key's timer to the lease it leaves.
        """
        project_id, key = key_ref

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            if row is not None and row.live(now):
                row = self._take_reserved(tx, effects, row, now)
            return self._hand_off(tx, row, now, effects), None

        self._on_key(project_id, key, run, may_wait=may_wait)

    def give_up(self, entry: Entry, *, may_wait: bool = True) -> Answer | None:
        """The entry's wait ran out: a last hand-off, then out of line with 409 lock_held.

        None when the entry was granted the key meanwhile (by this very transaction, or by one
        whose commit it has not heard of yet): its request then waits for that answer.
        """

        def run(
            tx: WriteTx, effects: _Effects, now: int, row: LockRow | None
        ) -> Touched[Answer | None]:
            row = self._hand_off(tx, row, now, effects)
            if not self.room.move(entry, Move.LEAVE):
                return row, None
            row = self._step_out(tx, entry, row, now)
            answer = _wait_ran_out(row, now, entry)
            if entry.fingerprint is not None:
                tx.save_outcome(
                    entry.project_id, entry.request_id, self._stored(entry.fingerprint, answer, now)
                )
            return row, answer

        return self._on_key(entry.project_id, entry.key, run, may_wait=may_wait)[2]

    def leave(self, entry: Entry, *, may_wait: bool = True) -> None:
        """Take a LEAVING entry (client gone, shutdown) out of line; its place is kept a while."""

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            return self._hand_off(tx, self._step_out(tx, entry, row, now), now, effects), None

        self._on_key(entry.project_id, entry.key, run, may_wait=may_wait)

    def release_undelivered(self, entry: Entry, *, may_wait: bool = True) -> None:
        """End the lease granted to an entry whose client left before it was answered.

        Only that very lease, unchanged: if a retry with the same owner token has already
        taken it over (a new expiry), it stays.
        """
        granted = entry.granted_row

        def run(tx: WriteTx, effects: _Effects, now: int, row: LockRow | None) -> Touched[None]:
            if granted is not None and row == granted and row.live(now):
                row = vacated(row)
            return self._hand_off(tx, row, now, effects), None

        self._on_key(entry.project_id, entry.key, run, may_wait=may_wait)

    def beat(self, server_id: str, lifetime_us: int, *, may_wait: bool = True) -> bool:
        """Record this server's heartbeat; return whether any other server is alive."""
        with self._storage.write(wait=may_wait) as tx:
            tx.touch_server(server_id, tx.now_us() + lifetime_us)
            return tx.others_alive(server_id)

    # -- hand-offs ------------------------------------------------------------------------

    def _hand_off(
        self, tx: WriteTx, row: LockRow | None, now: int, effects: _Effects
    ) -> LockRow | None:
        """Give a free key to the first waiter in line that can take it; return the new row."""
        if row is None or row.live(now):
            return row  # held, or never acquired (so nobody can be waiting)
        while True:
            line = tx.queued(row.project_id, row.key, 16)
            if not line:
                return row
            for waiter in line:
                reach, entry = self._reach(waiter)
                handoff = decide_handoff(
                    row, now, waiter, reach, reserve_us=self._reserve_us, rejoin_us=self._rejoin_us
                )
                if handoff.waiter_state == "away":
                    self._update(tx, waiter, "away", handoff.until_us)
                    continue
                assert handoff.row is not None  # noqa: S101 - granted or reserved
                if entry is not None:
                    tx.delete_waiter(waiter.project_id, waiter.key, waiter.owner_token)
                    self._granted(tx, effects, entry, handoff.row, now)
                else:
                    self._update(tx, waiter, "reserved", handoff.until_us)
                    tx.announce(waiter.server_id, waiter.seq)
                return handoff.row

    def _reach(self, waiter: Waiter) -> tuple[Reach, Entry | None]:
        if waiter.server_id == self.room.server_id:
            entry = self.room.claim(waiter.seq)
            return (Reach.HERE, entry) if entry is not None else (Reach.GONE, None)
        alive = waiter.server_alive or not self.room.pulse.judges_others()
        return (Reach.THERE if alive else Reach.GONE), None

    def _take_reserved(
        self, tx: WriteTx, effects: _Effects, row: LockRow, now: int
    ) -> LockRow | None:
        """A live lease reserved for a waiter of ours becomes its full lease (ttl from now)."""
        assert row.owner_token is not None  # noqa: S101 - live rows have an owner
        waiter = tx.find_waiter(row.project_id, row.key, row.owner_token)
        if waiter is None or waiter.state != "reserved" or waiter.server_id != self.room.server_id:
            return row
        entry = self.room.claim(waiter.seq)
        if entry is None:  # its request left: give the reservation back
            self._update(tx, waiter, "away", now + self._rejoin_us)
            return vacated(row)
        tx.delete_waiter(waiter.project_id, waiter.key, waiter.owner_token)
        taken = attrs.evolve(
            row,
            expires_at_us=now + round(entry.ttl_seconds * 1_000_000),
            ttl_seconds=entry.ttl_seconds,
        )
        self._granted(tx, effects, entry, taken, now)
        return taken

    def _granted(
        self, tx: WriteTx, effects: _Effects, entry: Entry, row: LockRow, now: int
    ) -> None:
        answer = Answer(200, dumps(lease_payload(row)))
        if entry.fingerprint is not None:
            tx.save_outcome(
                entry.project_id, entry.request_id, self._stored(entry.fingerprint, answer, now)
            )
        effects.granted.append((entry, row, answer))

    def _join(
        self, tx: WriteTx, effects: _Effects, entry: Entry, row: LockRow | None, now: int
    ) -> None:
        """Put the entry in line: at its old place if its owner token has one, else last."""
        room = self.room
        mine = tx.find_waiter(entry.project_id, entry.key, entry.owner_token)
        if mine is None:
            seq = tx.add_waiter(
                entry.project_id, entry.key, entry.owner_token, entry.ttl_seconds, room.server_id
            )
        else:
            seq = mine.seq
            tx.update_waiter(
                seq,
                state="waiting",
                until_us=None,
                server_id=room.server_id,
                ttl_seconds=entry.ttl_seconds,
            )
        tx.touch_server(room.server_id, now + self._lifetime_us)
        room.join(entry, seq)
        effects.joined.append(entry)

    def _step_out(self, tx: WriteTx, entry: Entry, row: LockRow | None, now: int) -> LockRow | None:
        """Mark the entry's row away (its place kept a while), giving back a reservation."""
        waiter = tx.find_waiter(entry.project_id, entry.key, entry.owner_token)
        if waiter is None or waiter.seq != entry.seq:
            return row  # already granted, or a newer request holds this place
        if (
            waiter.state == "reserved"
            and row is not None
            and row.live(now)
            and row.owner_token == entry.owner_token
        ):
            row = vacated(row)
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
        )

    # -- transactions ----------------------------------------------------------------------

    def _mutate(
        self,
        caller: Caller,
        key: str,
        run: Callable[[WriteTx, _Effects, int, LockRow | None], Step],
        *,
        may_wait: bool,
    ) -> Answer | Queued:
        """One operation of the API: replay, or run it and store its outcome."""
        print_ = caller.fingerprint

        def work(tx: WriteTx, effects: _Effects) -> Answer | Queued:
            if print_ is not None:
                prior = tx.claim_request(caller.project_id, caller.request_id)
                if prior is not None:
                    return _replay(prior, print_, caller.request_id)
            now = tx.now_us()
            loaded = tx.load_lock(caller.project_id, key)
            row, outcome = run(tx, effects, now, loaded)
            self._save(tx, effects, loaded, row, now)
            if isinstance(outcome, Queued | Answer):
                return outcome
            answer = _render(outcome, caller.request_id)
            if print_ is not None:
                tx.save_outcome(
                    caller.project_id, caller.request_id, self._stored(print_, answer, now)
                )
            return answer

        return self._in_transaction(work, may_wait=may_wait, key=(caller.project_id, key))

    def _on_key(
        self,
        project_id: int,
        key: str,
        run: Callable[[WriteTx, _Effects, int, LockRow | None], Touched[T]],
        *,
        may_wait: bool,
    ) -> tuple[LockRow | None, int, T]:
        """A transaction on one key's row that answers no API request: (row after, now, result)."""

        def work(tx: WriteTx, effects: _Effects) -> tuple[LockRow | None, int, T]:
            now = tx.now_us()
            loaded = tx.load_lock(project_id, key)
            row, result = run(tx, effects, now, loaded)
            self._save(tx, effects, loaded, row, now)
            return row, now, result

        return self._in_transaction(work, may_wait=may_wait, key=(project_id, key))

    def _save(
        self, tx: WriteTx, effects: _Effects, loaded: LockRow | None, row: LockRow | None, now: int
    ) -> None:
        """Save the key's row if it changed; re-time the key's hand-off if requests wait here."""
        if row is None:
            return
        if row != loaded:
            tx.save_lock(row)
        key_ref = (row.project_id, row.key)
        if self.room.entries_of(key_ref):
            left = None
            if row.live(now):
                assert row.expires_at_us is not None  # noqa: S101 - live() checked it
                left = (row.expires_at_us - now) / 1_000_000
            effects.watched.append((key_ref, left))

    def _in_transaction(
        self,
        work: Callable[[WriteTx, _Effects], T],
        *,
        may_wait: bool,
        key: tuple[int, str],
    ) -> T:
        """Run `work` on `key` in one write transaction; its effects on waiting requests follow."""
        effects = _Effects(self.room)
        try:
            with self._storage.write(wait=may_wait, key=key) as tx:
                result = work(tx, effects)
        except BaseException:
            effects.rolled_back()
            raise
        effects.committed()
        return result

    def _stored(self, print_: bytes, answer: Answer, now: int) -> StoredOutcome:
        return StoredOutcome(
            print_, answer.status, answer.body, answer.retry_after, now + self._retention_us
        )


def _answer(result: Answer | Queued) -> Answer:
    assert isinstance(result, Answer)  # noqa: S101 - only acquire queues
    return result


def _wait_ran_out(row: LockRow | None, now: int, entry: Entry) -> Answer:
    message = f"the wait for {entry.key} ran out"
    retry_after = 1
    if row is not None and row.live(now):
        held = lock_held(row, now, entry.key).refusal
        assert held is not None  # noqa: S101 - lock_held is a refusal
        message += f"; {held.message}"
        retry_after = held.retry_after or 1
    return ApiError.lock_held(message, retry_after).answer(entry.request_id)


def _render(decision: Decision, request_id: str) -> Answer:
    if decision.refusal is not None:
        return decision.refusal.answer(request_id)
    return Answer(decision.status, dumps(decision.payload) if decision.payload is not None else b"")


def _replay(prior: StoredOutcome, print_: bytes, request_id: str) -> Answer:
    if hmac.compare_digest(prior.fingerprint, print_):
        return Answer(prior.status, prior.body, prior.retry_after, replayed=True)
    return ApiError.request_id_reused(request_id).answer(request_id)
