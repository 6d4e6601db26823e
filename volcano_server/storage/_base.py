"""The storage interface every backend implements, and the records that cross it.

A backend provides transactions; the lock rules live once, in `volcano_server.locks._transactions`,
written against `WriteTx` and `ReadTx`. Each lock operation is one short transaction: `write()`
begins it, the transactions read and write rows through the handle, and leaving the `with` block
commits (or rolls back on an exception). Time inside a transaction is the storage's clock
(`now_us`), in integer microseconds since the Unix epoch, read once per transaction, after the
key's row is locked.

Every way into a transaction takes `may_block`: with `may_block=False` a backend that would have
to wait (for the write lock, a free connection, another process) raises `WouldBlock` at once,
before it changes anything, so the server can run cheap local work on its event loop and send
only what must wait to a worker thread.

Backends raise `StorageUnavailable` when the database cannot be reached or locked in time; the
server answers that with 503 and a `Retry-After`.

The queue of callers waiting for a key lives in the database too (`Waiter` rows), so that
several server processes on one database share it; each row names the server process holding
the waiting request, and `servers` rows (a heartbeat) tell which of those are alive.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from ._groups import GroupReads, GroupWrites
from ._keys import KeyKind

if TYPE_CHECKING:
    from ._keys import KeyEvent, KeyInfo

__all__ = [
    "ExpiredLease",
    "KeyKind",
    "KeyRecord",
    "Lease",
    "Listener",
    "LockRow",
    "LockSummary",
    "OnLocked",
    "ProjectKeys",
    "ReadOnlyTx",
    "ReadTx",
    "StaleClock",
    "Storage",
    "StorageUnavailable",
    "StoredOutcome",
    "Synchronous",
    "UnsafeDatabase",
    "Waiter",
    "WaiterState",
    "WouldBlock",
    "WriteTx",
]

# SQLite's durability: "full" survives power loss, "normal" only a killed process.
Synchronous = Literal["full", "normal"]
# waiting: in line; reserved: first in line, the lock set aside for it until its server takes
# it; away: left (timed out, disconnected), its place kept for a short while to come back to.
WaiterState = Literal["waiting", "reserved", "away"]


class StorageUnavailable(Exception):
    """The database cannot be reached, or stayed locked past the busy timeout."""


class StaleClock(StorageUnavailable):
    """The storage clock passed a transaction's `commit_before` bound: it was rolled back.

    Its decisions kept a lease live that has expired since its clock read (a stalled
    transaction): committed, it would bring that lease back after readers saw it end. Run it
    again, on a fresh clock.
    """


class UnsafeDatabase(Exception):
    """The database is set up so that a crash loses acknowledged commits: the server refuses it."""


class WouldBlock(Exception):
    """Raised by a `may_block=False` call that would have had to wait; nothing was changed."""


OnLocked = Callable[[], None]
"""Called from a write transaction once it holds its key's lock (any thread; PostgreSQL only).

