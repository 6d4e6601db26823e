"""LockLease, LockState and ForceReleaseResult: frozen, UTC, and quiet about owner tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest

import volcano
from tests.unit.sdk.support import EXPIRES, TOKEN


def make_lease(**changes: object) -> volcano.LockLease:
    fields: dict[str, object] = {
        "key": "daily-report",
        "owner_token": TOKEN,
        "fencing_token": 42,
        "expires_at": EXPIRES,
        "ttl_seconds": 30.0,
    }
    fields.update(changes)
    return volcano.LockLease(**fields)  # type: ignore[arg-type]


class TestLockLease:
    @pytest.mark.parametrize(
        "field", ["key", "owner_token", "fencing_token", "expires_at", "ttl_seconds"]
    )
    def test_frozen(self, field: str) -> None:
        """Assigning to any field raises; a lease never changes."""
        lease = make_lease()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(lease, field, None)
        assert lease == make_lease()

    def test_no_attribute_can_be_added(self) -> None:
        """Leases have slots: no stray attributes."""
        with pytest.raises((AttributeError, TypeError)):
            make_lease().extra = 1  # type: ignore[attr-defined]

    def test_repr_redacts_the_owner_token(self) -> None:
        """repr() shows owner_token=<redacted>, never the token."""
        text = repr(make_lease())
        assert TOKEN not in text
        assert "owner_token=<redacted>" in text
        assert "fencing_token=42" in text
        assert TOKEN not in str(make_lease())

    def test_expires_at_becomes_utc(self) -> None:
        """A timestamp with another offset is stored as the same instant in UTC."""
        plus_two = timezone(timedelta(hours=2))
        lease = make_lease(expires_at=datetime(2026, 1, 1, 2, 0, tzinfo=plus_two))
        assert lease.expires_at == datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
        assert lease.expires_at.tzinfo is UTC

    def test_naive_expires_at_is_refused(self) -> None:
        """A naive datetime has no instant; it is refused."""
        with pytest.raises(volcano.InvalidArgumentError, match="timezone-aware"):
            make_lease(expires_at=datetime(2026, 1, 1))

    def test_equal_leases_hash_equal(self) -> None:
        """Leases are values: equal fields, equal and hashable."""
        assert make_lease() == make_lease()
        assert len({make_lease(), make_lease()}) == 1
        assert make_lease() != make_lease(fencing_token=43)


class TestLockState:
    def test_frozen_and_utc(self) -> None:
        """LockState is frozen and its expires_at UTC (or None)."""
        state = volcano.LockState(key="k", held=False, expires_at=None, fencing_token=None)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            state.held = True  # type: ignore[misc]
        held = volcano.LockState(
            key="k",
            held=True,
            expires_at=datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=-5))),
            fencing_token=3,
        )
        assert held.expires_at == datetime(2026, 1, 1, 5, tzinfo=UTC)


class TestForceReleaseResult:
    def test_frozen(self) -> None:
        """ForceReleaseResult is frozen."""
        result = volcano.ForceReleaseResult(key="k", released=True, fencing_token=3)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            result.released = False  # type: ignore[misc]
        assert repr(result) == (
            "ForceReleaseResult(key='k', released=True, fencing_token=3, released_count=0)"
        )
