"""The lock rules as pure functions of (row, now): no database, no clock."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_server.locks._rules import (
    HOLDERS_INLINE,
    MAX_SHARED_HOLDERS,
    Decision,
    Reach,
    decide_acquire,
    decide_force_release,
    decide_handoff,
    decide_release,
    decide_renew,
    decide_renewals,
    has_room,
    lease_check,
    lock_state,
    versioned,
    without,
)
from volcano_server.storage import Lease, LockRow, LockSummary, Waiter
from volcano_server.wire._errors import ApiError
from volcano_server.wire._wire import parse_rfc3339_us, rfc3339_us

NOW = 1_780_000_000_000_000
SECOND = 1_000_000
A, B = "0F8FAD5B-D9CB-469F-A165-70867728950E", "7c9e6679-7425-40de-944b-e07fc1f90ae7"
C, D = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"


def lease(owner: str = A, fence: int = 7, left_us: int = 10 * SECOND) -> Lease:
    return Lease(fence, owner, NOW + left_us, 30.0)


def held(owner: str = A, fence: int = 7, left_us: int = 10 * SECOND) -> LockRow:
    return LockRow(1, "k", fence, 1, (lease(owner, fence, left_us),))


def semaphore(*leases: Lease, limit: int = 3) -> LockRow:
    return LockRow(1, "k", max(x.fencing_token for x in leases), limit, leases)


def summary(row: LockRow, waiting: int = 0) -> LockSummary:
    return LockSummary.of(row, NOW, waiting, holders=HOLDERS_INLINE)


def acquire(row: LockRow | None, ttl: float = 1, owner: str = A, limit: int = 1) -> Decision:
    return decide_acquire(row, NOW, project_id=1, key="k", owner_token=owner, ttl=ttl, limit=limit)


def renew(row: LockRow | None, owner: str, fence: int, ttl: float = 5) -> Decision:
    return decide_renew(row, NOW, key="k", owner_token=owner, fencing_token=fence, ttl=ttl)


def release(row: LockRow | None, owner: str, fence: int) -> Decision:
    return decide_release(row, NOW, key="k", owner_token=owner, fencing_token=fence)


class TestAcquire:
    def test_new_key(self) -> None:
        """A never-acquired key gets token 1 expiring at now + ttl, granted now."""
        decision = acquire(None, 2.5)
        granted = Lease(1, A, NOW + 2_500_000, 2.5, granted_at_us=NOW)
        assert decision.row == LockRow(1, "k", 1, 1, (granted,))
        assert decision.done

    def test_expiry_instant_is_already_expired(self) -> None:
        """A lease is live strictly before expires_at: at that instant the key is free."""
        decision = acquire(held(B, left_us=0), 1)
        assert decision.done
        assert decision.row is not None
        assert decision.row.fencing_token == 8
        assert [x.owner_token for x in decision.row.leases] == [A]  # the expired one dropped

    def test_live_other_owner(self) -> None:
        """One microsecond left is still held, with Retry-After 1."""
        decision = acquire(held(B, left_us=1), 1)
        assert decision.refusal is not None
        assert (decision.done, decision.row) == (False, None)
        assert (decision.refusal.reason, decision.refusal.retry_after) == ("lock_held", 1)

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
        assert decision.row == LockRow(1, "k", 7, 1, (Lease(7, A, NOW + 60_000_000, 60),))

    def test_extending_or_renewing_keeps_the_grant_time(self) -> None:
        """The hold is measured from the first grant: re-acquiring and renewing keep its date."""
        row = LockRow(1, "k", 7, 1, (attrs.evolve(lease(A), granted_at_us=NOW - 5 * SECOND),))
        extended = acquire(row, 60).row
        renewed = renew(row, A, 7).row
        assert extended is not None
        assert renewed is not None
        assert [x.granted_at_us for x in (*extended.leases, *renewed.leases)] == [
            NOW - 5 * SECOND
        ] * 2

    def test_released_key_continues_tokens(self) -> None:
        """A key with no lease keeps counting from its last token."""
        row = LockRow(1, "k", 41)
        assert acquire(row, 1).row.fencing_token == 42  # type: ignore[union-attr]

    def test_exhausted_tokens_never_wrap(self) -> None:
        """At 2^53-1 no further token is issued (an error, never a reused or oversized token)."""
        with pytest.raises(RuntimeError):
            acquire(LockRow(1, "k", 2**53 - 1), 1)


class TestSemaphore:
    def test_up_to_the_limit_each_with_the_next_token(self) -> None:
        """With limit 3, three owners hold at once, tokens 1, 2, 3; the fourth is refused."""
        row = None
        for owner in (A, B, C):
            decision = acquire(row, 10, owner, limit=3)
            assert decision.done
            row = decision.row
        assert row is not None
        assert [(x.owner_token, x.fencing_token) for x in row.leases] == [(A, 1), (B, 2), (C, 3)]
        refused = acquire(row, 10, D, limit=3)
        assert refused.refusal is not None
        assert (refused.refusal.reason, refused.refusal.retry_after) == ("lock_held", 10)
        assert "all 3 slots" in refused.refusal.message

    def test_retry_after_is_the_soonest_slot(self) -> None:
        """Retry-After counts to the first lease that ends."""
        row = semaphore(lease(A, 1, 9 * SECOND), lease(B, 2, 2 * SECOND), limit=2)
        refusal = acquire(row, 1, C, limit=2).refusal
        assert refusal is not None
        assert refusal.retry_after == 2

    def test_another_limit_while_in_use_is_a_mismatch(self) -> None:
        """A key in use with limit 3 refuses an acquire asking for 2, naming both; the body
        gives the key's limit as a field too."""
        refusal = acquire(semaphore(lease(A, 1)), 1, B, limit=2).refusal
        assert refusal is not None
        assert refusal.reason == "limit_mismatch"
        assert "limit 3" in refusal.message
        assert "limit 2" in refusal.message
        assert refusal.limit == 3
        error = ApiError.refused(refusal.reason, refusal.message, limit=refusal.limit)
        answered = json.loads(error.answer("7C9E6679-7425-40DE-944B-E07FC1F90AE7").body)
        assert (error.status, answered["error"]["limit"]) == (409, 3)

    def test_a_free_key_takes_a_new_limit(self) -> None:
        """Once every lease has ended, the next acquire sets the key's limit."""
        row = semaphore(lease(A, 5, left_us=0), limit=3)
        decision = acquire(row, 1, B, limit=1)
        assert decision.row is not None
        assert (decision.row.limit, decision.row.fencing_token) == (1, 6)

    def test_renew_and_release_act_on_the_callers_own_slot(self) -> None:
        """B's renew and release touch B's lease only."""
        row = semaphore(lease(A, 1), lease(B, 2))
        renewed = renew(row, B, 2, ttl=50).row
        assert renewed is not None
        assert [x.expires_at_us for x in renewed.leases] == [NOW + 10 * SECOND, NOW + 50 * SECOND]
        released = release(row, B, 2).row
        assert released is not None
        assert [x.owner_token for x in released.leases] == [A]
        assert released.fencing_token == 2

    def test_force_release_ends_every_slot(self) -> None:
        """Force release removes every live lease, with the count and the highest token."""
        row = semaphore(lease(A, 4), lease(B, 6), lease(C, 5, left_us=-1))
        decision = decide_force_release(row, NOW, key="k")
        assert decision.payload == {
            "key": "k",
            "released": True,
            "fencing_token": 6,
            "released_count": 2,
        }
        assert decision.row is not None
        assert (decision.row.leases, decision.row.fencing_token) == ((), 6)