The server's lane for the key (`_lanes`) lets the next transaction on the key start then: it
queues for the row lock behind this one, in turn, instead of waiting for this one's commit.
"""


@attrs.frozen
class KeyRecord:
    """An API key as stored: only its SHA-256 hash, its project, its kind, whether revoked."""

    key_hash: bytes
    project_id: int
    kind: KeyKind
    revoked: bool = False

    @classmethod
    def from_row(
        cls, key_hash: bytes, row: tuple[int, KeyKind, bool | int] | None
    ) -> KeyRecord | None:
        """The record for a `SELECT project_id, kind, revoked` row, or None without a row."""
        return None if row is None else cls(key_hash, row[0], row[1], bool(row[2]))


@attrs.frozen
class ProjectKeys:
    """The keys made for a project; the only time the plaintext keys exist."""

    project: str
    anon_key: str
    service_key: str

    def __repr__(self) -> str:
        return f"ProjectKeys(project={self.project!r}, anon_key=<redacted>, service_key=<redacted>)"


@attrs.frozen
class Lease:
    """One lease of a key: live while `expires_at_us` is after the storage clock's now.

    `granted_at_us` is when its holder was granted it, by the storage clock: how long it was
    held is measured from there by whichever server ends it (the metrics; no rule reads it).
    None for a slot reserved for a waiter on another server, not yet taken by that server.
    `shared`: held in shared mode (beside other shared holders), else exclusive; a lease keeps
    its mode for life.
    """

    fencing_token: int
    owner_token: str
    expires_at_us: int
    ttl_seconds: float
    label: str | None = None
    granted_at_us: int | None = None
    shared: bool = False

    def live(self, now_us: int) -> bool:
        """Whether this lease has not expired at `now_us`."""
        return now_us < self.expires_at_us


@attrs.frozen
class LockRow:
    """A key: the last fencing token issued, its limit, and its leases as stored.

    With limit 1 the key is a lock (one exclusive lease, or shared leases); with N, a
    semaphore of N slots (exclusive leases only). `leases` may hold leases
    that have expired since they were stored (by fencing token, oldest first); only the live
    ones count (`live_leases`). `version` counts the changes of the key's holders saved so
    far; the key's version at a given moment also counts the stored leases that have expired
    by then (`version_at`), so an expiry changes it without any write.
    """

    project_id: int
    key: str
    fencing_token: int
    limit: int = 1
    leases: tuple[Lease, ...] = ()
    version: int = 0
    # False for a key whose row was purged (unused for long): it stands in for the row with its
    # project's floor as its fencing token and version, above any the key ever had, so tokens
    # and versions go on rising when the key is used again (`Storage.purge_keys`).
    stored: bool = True

    @classmethod
    def purged(cls, project_id: int, key: str, floor: int) -> LockRow:
        """The stand-in for a key with no row in a project whose keys were purged up to `floor`."""
        return cls(project_id, key, floor, 1, (), floor, stored=False)

    def version_at(self, now_us: int) -> int:
        """The key's version at `now_us`: the saved changes, and each stored lease expired."""
        return self.version + sum(not lease.live(now_us) for lease in self.leases)

    def live_leases(self, now_us: int) -> tuple[Lease, ...]:
        """The leases live at `now_us`, oldest first."""
        return tuple(lease for lease in self.leases if lease.live(now_us))

    def held(self, now_us: int) -> bool:
        """Whether any lease is live at `now_us`."""
        return any(lease.live(now_us) for lease in self.leases)

    def lease_of(self, owner_token: str, now_us: int) -> Lease | None:
        """The live lease of `owner_token`, if it has one."""
        return next(
            (x for x in self.leases if x.owner_token == owner_token and x.live(now_us)), None
        )

    def soonest_expiry(self, now_us: int) -> int | None:
        """When the first live lease ends, or None when none is live."""
        return min((x.expires_at_us for x in self.leases if x.live(now_us)), default=None)


@attrs.frozen
class ExpiredLease:
    """A lease a purge deleted once it had expired: how long it was held (for the metrics)."""

    project_id: int
    key: str
    held_us: int


@attrs.frozen
class LockSummary:
    """A key as a read shows it, bounded whatever the key holds.

    Its last fencing token, limit and version (at the read's clock), how many live leases it
    has (`holder_count`) and the highest of their tokens, up to a given number of them
    (`holders`, soonest expiry first), and how many wait in its line.
    """

    project_id: int
    key: str
    fencing_token: int
    limit: int
    version: int
    holders: tuple[Lease, ...]
    holder_count: int
    highest_live: int | None
    waiting: int

    @classmethod
    def purged(cls, project_id: int, key: str, floor: int) -> LockSummary:
        """A key whose row was purged, in a project whose keys were purged up to `floor`."""
        return cls(project_id, key, floor, 1, floor, (), 0, None, 0)

    @classmethod
    def of(cls, row: LockRow, now_us: int, waiting: int, *, holders: int) -> LockSummary:
        """The summary of a row already loaded whole, at `now_us`."""
        live = sorted(row.live_leases(now_us), key=lambda x: (x.expires_at_us, x.fencing_token))
        return cls(
            row.project_id,
            row.key,
            row.fencing_token,
            row.limit,
            row.version_at(now_us),
            tuple(live[:holders]),
            len(live),
            max((lease.fencing_token for lease in live), default=None),
            waiting,
        )

    def soonest_expiry(self) -> int | None:
        """When the first live lease ends, or None when none is live."""
        return self.holders[0].expires_at_us if self.holders else None


@attrs.frozen
class StoredOutcome:
    """An answer kept under a request id for idempotent replay.

    `undelivered`: a lease handed to a waiting request by another transaction, not yet known
    to have reached its client. If the client left before its answer, the server ends that
    lease unless a repeat of the request id has had it replayed first; whichever comes first
    clears the mark, under the request id's row lock, so the two never both happen.
    """

    fingerprint: bytes
    status: int
    body: bytes
    retry_after: int | None
    expires_at_us: int
    undelivered: bool = False


