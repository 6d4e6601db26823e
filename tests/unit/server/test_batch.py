"""A batch renewal's results kept true when heard (`volcano_server.locks._batch`): pure
functions."""

from __future__ import annotations

import json

from volcano_server.locks import _batch
from volcano_server.locks._rules import lease_payload
from volcano_server.storage import Lease
from volcano_server.wire._errors import ApiError
from volcano_server.wire._wire import rfc3339_us

RID = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
OWNER = "0F8FAD5B-D9CB-469F-A165-70867728950E"


def renewed(key: str, token: int, until_us: int) -> _batch.Result:
    """The result of a renewed lease of `key` with this token, live until `until_us`."""
    return _batch.renewed(key, lease_payload(key, Lease(token, OWNER, until_us, 30.0)), until_us)


class TestAnswer:
    def test_it_is_timed_by_its_soonest_lease(self) -> None:
        """The answer's lease_until is the soonest expiry among its leases, refusals aside."""
        refusal = _batch.refused("c", ApiError.lease_not_held("gone"), RID)
        answer = _batch.answer([renewed("a", 1, 9_000), renewed("b", 2, 5_000), refusal])
        assert answer.lease_until_us == 5_000
        assert json.loads(answer.body)["results"][2] == {
            "key": "c",
            "status": 409,
            "error": {"code": "lease_not_held", "message": "gone", "request_id": RID},
        }

    def test_only_refusals_have_no_lease_to_time(self) -> None:
        """Nothing in it tells of a lease: nothing to check before sending."""
        refusal = _batch.refused("c", ApiError.lease_not_held("gone"), RID)
        assert _batch.answer([refusal]).lease_until_us is None


class TestStillTrue:
    def test_an_expired_lease_is_refused_in_its_place(self) -> None:
        """At `now`, the lease that expired turns 409 lease_not_held; the live one is kept, and
        the answer is timed by it."""
        answer = _batch.answer([renewed("a", 1, 9_000), renewed("b", 2, 5_000)])
        checked = _batch.still_true(answer, 5_000, RID)
        first, second = json.loads(checked.body)["results"]
        assert first["lease"]["fencing_token"] == 1
        assert (second["key"], second["status"], second["error"]["code"]) == (
            "b",
            409,
            "lease_not_held",
        )
        assert "stalled" in second["error"]["message"]
        assert checked.lease_until_us == 9_000

    def test_a_replay_stays_a_replay(self) -> None:
        """A replayed answer checked again is still marked replayed."""
        answer = _batch.answer([renewed("a", 1, 5_000)], replay=True)
        assert _batch.still_true(answer, 6_000, RID).replayed


class TestReplayed:
    def test_an_ended_lease_is_refused_and_a_live_one_told_as_it_is_now(self) -> None:
        """Replaying a stored batch asks for each lease as it is now: an ended one is refused,
        a live one told with its expiry now (shortened since, here), never the stored one."""
        until, sooner = 1_800_000_000_000_000, 1_799_999_000_000_000
        stored = _batch.answer([renewed("a", 1, until), renewed("b", 2, until)])
        now = renewed("a", 1, sooner)[0]["lease"]

        def as_now(lease: dict[str, object]) -> tuple[dict[str, object], int] | None:
            return (now, sooner) if lease["key"] == "a" else None

        replay = _batch.replayed(stored.body, as_now, RID)
        first, second = json.loads(replay.body)["results"]
        assert first == {"key": "a", "lease": now}
        assert first["lease"]["expires_at"] == rfc3339_us(sooner)
        assert second["error"]["code"] == "lease_not_held"
        assert "no longer live" in second["error"]["message"]
        assert replay.replayed
        assert replay.lease_until_us == sooner

    def test_a_stored_refusal_is_replayed_as_it_was(self) -> None:
        """A refusal needs no check: it is given back unchanged."""
        refusal = _batch.refused("c", ApiError.lease_not_held("gone"), RID)
        stored = _batch.answer([refusal])
        replay = _batch.replayed(stored.body, lambda lease: None, RID)
        assert json.loads(replay.body) == json.loads(stored.body)
