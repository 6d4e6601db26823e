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
