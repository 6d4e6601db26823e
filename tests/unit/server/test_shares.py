"""Each project's share of a server: waiting acquires and other requests open at once."""

from __future__ import annotations

import contextlib

import pytest

from volcano_server.http._shares import ProjectShares
from volcano_server.wire._errors import ApiError


class TestProjectShares:
    def test_a_project_over_its_share_gets_429_and_others_do_not(self) -> None:
        """With two waiters of project 1 open, its third gets 429 rate_limited with
        Retry-After; project 2's waiter and project 1's other requests still pass."""
        shares = ProjectShares(max_waiters=2, max_requests=5)
        with contextlib.ExitStack() as held:
            held.enter_context(shares.hold(1, waiting=True))
            held.enter_context(shares.hold(1, waiting=True))
            with pytest.raises(ApiError) as refused:
                held.enter_context(shares.hold(1, waiting=True))
            held.enter_context(shares.hold(2, waiting=True))
            held.enter_context(shares.hold(1, waiting=False))
        assert refused.value.status == 429
        assert refused.value.code == "rate_limited"
        assert refused.value.retry_after == 1
        assert "2 waiting requests" in refused.value.message

    def test_requests_in_flight_have_their_own_cap(self) -> None:
        """Past `max_requests` other requests, the project's next one gets 429."""
        shares = ProjectShares(max_waiters=5, max_requests=1)
        with (
            shares.hold(7, waiting=False),
            pytest.raises(ApiError, match="1 requests in flight"),
            shares.hold(7, waiting=False),
        ):
            pass

    def test_a_share_is_given_back_when_the_request_ends(self) -> None:
        """Once a request ends, even by an exception, its place is free again."""
        shares = ProjectShares(max_waiters=1, max_requests=1)
        with pytest.raises(RuntimeError), shares.hold(1, waiting=True):
            raise RuntimeError("the request failed")
        with shares.hold(1, waiting=True):
            pass

    def test_caps_must_leave_room(self) -> None:
        """A cap of zero would refuse every request: it is refused."""
        with pytest.raises(ValueError, match="at least one"):
            ProjectShares(max_waiters=0, max_requests=1)