class TestRenewRelease:
    @pytest.mark.parametrize(
        ("row", "owner", "fence", "why"),
        [
            (None, A, 7, "never been acquired"),
            (held(A, 8), A, 7, "this owner token holds fencing token 8"),
            (held(B, 8), A, 8, "owner token does not match"),
            (held(B, 7), A, 6, "held under fencing token 7"),
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
            assert (decision.refusal.reason, decision.row) == ("lease_not_held", None)
            assert why in decision.refusal.message

    def test_renew_keeps_token(self) -> None:
        """Renew moves expiry to now + ttl, even shorter than before."""
        assert renew(held(A), A, 7, ttl=1).row == LockRow(
            1, "k", 7, 1, (Lease(7, A, NOW + 1_000_000, 1),)
        )

    def test_release_ends_the_lease_but_remembers_token(self) -> None:
        """Release removes the lease and keeps the key's last fencing token."""
        decision = release(held(A), A, 7)
        assert decision.done
        assert (decision.payload, decision.row) == (None, LockRow(1, "k", 7, 1, ()))


class TestHandoff:
    FREED = LockRow(1, "k", 41)

    @staticmethod
    def waiter(ttl: float = 30.0) -> Waiter:
        return Waiter(9, 1, "k", A, ttl, "server-b", "waiting", None, None, True)

    def test_here_gets_the_full_lease_at_once(self) -> None:
        """A waiter held by this server gets the next token and a ttl counted from now."""
        handoff = decide_handoff(
            self.FREED, NOW, self.waiter(), Reach.HERE, reserve_us=2 * SECOND, rejoin_us=5 * SECOND
        )
        assert handoff.waiter_state == "granted"
        assert handoff.lease == Lease(42, A, NOW + 30 * SECOND, 30.0, granted_at_us=NOW)
        assert handoff.row == LockRow(1, "k", 42, 1, (handoff.lease,))

    def test_there_gets_a_short_reservation(self) -> None:
        """A waiter held by another server gets the slot reserved for 2 s, in its own name
        (undated: it is granted only when its server takes it)."""
        handoff = decide_handoff(
            self.FREED, NOW, self.waiter(), Reach.THERE, reserve_us=2 * SECOND, rejoin_us=5 * SECOND
        )
        assert (handoff.waiter_state, handoff.until_us) == ("reserved", NOW + 2 * SECOND)
        assert handoff.lease == Lease(42, A, NOW + 2 * SECOND, 30.0)

    def test_a_reservation_never_outlasts_the_ttl(self) -> None:
        """A 0.5 s lease is reserved for 0.5 s at most."""
        handoff = decide_handoff(
            self.FREED,
            NOW,
            self.waiter(ttl=0.5),
            Reach.THERE,
            reserve_us=2 * SECOND,
            rejoin_us=5 * SECOND,
        )
        assert handoff.until_us == NOW + SECOND // 2

    def test_gone_steps_out_and_keeps_its_place_a_while(self) -> None:
        """A waiter whose request left changes nothing but its own state."""
        handoff = decide_handoff(
            self.FREED, NOW, self.waiter(), Reach.GONE, reserve_us=2 * SECOND, rejoin_us=5 * SECOND
        )
        assert (handoff.row, handoff.waiter_state) == (None, "away")
        assert handoff.until_us == NOW + 5 * SECOND

    def test_a_slot_of_a_semaphore_keeps_the_other_leases(self) -> None:
        """A freed slot of a limit-2 key goes to the waiter beside the other holder."""
        row = semaphore(lease(B, 41), limit=2)
        handoff = decide_handoff(
            row, NOW, self.waiter(), Reach.HERE, reserve_us=2 * SECOND, rejoin_us=5 * SECOND
        )
        assert handoff.row is not None
        assert [(x.owner_token, x.fencing_token) for x in handoff.row.leases] == [(B, 41), (A, 42)]


class TestForceReleaseAndState:
    def test_force_release_live(self) -> None:
        """A live lease is removed and its token reported."""
        decision = decide_force_release(held(B), NOW, key="k")
        assert decision.payload == {
            "key": "k",
            "released": True,
            "fencing_token": 7,
            "released_count": 1,
        }

    def test_force_release_expired(self) -> None:
        """An expired lease is not live: nothing is released, nothing written."""
        decision = decide_force_release(held(B, left_us=-1), NOW, key="k")
        assert (decision.payload, decision.row) == (
            {"key": "k", "released": False, "fencing_token": None, "released_count": 0},
            None,
        )

    def test_state_never_has_owner(self) -> None:
        """get reports held, expiry and token, never the owner token."""
        state = lock_state(summary(held(A), waiting=2), "k")
        assert state == {
            "key": "k",
            "held": True,
            "expires_at": rfc3339_us(NOW + 10_000_000),
            "fencing_token": 7,
            "limit": 1,
            "holders": [
                {
                    "fencing_token": 7,
                    "expires_at": rfc3339_us(NOW + 10_000_000),
                    "label": None,
                    "mode": "exclusive",
                }
            ],
            "holder_count": 1,
            "waiters": 2,
            "version": 0,
        }
        assert A not in str(state)

    def test_state_of_a_semaphore(self) -> None:
        """Holders soonest expiry first; expires_at the soonest; fencing_token the highest."""
        row = semaphore(lease(A, 3, 9 * SECOND), lease(B, 4, 2 * SECOND), lease(C, 2, -1))
        state = lock_state(summary(row), "k")
        assert [h["fencing_token"] for h in state["holders"]] == [4, 3]
        assert state["holder_count"] == 2
        assert (state["expires_at"], state["fencing_token"], state["limit"]) == (
            rfc3339_us(NOW + 2 * SECOND),
            4,
            3,
        )

    def test_a_key_never_acquired(self) -> None:
        """No row: not held, no token, version 0, nobody holding or waiting."""
        state = lock_state(None, "k")
        assert (state["held"], state["fencing_token"], state["version"]) == (False, None, 0)
        assert (state["holders"], state["holder_count"], state["waiters"]) == ([], 0, 0)

    def test_a_crowded_semaphore_shows_the_holders_ending_soonest(self) -> None:
        """Of 50 holders the state shows the 20 ending soonest, soonest first, and counts all
        50: its size does not grow with the key's holders."""
        leases = [lease(str(n), n + 1, (60 - n) * SECOND) for n in range(50)]
        state = lock_state(summary(semaphore(*leases)), "k")
        assert [h["fencing_token"] for h in state["holders"]] == list(range(50, 30, -1))
        assert (state["holder_count"], state["fencing_token"]) == (50, 50)

    def test_a_free_key_reports_limit_one(self) -> None:
        """A key with no live lease and nobody waiting has no limit of its own (1)."""
        state = lock_state(summary(semaphore(lease(A, 3, -1))), "k")
        assert (state["held"], state["limit"], state["holders"], state["fencing_token"]) == (
            False,
            1,
            [],
            3,
        )


class TestLeaseCheck:
    @pytest.mark.parametrize(
        ("token", "live"), [(3, True), (4, True), (2, False), (5, False), (99, False)]
    )
    def test_live_only_for_a_live_lease(self, token: int, live: bool) -> None:
        """Live for a live lease's token; not for an expired, ended or never-issued one."""
        row = semaphore(lease(A, 3), lease(B, 4), lease(C, 2, -1))
        check = lease_check(row, NOW, "k", token)
        assert (check["live"], check["fencing_token"]) == (live, token)
        assert (check["expires_at"] is not None) is live

    def test_never_acquired(self) -> None:
        """A key never acquired: no token is live."""
        assert lease_check(None, NOW, "k", 1)["live"] is False


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


class TestParse:
    @pytest.mark.parametrize("us", [0, 1, 1_780_000_000_123_456, 4_102_444_800_000_000])
    def test_round_trip(self, us: int) -> None:
        """What rfc3339_us writes, parse_rfc3339_us reads back to the microsecond."""
        assert parse_rfc3339_us(rfc3339_us(us)) == us


class TestLabels:
    def test_an_acquire_labels_its_lease(self) -> None:
        """A grant carries the acquire's label; an empty label is none."""
        labelled = decide_acquire(
            None, NOW, project_id=1, key="k", owner_token=A, ttl=1, label="host:1"
        )
        assert labelled.lease is not None
        assert labelled.lease.label == "host:1"
        empty = decide_acquire(None, NOW, project_id=1, key="k", owner_token=A, ttl=1, label="")
        assert empty.lease is not None
        assert empty.lease.label is None

    def test_the_holders_own_acquire_sets_the_label(self) -> None:
        """The live holder acquiring again sets the label it sends (none: none)."""
        row = LockRow(1, "k", 7, 1, (Lease(7, A, NOW + SECOND, 30.0, "old"),))
        again = decide_acquire(row, NOW, project_id=1, key="k", owner_token=A, ttl=1, label="new")
        assert again.lease is not None
        assert (again.lease.fencing_token, again.lease.label) == (7, "new")
        bare = decide_acquire(row, NOW, project_id=1, key="k", owner_token=A, ttl=1)
        assert bare.lease is not None
        assert bare.lease.label is None

    @pytest.mark.parametrize(("sent", "kept"), [(None, "old"), ("new", "new"), ("", None)])
    def test_a_renew_keeps_or_replaces_the_label(self, sent: str | None, kept: str | None) -> None:
        """Without a label the lease keeps its own; with one it takes it; empty clears it."""
        row = LockRow(1, "k", 7, 1, (Lease(7, A, NOW + SECOND, 30.0, "old"),))
        decision = decide_renew(
            row, NOW, key="k", owner_token=A, fencing_token=7, ttl=5, label=sent
        )
        assert decision.lease is not None
        assert decision.lease.label == kept

    def test_a_waiters_label_goes_with_its_lease(self) -> None:
        """A hand-off grants the waiter's label, here or reserved for another server."""
        waiter = Waiter(9, 1, "k", A, 30.0, "server-b", "waiting", None, "w", True)
        for reach in (Reach.HERE, Reach.THERE):
            handoff = decide_handoff(
                LockRow(1, "k", 41), NOW, waiter, reach, reserve_us=SECOND, rejoin_us=SECOND
            )
            assert handoff.lease is not None
            assert handoff.lease.label == "w"


class TestVersions:
    def test_a_grant_and_an_end_move_it_by_one_each(self) -> None:
        """A first grant makes version 1; a release of it makes 2."""
        granted = acquire(None)
        assert granted.row is not None
        first = versioned(None, granted.row)
        assert first.version == 1
        released = release(first, A, 1)
        assert released.row is not None
        assert versioned(first, released.row).version == 2

    def test_a_renewal_keeping_the_label_leaves_it(self) -> None:
        """Only the expiry moved: no change of the holders."""
        row = attrs.evolve(held(A), version=5)
        renewed = renew(row, A, 7)
        assert renewed.row is not None
        assert versioned(row, renewed.row).version == 5

    def test_a_label_change_moves_it(self) -> None:
        """A renewal with a new label is one change."""
        row = attrs.evolve(held(A), version=5)
        decision = decide_renew(row, NOW, key="k", owner_token=A, fencing_token=7, ttl=5, label="x")
        assert decision.row is not None
        assert versioned(row, decision.row).version == 6

    def test_a_force_release_moves_it_once_per_lease(self) -> None:
        """Three live leases force-released: three changes."""
        row = semaphore(lease(A, 3), lease(B, 4), lease(C, 5))
        decision = decide_force_release(row, NOW, key="k")
        assert decision.row is not None
        assert versioned(row, decision.row).version == 3

    def test_an_expiry_moves_it_before_any_write(self) -> None:
        """A stored lease that expired counts at once, and a save that drops it keeps the
        version where it stood: it never goes back or jumps twice."""
        row = attrs.evolve(held(A, left_us=SECOND), version=4)
        assert row.version_at(NOW) == 4
        later = NOW + 2 * SECOND
        assert row.version_at(later) == 5
        granted = decide_acquire(row, later, project_id=1, key="k", owner_token=B, ttl=1)
        assert granted.row is not None
        saved = versioned(row, granted.row)
        assert saved.version_at(later) == 6  # the expiry (5), then the grant

    def test_state_reports_the_version_at_now(self) -> None:
        """get's version counts expired leases; a key never acquired is 0."""
        assert lock_state(None, "k")["version"] == 0
        row = attrs.evolve(held(A, left_us=-1), version=3)
        assert lock_state(summary(row), "k")["version"] == 4


def shared(owner: str, fence: int, left_us: int = 10 * SECOND) -> Lease:
    return Lease(fence, owner, NOW + left_us, 30.0, shared=True)


def readers(*leases: Lease) -> LockRow:
    return LockRow(1, "k", max(x.fencing_token for x in leases), 1, leases)


def take(
    row: LockRow | None,
    owner: str = A,
    *,
    is_shared: bool = True,
    limit: int = 1,
    line_waits: bool = False,
) -> Decision:
    return decide_acquire(
        row,
        NOW,
        project_id=1,
        key="k",
        owner_token=owner,
        ttl=10,
        limit=limit,
        shared=is_shared,
        line_waits=line_waits,
    )


class TestShared:
    def test_any_number_of_shared_holders_each_with_the_next_token(self) -> None:
        """Shared acquires of one key are all granted, tokens 1, 2, 3, each lease shared."""
        row = None
        for owner in (A, B, C):
            decision = take(row, owner)
            assert decision.done
            row = decision.row
        assert row is not None
        assert [(x.fencing_token, x.shared) for x in row.leases] == [(n, True) for n in (1, 2, 3)]
        assert row.limit == 1

    def test_an_exclusive_acquire_waits_for_every_shared_holder(self) -> None:
        """An exclusive acquire of a key held shared is lock_held, saying it waits for all."""
        decision = take(readers(shared(B, 1), shared(C, 2)), is_shared=False)
        assert decision.refusal is not None
        assert decision.refusal.reason == "lock_held"
        assert "held shared by 2 owners" in decision.refusal.message
        assert "waits for every one of them" in decision.refusal.message

    def test_a_shared_acquire_waits_for_an_exclusive_holder(self) -> None:
        """A shared acquire of a key held exclusive is lock_held."""
        decision = take(held(B))
        assert decision.refusal is not None
        assert decision.refusal.reason == "lock_held"
        assert decision.row is None

    def test_a_shared_acquire_never_passes_the_line(self) -> None:
        """With shared holders and someone waiting in line, a shared acquire is lock_held."""
        decision = take(readers(shared(B, 1)), line_waits=True)
        assert decision.refusal is not None
        assert decision.refusal.reason == "lock_held"
        assert "others wait in line first" in decision.refusal.message

    def test_the_holders_own_lease_keeps_its_mode(self) -> None:
        """Acquiring again with a shared holder's token, shared, gives its lease back."""
        decision = take(readers(shared(A, 1), shared(B, 2)))
        assert decision.lease is not None
        assert (decision.lease.fencing_token, decision.lease.shared) == (1, True)

    @pytest.mark.parametrize(("holds_shared", "held_as"), [(True, "shared"), (False, "exclusive")])
    def test_a_mode_change_by_the_same_owner_is_refused(
        self, holds_shared: bool, held_as: str
    ) -> None:
        """The owner asking for the other mode than its live lease's is mode_mismatch."""
        row = readers(shared(A, 4)) if holds_shared else held(A, 4)
        decision = take(row, is_shared=not holds_shared)
        assert decision.refusal is not None
        assert decision.refusal.reason == "mode_mismatch"
        assert f"holds k {held_as} (fencing token 4)" in decision.refusal.message

    def test_a_shared_acquire_of_a_semaphore_is_refused(self) -> None:
        """A shared acquire of a key in use as a semaphore is shared_with_limit, naming it."""
        decision = take(semaphore(lease(B, 1), limit=3))
        assert decision.refusal is not None
        assert decision.refusal.reason == "shared_with_limit"
        assert "semaphore of limit 3" in decision.refusal.message

    def test_a_limit_on_a_key_held_shared_is_refused(self) -> None:
        """An acquire with a limit of a key held shared is shared_with_limit, not a mismatch."""
        decision = take(readers(shared(B, 1)), is_shared=False, limit=3)
        assert decision.refusal is not None
        assert decision.refusal.reason == "shared_with_limit"
        assert "held shared" in decision.refusal.message

    def test_a_free_semaphore_key_may_be_taken_shared(self) -> None:
        """Once a semaphore's leases have ended, a shared acquire makes the key a lock."""
        decision = take(semaphore(lease(B, 5, left_us=0), limit=3))
        assert decision.row is not None
        assert (decision.row.limit, decision.row.fencing_token) == (1, 6)

    @pytest.mark.parametrize("row", [None, LockRow(1, "k", 4)], ids=["new", "free"])
    def test_a_request_asking_for_both_is_refused(self, row: LockRow | None) -> None:
        """shared with a limit above 1 is 409 shared_with_limit whatever the key (a key never
        acquired included), and nothing is written."""
        decision = take(row, limit=2)
        assert decision.refusal is not None
        assert (decision.refusal.reason, decision.row) == ("shared_with_limit", None)
        assert "a shared lease and a limit of 2" in decision.refusal.message

    def test_shared_holders_are_bounded(self) -> None:
        """At MAX_SHARED_HOLDERS shared holders a further shared acquire is lock_held."""
        row = readers(*(shared(str(n), n) for n in range(1, MAX_SHARED_HOLDERS + 1)))
        decision = take(row)
        assert decision.refusal is not None
        assert decision.refusal.reason == "lock_held"
        assert f"the most a key has at once ({MAX_SHARED_HOLDERS})" in decision.refusal.message
        assert take(without(row, NOW, row.leases[0])).done

    @pytest.mark.parametrize(
        ("row", "fits_shared", "fits_exclusive"),
        [
            (None, True, True),
            (LockRow(1, "k", 4), True, True),
            (held(B), False, False),
            (readers(shared(B, 1)), True, False),
            (semaphore(lease(B, 1), limit=2), False, True),
            (semaphore(lease(B, 1), lease(C, 2), limit=2), False, False),
            (readers(shared(B, 1, left_us=0)), True, True),
        ],
        ids=["new", "free", "exclusive", "shared", "slot-free", "slots-full", "expired"],
    )
    def test_room(self, row: LockRow | None, fits_shared: bool, fits_exclusive: bool) -> None:
        """Which new lease fits beside a key's live leases, in each mode."""
        assert has_room(row, NOW, shared=True) is fits_shared
        assert has_room(row, NOW, shared=False) is fits_exclusive

    def test_renewal_keeps_the_mode(self) -> None:
        """A renewed shared lease is still shared."""
        decision = renew(readers(shared(A, 3)), A, 3)
        assert decision.lease is not None
        assert decision.lease.shared

    def test_force_release_ends_every_shared_holder(self) -> None:
        """Force release removes all the shared leases and counts them."""
        decision = decide_force_release(readers(shared(A, 1), shared(B, 2)), NOW, key="k")
        assert decision.payload is not None
        assert (decision.payload["released_count"], decision.payload["fencing_token"]) == (2, 2)
        assert decision.row is not None
        assert decision.row.leases == ()

    def test_state_shows_each_holders_mode(self) -> None:
        """get lists each holder's mode."""
        state = lock_state(summary(readers(shared(A, 1), shared(B, 2, 20 * SECOND)), 1), "k")
        assert [h["mode"] for h in state["holders"]] == ["shared", "shared"]
        assert [h["mode"] for h in lock_state(summary(held(A)), "k")["holders"]] == ["exclusive"]

    @pytest.mark.parametrize("reach", [Reach.HERE, Reach.THERE])
    def test_a_shared_waiter_is_handed_a_shared_lease(self, reach: Reach) -> None:
        """A waiter that asked for a shared lease is granted (or reserved) a shared one."""
        waiter = Waiter(9, 1, "k", C, 30.0, "server-b", "waiting", None, None, True, True)
        handoff = decide_handoff(
            readers(shared(A, 1)), NOW, waiter, reach, reserve_us=SECOND, rejoin_us=SECOND
        )
        assert handoff.lease is not None
        assert (handoff.lease.fencing_token, handoff.lease.shared) == (2, True)


class TestDecideRenewals:
    """A batch's entries on one key, judged in one pass, decide what one renew after another
    would: the same row at the end and the same answer for each entry, refusals' words too."""

    @staticmethod
    def one_by_one(
        row: LockRow | None, entries: list[tuple[str, int, float, str | None]]
    ) -> tuple[LockRow | None, list[Decision]]:
        decisions, current, changed = [], row, False
        for owner, fence, ttl, label in entries:
            decision = decide_renew(
                current, NOW, key="k", owner_token=owner, fencing_token=fence, ttl=ttl, label=label
            )
            decisions.append(attrs.evolve(decision, row=None))
            if decision.row is not None:
                current, changed = decision.row, True
        return (current if changed else None), decisions

    @given(data=st.data())
    @settings(max_examples=300, deadline=None)
    def test_the_same_as_one_renew_after_another(self, data: st.DataObject) -> None:
        owners = st.sampled_from([A, B, C, D])
        leases = data.draw(
            st.lists(st.tuples(owners, st.integers(-3, 3)), max_size=5, unique_by=lambda x: x[0])
        )
        row = None
        if leases or data.draw(st.booleans()):
            stored = tuple(
                Lease(fence, owner, NOW + left * SECOND, 30.0, label="old")
                for fence, (owner, left) in enumerate(leases, start=1)
            )
            row = LockRow(1, "k", len(stored) + 1, data.draw(st.sampled_from([1, 3, 9])), stored)
        entries = data.draw(
            st.lists(
                st.tuples(
                    owners,
                    st.integers(0, len(leases) + 1),
                    st.sampled_from([1.0, 2.5, 30.0]),
                    st.sampled_from([None, "", "new"]),
                ),
                max_size=8,
            )
        )
        saved, decisions = decide_renewals(row, NOW, key="k", renewals=entries)
        expected_row, expected = self.one_by_one(row, entries)
        assert saved == expected_row
        assert [self.told(d) for d in decisions] == [self.told(d) for d in expected]
        if row is None:
            return
        # The same from a partial row (the named owners' leases, as a batch loads a key) and
        # the whole key's count of live leases: the same answers, the named leases' changes.
        named = {owner for owner, *_ in entries}
        part = attrs.evolve(row, leases=tuple(x for x in row.leases if x.owner_token in named))
        live = row.live_leases(NOW)
        crowd = (len(live), max((x.fencing_token for x in live), default=None))
        saved, decisions = decide_renewals(part, NOW, key="k", renewals=entries, crowd=crowd)
        assert [self.told(d) for d in decisions] == [self.told(d) for d in expected]
        if expected_row is None:
            assert saved is None
        else:
            assert saved is not None
            assert saved.leases == tuple(x for x in expected_row.leases if x.owner_token in named)

    @staticmethod
    def told(decision: Decision) -> tuple[object, ...]:
        refusal = decision.refusal
        said = None if refusal is None else (refusal.reason, refusal.message)
        return decision.row, decision.done, decision.payload, decision.lease, said

    def test_a_crowded_key_is_read_once_per_batch(self) -> None:
        """500 entries on a key of 1,000 holders: each lease's liveness asked about once."""
        calls = 0
        live = Lease.live

        def counted(self: Lease, now_us: int) -> bool:
            nonlocal calls
            calls += 1
            return live(self, now_us)

        owners = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(1000)]
        row = LockRow(1, "k", 1000, 1000, tuple(lease(o, i + 1) for i, o in enumerate(owners)))
        entries = [(owners[i], i + 1, 5.0, None) for i in range(0, 1000, 2)]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Lease, "live", counted)
            saved, decisions = decide_renewals(row, NOW, key="k", renewals=entries)
        assert calls <= 1000
        assert saved is not None
        assert all(d.done for d in decisions)