@attrs.frozen
class Waiter:
    """A caller in a key's queue, as stored. `seq` orders the queue: lower arrived earlier.

    `until_us` is when an away waiter's place is given up, or when a reservation lapses.
    `label` goes with the lease it is granted, and so does `shared` (the mode it asked for).
    `server_alive` is read with the row: whether the server holding the request still beats;
    `server_until_us`, until when its heartbeat ran (0: it has none).
    """

    seq: int
    project_id: int
    key: str
    owner_token: str
    ttl_seconds: float
    server_id: str
    state: WaiterState
    until_us: int | None
    label: str | None
    server_alive: bool
    shared: bool = False
    server_until_us: int = 0

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Waiter:
        """A waiter from a row of its fields in order, `server_until_us` last."""
        (
            seq,
            project_id,
            key,
            owner_token,
            ttl,
            server_id,
            state,
            until_us,
            label,
            alive,
            shared,
            server_until,
        ) = row
        return cls(
            seq,
            project_id,
            key,
            owner_token,
            ttl,
            server_id,
            state,
            until_us,
            label,
            bool(alive),
            bool(shared),
            int(server_until or 0),
        )


class Listener(Protocol):
    """What a server does with what other servers announce (`Storage.listen`)."""

    def reserved(self, server_id: str, seq: int) -> None:
        """Waiter `seq` of `server_id` was reserved a slot (`WriteTx.announce`)."""
        ...

    def changed(self, project_id: int, key: str) -> None:
        """The key's version changed (`WriteTx.announce_change`)."""
        ...

    def connected(self) -> None:
        """The listening connection is (re)established: anything may have been missed."""
        ...


class ReadTx(Protocol):
    """A read-only snapshot."""

    def now_us(self) -> int:
        """The storage clock at the start of this transaction."""
        ...

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        """The key's row and leases, if the key was ever acquired."""
        ...

    def waiting_count(self, project_id: int, key: str) -> int:
        """How many callers wait in the key's line (not counting those reserved a slot)."""
        ...

    def summarize(self, project_id: int, key: str, *, holders: int) -> LockSummary | None:
        """The key's summary at `now_us()` with up to `holders` live leases; None: no row.

        Its cost does not grow with the key's leases beyond `holders` (a database counts the
        rest), so a read of a semaphore of 1,000 holders costs about one of 20.
        """
        ...


class ReadOnlyTx(ReadTx, GroupReads, Protocol):
    """What `Storage.read` gives: the reads, listing keys and a key's leases, group reads."""

    def list_locks(
        self, project_id: int, *, prefix: str, after: str, limit: int, holders: int
    ) -> list[LockSummary]:
        """Up to `limit` keys with a live lease or a caller waiting, after `after`, in order.

        Only keys starting with `prefix`; each summarized as `summarize` does, judged at
        `now_us()`.
        """
        ...

    def list_holders(self, project_id: int, key: str, *, after: int, limit: int) -> list[Lease]:
        """Up to `limit` of the key's live leases with fencing tokens above `after`, in order."""
        ...


