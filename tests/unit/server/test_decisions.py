"""The lock rules as pure functions of (row, now): no database, no clock."""

from __future__ import annotations

import pytest

from volcano_server._rules import (
    Decision,
    decide_acquire,
    decide_force_release,
    decide_release,
    decide_renew,
    lock_state,
)
from volcano_server._wire import rfc3339_us
from volcano_server.storage import LockRow

NOW = 1_780_000_000_000_000
A, B = "0F8FAD5B-D9CB-469F-A165-70867728950E", "7c9e6679-7425-40de-944b-e07fc1f90ae7"


def held(owner: str = A, fence: int = 7, left_us: int = 10_000_000) -> LockRow:
    return LockRow(1, "k", fence, owner, NOW + left_us, 30.0)


def acquire(row: LockRow | None, ttl: float = 1, owner: str = A) -> Decision:
    return decide_acquire(row, NOW, project_id=1, key="k", owner_token=owner, ttl=ttl)


def renew(row: LockRow | None, owner: str, fence: int, ttl: float = 5) -> Decision:
    return decide_renew(row, NOW, key="k", owner_token=owner, fencing_token=fence, ttl=ttl)


def release(row: LockRow | None, owner: str, fence: int) -> Decision:
    return decide_release(row, NOW, key="k", owner_token=owner, fencing_token=fence)


class TestAcquire:
    def test_new_key(self) -> None:
        """A never-acquired key gets token 1 expiring at now + ttl."""
        decision = acquire(None, 2.5)
        assert decision.row == LockRow(1, "k", 1, A, NOW + 2_500_000, 2.5)
        assert decision.status == 200

    def test_expiry_instant_is_already_expired(self) -> None:
        """A lease is live strictly before expires_at: at that instant the key is free."""
        decision = acquire(held(B, left_us=0), 1)
        assert decision.status == 200
        assert decision.row is not None
        assert decision.row.fencing_token == 8

    def test_live_other_owner(self) -> None:
        """One microsecond left is still held, with Retry-After 1."""
        decision = acquire(held(B, left_us=1), 1)
        assert decision.refusal is not None
        assert (decision.status, decision.row) == (409, None)
        assert (decision.refusal.code, decision.refusal.retry_after) == ("lock_held", 1)

    @pytest.mark.parametrize(
        ("left_us", "retry_after"), [(1_000_000, 1), (1_000_001, 2), (29_500_000, 30)]
    )
    def test_retry_after_rounds_up(self, left_us: int, retry_after: int) -> None:
        """Retry-After is the whole seconds left, rounded up."""
        refusal = acquire(held(B, left_us=left_us), 1).refusal
        assert refusal is not None
        assert refusal.retry_after == retry_after

    def test_own_live_lease_is_extended_not_reissued(self) -> None:
        """The holder's own token keeps the fencing token and gets a new expiry."""
        decision = acquire(held(A), 60)
        assert decision.row == LockRow(1, "k", 7, A, NOW + 60_000_000, 60)

    def test_released_key_continues_tokens(self) -> None:
        """A vacated row keeps counting from its last token."""
        row = LockRow(1, "k", 41, None, None, None)
        assert acquire(row, 1).row.fencing_token == 42  # type: ignore[union-attr]

    def test_exhausted_tokens_never_wrap(self) -> None:
        """At 2^53-1 no further token is issued (an error, never a reused or oversized token)."""
        with pytest.raises(RuntimeError):
            acquire(LockRow(1, "k", 2**53 - 1, None, None, None), 1)


class TestRenewRelease:
    @pytest.mark.parametrize(
        ("row", "owner", "fence", "why"),
        [
            (None, A, 7, "never been acquired"),
            (held(A, 8), A, 7, "held under fencing token 8"),
            (held(B, 7), A, 7, "owner token does not match"),
            (held(A, 7, left_us=0), A, 7, "no lease is live"),
        ],
    )
    def test_refusals_explain_why(
        self, row: LockRow | None, owner: str, fence: int, why: str
    ) -> None:
        """renew and release act only on the live lease matching both tokens, and say why not."""
        for decision in (
            renew(row, owner, fence),
            release(row, owner, fence),
        ):
            assert decision.refusal is not None
            assert (decision.status, decision.refusal.code, decision.row) == (
                409,
                "lease_not_held",
                None,
            )
            assert why in decision.refusal.message

    def test_renew_keeps_token(self) -> None:
        """Renew moves expiry to now + ttl, even shorter than before."""
        assert renew(held(A), A, 7, ttl=1).row == LockRow(1, "k", 7, A, NOW + 1_000_000, 1)

    def test_release_vacates_but_remembers_token(self) -> None:
        """Release clears the owner and expiry and keeps the fencing token."""
        decision = release(held(A), A, 7)
        assert (decision.status, decision.row) == (204, LockRow(1, "k", 7, None, None, None))


class TestForceReleaseAndState:
    def test_force_release_live(self) -> None:
        """A live lease is removed and its token reported."""
        decision = decide_force_release(held(B), NOW, key="k")
        assert decision.payload == {"key": "k", "released": True, "fencing_token": 7}

    def test_force_release_expired(self) -> None:
        """An expired lease is not live: nothing is released, nothing written."""
        decision = decide_force_release(held(B, left_us=-1), NOW, key="k")
        assert (decision.payload, decision.row) == (
            {"key": "k", "released": False, "fencing_token": None},
            None,
        )

    def test_state_never_has_owner(self) -> None:
        """get reports held, expiry and token, never the owner token."""
        state = lock_state(held(A), NOW, "k")
        assert state == {
            "key": "k",
            "held": True,
            "expires_at": rfc3339_us(NOW + 10_000_000),
            "fencing_token": 7,
        }
        assert A not in str(state)


class TestTimestamps:
    @pytest.mark.parametrize(
        ("us", "text"),
        [
            (0, "1970-01-01T00:00:00.000000Z"),
            (1_780_000_000_123_456, "2026-05-28T20:26:40.123456Z"),
            (1, "1970-01-01T00:00:00.000001Z"),
        ],
    )
    def test_rfc3339_exact(self, us: int, text: str) -> None:
        """Microsecond timestamps are written exactly, in UTC with Z."""
        assert rfc3339_us(us) == text
