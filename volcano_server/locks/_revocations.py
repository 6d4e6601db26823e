"""What the waiting code asks of the keys: has a waiter's service key been revoked?

`http._auth.Authenticator` answers it; the lock code knows only this question.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NoRevocations", "Revocations"]


class Revocations(Protocol):
    """What the waiting code asks of the keys: has a waiter's service key been revoked?"""

    def revoked(self, digest: bytes, *, may_block: bool = True) -> bool:
        """Whether the key with this hash is revoked or gone (may read the database)."""
        ...

    def known_revoked(self, digest: bytes) -> bool:
        """Whether it is already known revoked (no database read)."""
        ...


class NoRevocations:
    """For transactions run without keys (storage tests): nothing is ever revoked."""

    def revoked(self, digest: bytes, *, may_block: bool = True) -> bool:
        """Never."""
        return False

    def known_revoked(self, digest: bytes) -> bool:
        """Never."""
        return False
