"""The storage interface every backend implements, and the records that cross it.

A backend provides transactions; the lock rules live once, in `volcano_server._service`, written
against `WriteTx` and `ReadTx`. Each lock operation is one short transaction: `write()` begins it,
the service reads and writes rows through the handle, and leaving the `with` block commits (or
rolls back on an exception). Time inside a transaction is the storage's clock (`now_us`), in
integer microseconds since the Unix epoch, read once per transaction.

Backends raise `StorageUnavailable` when the database cannot be reached or locked in time; the
server answers that with 503 and a `Retry-After`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal, Protocol

import attrs

if TYPE_CHECKING:
    from ._keys import KeyEvent, KeyInfo

__all__ = [
    "KeyKind",
    "KeyRecord",
    "LockRow",
    "ProjectKeys",
    "ReadTx",
    "Storage",
    "StorageUnavailable",
    "StoredOutcome",
    "WriteTx",
]

KeyKind = Literal["anon", "service"]


class StorageUnavailable(Exception):
    """The database cannot be reached, or stayed locked past the busy timeout."""


class WouldBlock(Exception):
    """Raised instead of waiting while NONBLOCKING is set; nothing was changed."""


# Set by the server while it runs storage work on its event loop: a backend that would have to
# wait (for a lock, a pooled connection, another process) raises WouldBlock at once instead,
# before it changes anything, and the server repeats the work in a worker thread.
NONBLOCKING: ContextVar[bool] = ContextVar("volcano_storage_nonblocking", default=False)


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
class LockRow:
    """A key's row.

    `fencing_token` is the last one issued; the lease is live while the owner is set and
    `expires_at_us` is after the storage clock's now.
    """

    project_id: int
    key: str
    fencing_token: int
    owner_token: str | None
    expires_at_us: int | None
    ttl_seconds: float | None

    def live(self, now_us: int) -> bool:
        """Whether this row holds a lease that has not expired at `now_us`."""
        return (
            self.owner_token is not None
            and self.expires_at_us is not None
            and now_us < self.expires_at_us
        )


@attrs.frozen
class StoredOutcome:
    """An answer kept under a request id for idempotent replay."""

    fingerprint: bytes
    status: int
    body: bytes
    retry_after: int | None
    expires_at_us: int


class ReadTx(Protocol):
    """A read-only snapshot."""

    def now_us(self) -> int:
        """The storage clock at the start of this transaction."""
        ...

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        """The key's row, if the key was ever acquired."""
        ...


class WriteTx(ReadTx, Protocol):
    """A read-write transaction.

    `load_lock` also locks the key's row until commit, and `claim_request` serialises
    concurrent requests with the same request id.
    """

    def save_lock(self, row: LockRow) -> None:
        """Insert or update the key's row."""
        ...

    def claim_request(self, project_id: int, request_id: str) -> StoredOutcome | None:
        """The unexpired stored outcome for this request id, or None after reserving the id.

        Reserving makes a concurrent request with the same id wait for this transaction.
        """
        ...

    def save_outcome(self, project_id: int, request_id: str, outcome: StoredOutcome) -> None:
        """Store (or replace an expired) outcome for this request id."""
        ...


class Storage(Protocol):
    """A lock database."""

    url_for_display: str
    # Whether operations are short local calls worth running on the event loop (honouring
    # NONBLOCKING); False sends every operation to a worker thread.
    runs_inline: bool

    def write(self) -> AbstractContextManager[WriteTx]:
        """Begin a read-write transaction."""
        ...

    def read(self) -> AbstractContextManager[ReadTx]:
        """Begin a read-only transaction."""
        ...

    def find_key(self, key_hash: bytes) -> KeyRecord | None:
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

    def close(self) -> None:
        """Release connections."""
        ...
