"""The `volcano` command's exit statuses: every SDK error has one, and the documented ones."""

from __future__ import annotations

import inspect

import pytest

import volcano
from volcano._cli._exit import Exit, failure


def status_error(cls: type[volcano.APIStatusError], status: int) -> volcano.APIStatusError:
    return cls("it went wrong", status_code=status, code=None, request_id=None)


EXPECTED: list[tuple[volcano.Error, Exit]] = [
    (volcano.InvalidArgumentError("ttl must be..."), Exit.USAGE),
    (status_error(volcano.LockHeldError, 409), Exit.BUSY),
    (status_error(volcano.LeaseNotHeldError, 409), Exit.LOST),
    (status_error(volcano.RequestIdReusedError, 409), Exit.USAGE),
    (status_error(volcano.LimitMismatchError, 409), Exit.USAGE),
    (status_error(volcano.UnprocessableEntityError, 422), Exit.USAGE),
    (status_error(volcano.AuthenticationError, 401), Exit.REFUSED),
    (status_error(volcano.PermissionDeniedError, 403), Exit.REFUSED),
    (volcano.APIConnectionError("refused"), Exit.UNAVAILABLE),
    (volcano.APITimeoutError("slow"), Exit.UNAVAILABLE),
    (status_error(volcano.ServiceUnavailableError, 503), Exit.UNAVAILABLE),
    (status_error(volcano.InternalServerError, 500), Exit.UNAVAILABLE),
    (status_error(volcano.RateLimitError, 429), Exit.UNAVAILABLE),
    (status_error(volcano.NotFoundError, 404), Exit.UNEXPECTED),
    (status_error(volcano.UnexpectedResponseError, 200), Exit.UNEXPECTED),
]


class TestFailure:
    @pytest.mark.parametrize(("error", "status"), EXPECTED, ids=lambda v: type(v).__name__)
    def test_status_of_each_error(self, error: volcano.Error, status: Exit) -> None:
        """Each class of SDK error gets its documented exit status."""
        assert failure(error, key="k", api_url="http://x").status == status

    @pytest.mark.parametrize(
        "cls",
        [
            obj
            for obj in vars(volcano).values()
            if inspect.isclass(obj) and issubclass(obj, volcano.Error)
        ],
    )
    def test_every_error_gives_one_line(self, cls: type[volcano.Error]) -> None:
        """Whatever the SDK raises, the command has one line and a status for it."""
        if issubclass(cls, volcano.APIStatusError):
            error: volcano.Error = status_error(cls, 499)
        elif issubclass(cls, volcano.APIConnectionError):
            error = cls("no answer")
        else:
            error = cls("something")
        result = failure(error, key="k", api_url="http://x")
        assert result.status in set(Exit)
        assert "\n" not in result.message

    def test_statuses_are_the_documented_ones(self) -> None:
        """The numbers scripts rely on: 64, 69, 75, 76, 77 (sysexits where one fits)."""
        assert (Exit.USAGE, Exit.UNAVAILABLE, Exit.BUSY, Exit.LOST, Exit.REFUSED) == (
            64, 69, 75, 76, 77
        )  # fmt: skip


class TestLimits:
    def test_every_slot_held_names_the_limit(self) -> None:
        """With --limit 4, a refusal says all 4 slots are held, not that one owner holds it."""
        error = status_error(volcano.LockHeldError, 409)
        assert (
            "all 4 slots of 'k' are held" in failure(error, key="k", api_url="x", limit=4).message
        )
        assert "'k' is held by another owner" in failure(error, key="k", api_url="x").message

    def test_limit_mismatch_names_both_limits(self) -> None:
        """The key's limit (from the answer) and the one asked for are both in the line."""
        error = volcano.LimitMismatchError("in use", status_code=409, limit=2)
        message = failure(error, key="k", api_url="x", limit=3).message
        assert "'k' is in use with --limit 2, not --limit 3" in message
