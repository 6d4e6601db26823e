"""The waiting acquires this server holds open, and the one state machine each one moves through.

The queue itself is in the database (storage `Waiter` rows, ordered by arrival), shared by every
server on it; this is this server's side of it. A waiting acquire here is one `Entry`: an open
request with its place (`seq`) in a key's queue. Entries move through one table, `Phase` x
`Move` -> `Phase` in `MOVES`, and only through `Registry.move`, under one lock, because the
transaction that hands a key over may run in a worker thread while the request's own coroutine
decides to leave:

    QUEUED --grant--> GRANTING --commit--> GRANTED          the lease is its answer
              |                 --roll back--> QUEUED
              +--leave--> LEAVING                             wait ran out, client gone, shutdown
              +--supersede--> SUPERSEDED                      a newer request took its place
              +--revoke--> REVOKED                            its service key was revoked: 401

The registry does no I/O and knows no transaction: `Transactions` moves entries as its
transactions commit, and `Waits` runs each entry's request until it is answered.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..wire._errors import ApiError
from ..wire._wire import Answer

if TYPE_CHECKING:
    from ..storage import Lease

__all__ = ["MOVES", "Entry", "KeyRef", "Move", "Phase", "Registry"]

log = logging.getLogger("volcano_server")

KeyRef = tuple[int, str]
"""(project id, key): a key's identity across projects."""
_TokenRef = tuple[int, str, str]  # (project id, key, owner token)


class Phase(enum.Enum):
    """Where a waiting request stands."""

    QUEUED = "queued"
    GRANTING = "granting"
    GRANTED = "granted"
    LEAVING = "leaving"
    SUPERSEDED = "superseded"
    REVOKED = "revoked"


class Move(enum.Enum):
    """What can happen to a waiting request."""

    GRANT = "grant"
    COMMIT = "commit"
    ROLL_BACK = "roll back"
    LEAVE = "leave"
    SUPERSEDE = "supersede"
    REVOKE = "revoke"


MOVES: dict[tuple[Phase, Move], Phase] = {
    (Phase.QUEUED, Move.GRANT): Phase.GRANTING,
    (Phase.GRANTING, Move.COMMIT): Phase.GRANTED,
    (Phase.GRANTING, Move.ROLL_BACK): Phase.QUEUED,
    (Phase.QUEUED, Move.LEAVE): Phase.LEAVING,
    (Phase.QUEUED, Move.SUPERSEDE): Phase.SUPERSEDED,
    (Phase.QUEUED, Move.REVOKE): Phase.REVOKED,
}
"""Every move an entry can make: (phase, move) -> next phase."""


