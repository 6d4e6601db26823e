"""Watching and listing with a scripted API and a fake clock: which polls go out, what they
mean, how failures back off; and the election rules over states."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest

import volcano
from tests.support.sdk import Sdk
from tests.unit.sdk.support import FakeApi, FakeClock, body, error, fail
from volcano._elections import _Attempts, _Changes, leader_of
from volcano._requests import FOREVER, with_lock
from volcano._retry import AFTER_TRANSPORT_FAILURE
from volcano._watch import BACKOFF_CAP, BACKOFF_FIRST, POLL_SECONDS, WatchCursor, retryable

EXPIRES = "2026-11-29T21:15:30.250000Z"


def state(version: int, *holders: tuple[int, str | None], key: str = "k", limit: int = 1) -> Any:
    """A LockState body at `version` with these (fencing token, label) holders."""
    return {
        "key": key,
        "held": bool(holders),
        "expires_at": EXPIRES if holders else None,
        "fencing_token": max((token for token, _ in holders), default=None),
        "limit": limit,
        "holders": [
            {"fencing_token": token, "expires_at": EXPIRES, "label": label, "mode": "exclusive"}
            for token, label in holders
        ],
        "waiters": 0,
        "version": version,
    }


def polls(fake_api: FakeApi) -> list[dict[str, str]]:
    """The query of each get the client sent."""
    return [dict(request.url.params) for request in fake_api.of("get")]


class TestCursor:
    def test_the_first_call_reads_now_then_polls_from_the_version(self) -> None:
        """No version yet: a plain get; then long polls from the last version reported."""
        cursor = WatchCursor("k", None)
        call, wait = cursor.next_call()
        assert (call.operation.name, wait) == ("get", 0.0)
        reported = volcano.LockState(key="k", held=False, expires_at=None, fencing_token=None)
        assert cursor.answered(reported) == reported
        call, wait = cursor.next_call()
        assert (call.operation.name, call.kwargs["after_version"], wait) == (
            "watch",
            0,
            POLL_SECONDS,
        )
        assert cursor.answered(reported) is None  # the same version: nothing to report

    @pytest.mark.parametrize(
        ("made", "again"),
        [
            (volcano.APIConnectionError("refused"), True),
            (volcano.APITimeoutError("slow"), True),
            (volcano.ServiceUnavailableError("down", status_code=503), True),
            (volcano.InternalServerError("bug", status_code=500), True),
            (volcano.RateLimitError("busy", status_code=429), True),
            (volcano.AuthenticationError("who", status_code=401), False),
            (volcano.NotFoundError("where", status_code=404), False),
            (volcano.UnprocessableEntityError("what", status_code=422), False),
            (volcano.ClientClosedError("closed"), False),
        ],
        ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
    )
    def test_what_is_retried(self, made: volcano.Error, again: bool) -> None:
        """Transport failures, timeouts, 5xx and 429 are retried; every other error ends it."""
        assert retryable(made) is again

    def test_backoff_doubles_to_its_cap_and_heeds_retry_after(self) -> None:
        """0.2 s doubling up to 5 s per failure in a row; a Retry-After may ask longer."""
        cursor = WatchCursor("k", 3)
        delays = [cursor.failed(volcano.APIConnectionError("x")) for _ in range(7)]
        assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, BACKOFF_CAP, BACKOFF_CAP]
        busy = volcano.RateLimitError("busy", status_code=429, retry_after=12)
        assert cursor.failed(busy) == 12
        cursor.answered(volcano.LockState(key="k", held=False, expires_at=None, fencing_token=None))
        assert cursor.failed(volcano.APIConnectionError("x")) == 0.2


class TestWatch:
    def test_polls_chain_from_each_version(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A state now, then one per changed version; an unchanged answer is polled again."""
        fake_api.then(
            body(200, state(4)),
            body(200, state(4)),
            body(200, state(5, (3, "a"))),
            body(200, state(7)),
        )
        states = sdk.watch("k")
        assert [states.next().version for _ in range(3)] == [4, 5, 7]
        assert polls(fake_api) == [
            {},
            {"after_version": "4", "wait_seconds": "50.0"},
            {"after_version": "4", "wait_seconds": "50.0"},
            {"after_version": "5", "wait_seconds": "50.0"},
        ]

    def test_failures_back_off_then_resume_from_the_version(
        self, sdk: Sdk, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Two transport failures and a 503 are waited out (0.2, 0.4, 0.8 s by the clock) and
        the watch goes on from the version it had."""
        fake_api.then(
            body(200, state(1)),
            fail(httpx.ConnectError("refused")),
            fail(httpx.ReadTimeout("slow")),
            error(503, "unavailable"),
            body(200, state(2)),
        )
        states = sdk.watch("k")
        assert states.next().version == 1
        assert states.next().version == 2
        assert clock.sleeps == [0.2, 0.4, 0.8]
        assert [p.get("after_version") for p in polls(fake_api)] == [None, "1", "1", "1", "1"]

    def test_a_final_error_is_raised(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A 401 is not retried: the iteration raises it."""
        fake_api.then(error(401, "unauthorized"))
        with pytest.raises(volcano.AuthenticationError):
            sdk.watch("k").next()
        assert len(fake_api.of("get")) == 1

    def test_a_body_that_is_not_the_keys_state_is_refused(
        self, sdk: Sdk, fake_api: FakeApi
    ) -> None:
        """A state of another key breaks the spec: UnexpectedResponseError, not retried."""
        fake_api.then(body(200, state(1, key="other")))
        with pytest.raises(volcano.UnexpectedResponseError):
            sdk.watch("k").next()


class TestList:
    def test_follows_next_until_null(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """Each page asks after the previous page's next; prefix and page size are sent."""
        fake_api.then(
            body(200, {"locks": [state(1, (1, None), key="a:1")], "next": "a:1"}),
            body(200, {"locks": [state(1, (1, None), key="a:2")], "next": None}),
        )
        assert [s.key for s in sdk.listed("a:", page_size=1)] == ["a:1", "a:2"]
        assert polls(fake_api) == [
            {"prefix": "a:", "limit": "1"},
            {"prefix": "a:", "limit": "1", "after": "a:1"},
        ]

    def test_short_and_empty_pages_are_followed(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A page may hold fewer keys than asked for, or none, and name a next beyond its last
        key (keys freed while a server read it): the listing goes on from that next."""
        fake_api.then(
            body(200, {"locks": [state(1, (1, None), key="a:1")], "next": "a:4"}),
            body(200, {"locks": [], "next": "a:7"}),
            body(200, {"locks": [state(1, (1, None), key="a:8")], "next": None}),
        )
        assert [s.key for s in sdk.listed("a:", page_size=2)] == ["a:1", "a:8"]
        assert [p.get("after") for p in polls(fake_api)] == [None, "a:4", "a:7"]

    def test_a_page_after_a_stalled_next_is_not_asked_for(
        self, sdk: Sdk, fake_api: FakeApi
    ) -> None:
        """A next equal to the after just sent would loop forever: refused at that page."""
        fake_api.then(
            body(200, {"locks": [state(1, (1, None), key="a:1")], "next": "a:1"}),
            body(200, {"locks": [], "next": "a:1"}),
        )
        with pytest.raises(volcano.UnexpectedResponseError):
            sdk.listed("a:", page_size=1)
        assert len(polls(fake_api)) == 2

    @pytest.mark.parametrize(
        "page",
        [
            {"locks": [state(1, key="b")], "next": None},  # outside the prefix
            {"locks": [state(1, key="a:2"), state(1, key="a:1")], "next": None},  # not in order
            {"locks": [state(1, key="a:1"), state(1, key="a:3")], "next": "a:2"},  # goes back
            {"locks": [], "next": ""},  # does not move past after
        ],
    )
    def test_a_page_that_breaks_the_spec_is_refused(
        self, sdk: Sdk, fake_api: FakeApi, page: Any
    ) -> None:
        """Keys outside the prefix, out of order, or a next that would read a key again or
        never end."""
        fake_api.then(body(200, page))
        with pytest.raises(volcano.UnexpectedResponseError):
            sdk.listed("a:")


class TestCampaignOutlivesTrouble:
    def test_a_restarting_server_is_waited_out(
        self, sdk: Sdk, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """Refused connections and 503s while campaigning are waited out, backing off, and the
        candidate is elected with the owner token it started with."""
        fake_api.then(
            fail(httpx.ConnectError("refused")),
            fail(httpx.ConnectError("refused")),  # retry-once spent: the campaign backs off
            error(503, "unavailable"),
            error(503, "unavailable"),
        )
        with sdk.campaign("e", ttl=10, label="me") as leadership:
            assert leadership.term == 7
        acquires = fake_api.of("acquire")
        assert len(acquires) == 5
        assert len({json.loads(a.content)["owner_token"] for a in acquires}) == 1
        assert [s for s in clock.sleeps if s >= BACKOFF_FIRST] == [0.2, 0.4]

    def test_a_refusal_ends_the_campaign_at_once(self, sdk: Sdk, fake_api: FakeApi) -> None:
        """A 401 is no trouble to wait out: entering raises it after one request."""
        fake_api.then(error(401, "unauthorized"))
        with pytest.raises(volcano.AuthenticationError), sdk.campaign("e", ttl=10):
            pass
        assert len(fake_api.of("acquire")) == 1

    def test_trouble_outlasting_the_wait_is_raised(
        self, sdk: Sdk, fake_api: FakeApi, clock: FakeClock
    ) -> None:
        """With a wait of 1 s, a server that stays unreachable ends the campaign with the last
        failure once the wait is spent: its own pauses (beside retry-once's) never run past it."""
        fake_api.then(*[fail(httpx.ConnectError("refused")) for _ in range(40)])
        with pytest.raises(volcano.APIConnectionError), sdk.campaign("e", ttl=10, wait=1):
            pass
        pauses = [s for s in clock.sleeps if s != AFTER_TRANSPORT_FAILURE]
        assert pauses == [0.2, 0.4, 0.25]  # the last try starts as the wait ends, at 1.0 s
        assert len(fake_api.of("acquire")) == 8  # four tries, each retried once


class TestElectionRules:
    def test_the_leader_of_a_state(self) -> None:
        """One holder leads (label, term); none: vacant; a semaphore or a key held shared is no
        election."""
        one = volcano.LockHolder(fencing_token=9, expires_at=_expiry(), label="x")
        held = volcano.LockState(
            key="e", held=True, expires_at=_expiry(), fencing_token=9, holders=(one,)
        )
        assert leader_of("e", held) == volcano.Leader("x", 9) == ("x", 9)
        vacant = volcano.LockState(key="e", held=False, expires_at=None, fencing_token=9)
        assert leader_of("e", vacant) is None
        shared = volcano.LockState(
            key="e", held=True, expires_at=_expiry(), fencing_token=9, limit=2, holders=(one,)
        )
        with pytest.raises(volcano.InvalidArgumentError, match="not an election"):
            leader_of("e", shared)
        reader = attrs.evolve(one, mode=volcano.LockMode.SHARED)
        held_shared = attrs.evolve(held, holders=(reader,))
        with pytest.raises(volcano.InvalidArgumentError, match="held shared"):
            leader_of("e", held_shared)

    def test_an_observer_reports_changes_only(self) -> None:
        """The first leader (or vacancy) is reported, then only what differs from the last."""
        changes = _Changes()
        a, a2, b = volcano.Leader("a", 1), volcano.Leader("a2", 1), volcano.Leader("b", 2)
        reported = [x for x in (None, None, a, a, a2, None, None, b) if changes.new(x)]
        assert reported == [None, a, a2, None, b]

    def test_a_campaign_tries_again_with_what_is_left_of_its_wait(self) -> None:
        """The first try is the plan; later ones keep the owner token, take a fresh request id
        and wait what is left (forever stays forever)."""
        plan = with_lock(
            "e",
            ttl=10,
            wait=30,
            token=None,
            request_id=None,
            at_risk_margin=None,
            on_lost=None,
            on_at_risk=None,
        )
        attempts = _Attempts(plan, 100.0)
        assert attempts.next_plan(100.0) is plan
        again = attempts.next_plan(112.0).acquisition
        assert (again.wait, again.owner_token) == (18.0, plan.acquisition.owner_token)
        assert again.request_id != plan.acquisition.request_id
        assert attempts.next_plan(200.0).acquisition.wait == 0.0
        forever = with_lock(
            "e",
            ttl=10,
            wait=FOREVER,
            token=None,
            request_id=None,
            at_risk_margin=None,
            on_lost=None,
            on_at_risk=None,
        )
        endless = _Attempts(forever, 100.0)
        endless.next_plan(100.0)
        assert endless.next_plan(10**9).acquisition.wait == FOREVER


def _expiry() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 11, 29, tzinfo=UTC)