class WriteTx(ReadTx, GroupWrites, Protocol):
    """A read-write transaction (and the group work of one: `storage._groups`).

    `load_lock` also locks the key's row until commit, and `claim_request` serialises
    concurrent requests with the same request id. Once it has committed, `committed_us` is the
    storage clock read after the commit (None before).
    """

    committed_us: int | None
    # The storage's `monotonic` clock just before the request for `committed_us` was sent: an
    # answer judged by `committed_us` counts every delay since then (the round trip's answer
    # may have been held for any time), never only from when the result came back.
    committed_at: float | None

    def load_locks(
        self,
        project_id: int,
        keys: Sequence[str],
        *,
        owners: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, LockRow | None]:
        """The rows of several keys, each locked until commit like `load_lock`'s.

        The caller names the keys in sorted order, so that transactions that lock several
        keys lock them in one order and never wait for each other in a circle. Call it before
        the first `now_us`: the transaction's clock is read once all these locks are granted.

        A key in `owners` comes with only the leases of the owner tokens named for it (a
        partial row: what renewing those leases reads and writes, however many others the key
        has); `live_counts` tells of the rest.
        """
        ...

    def live_counts(self, project_id: int, key: str) -> tuple[int, int | None]:
        """How many leases of the key are live now, and the highest fencing token among them."""
        ...

    def save_lock(self, row: LockRow, loaded: LockRow | None) -> None:
        """Write the key's row and leases as `row` says, `loaded` being what was read.

        Leases only in `loaded` (or expired) are deleted; new or changed ones are written.
        """
        ...

    def save_locks(self, changes: Sequence[tuple[LockRow, LockRow | None]]) -> None:
        """`save_lock` for each (row, loaded) pair, rows of different keys, at once."""
        ...

    def commit_before(self, bound_us: int) -> None:
        """Commit only while the storage clock is before `bound_us`, else raise StaleClock.

        Checked inside the transaction, on the storage clock, just before COMMIT: a
        transaction that renewed (or relabelled, or took) a lease live at its clock read must
        not commit once that lease's old expiry has passed, since readers have seen it end
        meanwhile. Several calls: the earliest bound holds.
        """
        ...

    def key_count(self, project_id: int) -> int:
        """How many keys the project has stored (a key's quota is counted on them)."""
        ...

    def claim_request(self, project_id: int, request_id: str) -> StoredOutcome | None:
        """The unexpired stored outcome for this request id, or None after reserving the id.

        Reserving makes a concurrent request with the same id wait for this transaction.
        """
        ...

    def save_outcome(self, project_id: int, request_id: str, outcome: StoredOutcome) -> None:
        """Store (or replace an expired) outcome for this request id."""
        ...

    def queued(self, project_id: int, key: str, limit: int) -> list[Waiter]:
        """Up to `limit` waiters of the key that are in line (waiting or reserved), in order."""
        ...

    def find_waiter(self, project_id: int, key: str, owner_token: str) -> Waiter | None:
        """The key's waiter row for this owner token, in any state."""
        ...

    def add_waiter(
        self,
        project_id: int,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        server_id: str,
        *,
        label: str | None = None,
        shared: bool = False,
        seq: int | None = None,
    ) -> int:
        """Put a new waiter at the end of the key's queue; return its `seq`.

        With `seq`, at that place instead: one this server's request held before its row was
        purged (a `seq` is never given to another waiter).
        """
        ...

    def update_waiter(
        self,
        seq: int,
        *,
        state: WaiterState,
        until_us: int | None,
        server_id: str,
        ttl_seconds: float,
        label: str | None = None,
        shared: bool = False,
    ) -> None:
        """Change a waiter's state (its place, `seq`, stays)."""
        ...

    def delete_waiter(self, project_id: int, key: str, owner_token: str) -> None:
        """Take the owner token's waiter (if any) out of the key's queue for good."""
        ...

    def touch_server(self, server_id: str, alive_until_us: int) -> None:
        """Record that `server_id` is alive until `alive_until_us` (its heartbeat)."""
        ...

    def others_alive(self, server_id: str) -> bool:
        """Whether any server but `server_id` has a heartbeat that has not run out."""
        ...

    def announce(self, server_id: str, seq: int) -> None:
        """Tell `server_id`, once this transaction commits, that waiter `seq` was reserved."""
        ...

    def watched_by(self, project_id: int, key: str) -> tuple[str, ...]:
        """The servers that asked to hear of the key's changes (read under its row lock).

        Backends that cannot push (SQLite) return none: their servers poll instead.
        """
        ...

    def watch(self, project_id: int, key: str, server_id: str, generation: int) -> None:
        """Record that `server_id` asks to hear of the key's changes (`announce_change`).

        Made in a transaction that loaded (so locked) the key first: a change committed after
        it sees the record, one committed before it is seen by what the server reads next.
        """
        ...

    def announce_change(self, project_id: int, key: str) -> None:
        """Tell the servers watching the key, once this transaction commits, that it changed."""
        ...