class Entry:
    """One waiting acquire held open by this server."""

    def __init__(
        self,
        *,
        project_id: int,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        request_id: str,
        fingerprint: bytes | None,
        credential: bytes = b"",
        label: str | None = None,
        shared: bool = False,
    ) -> None:
        self.project_id = project_id
        self.credential = credential  # the hash of the service key it came with
        self.key = key
        self.owner_token = owner_token
        self.ttl_seconds = ttl_seconds
        self.label = label  # the public label of the lease it is to be granted
        self.shared = shared  # the lease's mode: shared, else exclusive
        self.request_id = request_id
        self.fingerprint = fingerprint  # the acquire's (None: not replayable)
        self.seq: int | None = None
        # Whether the transaction that put it at `seq` has committed: until then its row is
        # not there for others to see, and its absence from the line means nothing.
        self.placed = False
        self.placed_in_run = 0  # this server's heartbeat run (`Pulse.runs`) when it joined
        self.phase = Phase.QUEUED
        self.answer: Answer | None = None  # set with GRANTED, SUPERSEDED and REVOKED
        self.granted: Lease | None = None  # the lease it was granted, once committed
        # A lease granted to it by a transaction that rolled back, or whose commit was lost
        # on the way back (it may have committed): delivered if the database has it after all
        # (`Transactions.confirm`, `give_up`), ended if its client leaves (`leave`).
        self.unconfirmed: Lease | None = None
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        # Done once its request has its answer (or is past needing one): a release that
        # granted it answers only then (`Transactions`), so its client cannot ask again first.
        self.answered: asyncio.Future[None] = self._loop.create_future()

    @property
    def replayable(self) -> bool:
        """Whether the client sent a request id, so the outcome is stored for replay."""
        return self.fingerprint is not None

    def __repr__(self) -> str:  # never the owner token
        return f"<Entry {self.key!r} seq={self.seq} {self.phase.value}>"

    @property
    def key_ref(self) -> KeyRef:
        """The key's identity across projects."""
        return (self.project_id, self.key)

    @property
    def token_ref(self) -> _TokenRef:
        """The place's identity: one per owner token and key."""
        return (self.project_id, self.key, self.owner_token)

    def wake(self) -> None:
        """Wake the request's coroutine, from any thread."""
        if threading.get_ident() == self._loop_thread:
            self._signal()  # a hand-off on the loop itself: no self-pipe write, no extra turn
        else:
            self._loop.call_soon_threadsafe(self._signal)

    def _signal(self) -> None:
        self._woken = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def changed(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline kept across wake-ups
        gone: asyncio.Future[Any] | None = None,
    ) -> None:
        """Wait for `wake()`, `gone` (any future) or `timeout` seconds, whichever comes first.

        A wake that came before this call counts, so none is ever missed. The request awaits
        one future, which a wake resolves: it runs again in the loop's next turn (not two
        turns later, as through `asyncio.wait`).
        """
        if not self._woken:
            waiter = self._waiter = self._loop.create_future()
            timer = None if timeout is None else self._loop.call_later(timeout, _done, waiter)

            def went(_: asyncio.Future[Any]) -> None:
                _done(waiter)

            if gone is not None:
                gone.add_done_callback(went)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                if gone is not None:
                    gone.remove_done_callback(went)
                waiter.cancel()
                self._waiter = None
        self._woken = False

    def delivered(self) -> None:
        """Its request has its answer, or will not need one: see `answered`."""
        if not self.answered.done():
            self.answered.set_result(None)


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Registry:
    """Every waiting acquire this server holds open: by place, by key and by owner token."""

    def __init__(self, server_id: str) -> None:
        self.server_id = server_id
        self._closing = False
        self._lock = threading.Lock()
        self._by_seq: dict[int, Entry] = {}
        self._by_key: dict[KeyRef, set[Entry]] = {}
        self._by_token: dict[_TokenRef, Entry] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_seq)

    @property
    def closing(self) -> bool:
        """Whether the server is shutting down: new waits are refused, queued ones sent away."""
        return self._closing

    def close(self) -> None:
        """Refuse new waits from now on, and wake every entry so that it leaves."""
        self._closing = True
        for entry in self.entries():
            entry.wake()

    def move(self, entry: Entry, move: Move, answer: Answer | None = None) -> bool:
        """Apply `move` to `entry` if its phase allows it; return whether it did.

        The one place an entry's phase changes. Moves that settle its fate (commit,
        supersede) record the answer and wake its request; a rolled-back grant wakes it too,
        so a request that wanted to leave meanwhile tries again.
        """
        with self._lock:
            target = MOVES.get((entry.phase, move))
            if target is None:
                return False
            entry.phase = target
            if answer is not None:
                entry.answer = answer
            if target is not Phase.QUEUED and target is not Phase.GRANTING:
                self._drop(entry)
        log.debug("waiter %s: %s -> %s", entry.key, move.value, target.value)
        if move is not Move.GRANT and move is not Move.LEAVE:
            entry.wake()
        return True

    def join(self, entry: Entry, seq: int) -> None:
        """Record `entry` at place `seq`; an older entry with the same token is superseded.

        Called inside the transaction that queued it, so a hand-off in another transaction
        never sees its row without its entry.
        """
        older = self._older(entry.token_ref, entry)
        with self._lock:
            entry.seq = seq
            self._by_seq[seq] = entry
            self._by_key.setdefault(entry.key_ref, set()).add(entry)
            self._by_token[entry.token_ref] = entry
        if older is not None:
            self._supersede(older)

    def supersede(self, project_id: int, key: str, owner_token: str) -> None:
        """The owner token now holds the key through another request: end its wait here."""
        older = self._older((project_id, key, owner_token), None)
        if older is not None:
            self._supersede(older)

    def forget(self, entry: Entry) -> None:
        """Drop `entry` without a move (its queueing transaction rolled back)."""
        with self._lock:
            self._drop(entry)

    def claim(self, seq: int) -> Entry | None:
        """The entry at `seq`, moved to GRANTING; None if it is not here or cannot be granted."""
        with self._lock:
            entry = self._by_seq.get(seq)
        if entry is None or not self.move(entry, Move.GRANT):
            return None
        return entry

    def entries_of(self, key_ref: KeyRef) -> int:
        """How many requests this server holds open for the key."""
        with self._lock:
            return len(self._by_key.get(key_ref, ()))

    def queued_of(self, key_ref: KeyRef) -> list[Entry]:
        """The key's requests here that wait in line (placed, queued, no grant to confirm)."""
        with self._lock:
            return [
                entry
                for entry in self._by_key.get(key_ref, ())
                if entry.placed and entry.phase is Phase.QUEUED and entry.unconfirmed is None
            ]

    def entry_at(self, seq: int) -> Entry | None:
        """The entry at place `seq`, in any phase that still holds a place."""
        with self._lock:
            return self._by_seq.get(seq)

    def waited_keys(self) -> list[KeyRef]:
        """Every key this server holds a waiting request for."""
        with self._lock:
            return list(self._by_key)

    def entries(self) -> list[Entry]:
        """Every entry holding a place here."""
        with self._lock:
            return list(self._by_seq.values())

    def _older(self, token_ref: _TokenRef, newer: Entry | None) -> Entry | None:
        with self._lock:
            older = self._by_token.get(token_ref)
        return None if older is newer else older

    def _supersede(self, older: Entry) -> None:
        message = "a newer acquire with the same owner token took this request's place"
        self.move(older, Move.SUPERSEDE, ApiError.lock_held(message, 1).answer(older.request_id))

    def revoke(self, entry: Entry) -> bool:
        """The entry's service key was revoked: 401, and it must leave the line (never granted)."""
        message = "the service key this request waits with was revoked; it left the line"
        return self.move(
            entry, Move.REVOKE, ApiError.unauthorized(message).answer(entry.request_id)
        )

    def _drop(self, entry: Entry) -> None:
        # With self._lock held.
        if entry.seq is not None and self._by_seq.get(entry.seq) is entry:
            del self._by_seq[entry.seq]
        if self._by_token.get(entry.token_ref) is entry:
            del self._by_token[entry.token_ref]
        waiting = self._by_key.get(entry.key_ref)
        if waiting is not None:
            waiting.discard(entry)
            if not waiting:
                del self._by_key[entry.key_ref]
