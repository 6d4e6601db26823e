"""Rules: which requests an action applies to, and how many times."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tests.support._actions import (
    Action,
    blackhole,
    cut_after,
    delay,
    delay_response,
    drop_response,
    error_response,
    html_error,
    reset_before_forward,
)

if TYPE_CHECKING:
    from tests.support._records import RecordedRequest
    from tests.support.proxy import FaultProxy

__all__ = ["Match", "Rule", "RuleBuilder"]


@dataclass(frozen=True)
class Match:
    """Selects requests: all of the given criteria must hold; no criteria selects every request.

    Attributes:
        method: the method, any letter case.
        path: a regular expression searched (re.search) in the path, query excluded.
    """

    method: str | None = None
    path: str | re.Pattern[str] | None = None

    def __call__(self, request: RecordedRequest) -> bool:
        """Whether `request` is selected."""
        if self.method is not None and request.method.upper() != self.method.upper():
            return False
        return self.path is None or re.search(self.path, request.path) is not None


@dataclass(eq=False)
class Rule:
    """A match, an action, and how many matching requests it may still apply to."""

    match: Match
    action: Action
    times: int | None = 1
    """How many requests it applies to in all; None for no limit."""
    hits: int = 0
    """How many requests it has applied to."""

    @property
    def exhausted(self) -> bool:
        """Whether it is used up."""
        return self.times is not None and self.hits >= self.times


class RuleBuilder:
    """Fluent rules: `proxy.on("POST", r"/acquire$").error_response(503, times=2)`."""

    def __init__(self, proxy: FaultProxy, match: Match) -> None:
        self._proxy = proxy
        self._match = match

    def then(self, action: Action, *, times: int | None = 1) -> Rule:
        """Add a rule applying `action` to the next `times` matching requests (None: all)."""
        return self._proxy._add_rule(self._match, action, times=times)

    def drop_response(self, *, rst: bool = False, times: int | None = 1) -> Rule:
        """See drop_response()."""
        return self.then(drop_response(rst=rst), times=times)

    def reset_before_forward(self, *, rst: bool = True, times: int | None = 1) -> Rule:
        """See reset_before_forward()."""
        return self.then(reset_before_forward(rst=rst), times=times)

    def error_response(
        self,
        status: int,
        *,
        retry_after: int | Literal["auto"] | None = "auto",
        times: int | None = 1,
    ) -> Rule:
        """See error_response()."""
        return self.then(error_response(status, retry_after=retry_after), times=times)

    def html_error(self, status: int, *, times: int | None = 1) -> Rule:
        """See html_error()."""
        return self.then(html_error(status), times=times)

    def delay(self, seconds: float, *, times: int | None = 1) -> Rule:
        """See delay()."""
        return self.then(delay(seconds), times=times)

    def delay_response(self, seconds: float, *, times: int | None = 1) -> Rule:
        """See delay_response()."""
        return self.then(delay_response(seconds), times=times)

    def blackhole(self, *, times: int | None = 1) -> Rule:
        """See blackhole()."""
        return self.then(blackhole(), times=times)

    def cut_after(self, seconds: float, *, times: int | None = 1) -> Rule:
        """See cut_after()."""
        return self.then(cut_after(seconds), times=times)