class Storage(Protocol):
    """A lock database."""

    url_for_display: str
    # Whether other servers' `announce` calls reach `listen`; if not, servers poll.
    pushes_handoffs: bool
    # Whether operations are short local calls worth trying on the event loop with
    # may_block=False; False sends every operation to a worker thread.
    runs_inline: bool
    # How many transactions can usefully run at once (a pool's connections, SQLite's readers):
    # the server's slots for storage work (`_admission`).
    connections: int
    # The server's monotonic clock, in seconds (`time.monotonic`; a test's virtual clock):
    # `WriteTx.committed_at` is read on it, and the server measures an answer's age on it.
    monotonic: Callable[[], float]

    def write(
        self,
        *,
        may_block: bool = True,
        key: tuple[int, str] | None = None,
        on_locked: OnLocked | None = None,
    ) -> AbstractContextManager[WriteTx]:
        """Begin a read-write transaction.

        `key` is the (project id, key) whose row the transaction will load first, when known: a
        backend whose statements are network round trips locks it along with its first one, and
        then calls `on_locked` (others need not call it).
        """
        ...

    def read(self, *, may_block: bool = True) -> AbstractContextManager[ReadOnlyTx]:
        """Begin a read-only transaction."""
        ...

    async def synced(self, *, here: bool = False) -> None:
        """Return once every commit made so far is durable.

        A `write(may_block=True)` is durable when it returns; a `write(may_block=False)` may
        leave its durability to this (it must not wait), so answer nobody about it before this
        returns.
        `here` allows blocking the calling thread for it, when the caller has nothing else to
        do (one request in flight): that saves a hand-off to another thread and back.
        """
        ...

    def find_key(self, key_hash: bytes, *, may_block: bool = True) -> KeyRecord | None:
        """The key with this hash, if any."""
        ...

    def check(self) -> None:
        """Raise StorageUnavailable unless the database answers a query now."""
        ...

    # Key administration (storage/_keys.py, shared by both backends).

    def create_project_keys(
        self, project: str, anon_hash: bytes, service_hash: bytes, *, actor: str = ...
    ) -> None:
        """Create the project if new and add one anon and one service key to it."""
        ...

    def add_service_key(self, project: str, service_hash: bytes, *, actor: str) -> None:
        """Add a service key to an existing project; UnknownProject if there is none."""
        ...

    def list_keys(self, project: str | None = None) -> list[KeyInfo]:
        """Every key (of `project`, when given), never a secret."""
        ...

    def revoke_key(self, key_id: str, *, actor: str) -> tuple[KeyInfo, bool] | None:
        """Revoke a key by id: the key and whether this call revoked it; None if unknown."""
        ...

    def key_events(self, project: str | None = None) -> list[KeyEvent]:
        """The audit trail of key changes."""
        ...

    def record_key_uses(self, uses: Mapping[bytes, int]) -> None:
        """Move keys' "last used" times forward (key hash -> microseconds since the epoch)."""
        ...

    def purge_outcomes(self, limit: int) -> int:
        """Delete up to `limit` stored outcomes whose retention has ended; return how many."""
        ...

    def purge_leases(self, limit: int) -> list[ExpiredLease]:
        """Delete expired leases of up to `limit` keys (some), each key's version kept.

        Transactions drop the expired leases of the keys they save; this bounds the storage
        of keys nobody touches after their leases expire. Returns the leases deleted.
        """
        ...

    def purge_members(self, limit: int) -> int:
        """Delete expired group members (some), each group's version kept; return how many.

        Joins and leaves sweep a few of their group's expired members; this bounds the
        storage of groups nobody writes to after their members expire.
        """
        ...

    def purge_keys(self, idle_us: int, limit: int) -> int:
        """Delete up to `limit` keys without a lease or a waiter, unchanged for `idle_us`.

        Each raises its project's floor (`LockRow.purged`): used again, the key goes on from
        there, its fencing tokens and version never going back. Returns how many.
        """
        ...

    def purge_waiters(self, grace_us: int, limit: int, *, judges: Callable[[int], bool]) -> int:
        """Delete up to `limit` waiters that are gone for good; return how many.

        Gone: away past `until_us`, or held by a server whose heartbeat ran out more than
        `grace_us` ago (and heartbeat rows and watch records of such servers). Only if
        `judges(now)`, asked at the purge's own clock, says lapsed heartbeats may be judged
        now (the purging server's `Pulse`); else nothing is deleted and 0 returned.
        """
        ...

    def unwatch(self, server_id: str, watches: Sequence[tuple[int, str, int]]) -> None:
        """Forget `server_id`'s watches of these (project id, key, generation)s.

        Only a record still of that generation goes: one made again since stays.
        """
        ...

    async def listen(self, listener: Listener) -> None:
        """Deliver other servers' `announce` and `announce_change` calls until cancelled.

        Calls `listener.connected` each time the listening connection is (re)established,
        since announcements made while it was down are lost. Backends that cannot push
        (SQLite) return at once; the server then polls.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...
