"""Reading a success: what the generated parse made of a body, as the SDK's own frozen values.

The generated functions parse a body before they return; what they parsed is checked here
field by field (a body that breaks the spec is an `UnexpectedResponseError`, never a generated
type or an `Unset` passed on); a batch's refused entry becomes the `APIStatusError` of its
status and code (`status_error`), as a whole answer's does.

The SDK's values (`volcano._models`) are imported with the first answer read, like the
generated models: both bring in attrs, which `import volcano` itself does not need.
"""

from __future__ import annotations

import functools
import itertools
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeAlias, TypeVar

from .._exceptions import (
    APIStatusError,
    InvalidArgumentError,
    UnexpectedResponseError,
    status_error,
)
from .._validate import FENCING_TOKEN_MAX

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

    from .._models import ForceReleaseResult, LockHolder, LockLease, LockMode, LockState


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)  # a frozen value: read only

# What the generated parse raises on a body that is not what the spec promises (JSONDecodeError
# and UnicodeDecodeError are ValueErrors), or on a status HTTPStatus does not know. Caught only
# once a response has arrived, so they never hide a failure to build or send the request.
PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError)

Renewed: TypeAlias = "LockLease | APIStatusError"
"""One lease's result in a batch renewal: the renewed lease, or the refusal in its place."""


class Success(NamedTuple, Generic[T_co]):
    """A successful answer: the value, when its request was first sent, whether replayed.

    `sent_at` (the client's monotonic clock) is the only send time the SDK uses: the server made
    whatever the answer describes no earlier than that, so a lease lives at least until
    `sent_at + ttl`.
    """

    value: T_co
    sent_at: float
    replayed: bool


class SpecMismatchError(Exception):
    """A body that parsed but does not match the spec; the text says how."""


@functools.cache
def models() -> ModuleType:
    """The generated models (request bodies and response shapes), imported on first use."""
    from _volcano_api import models

    return models


@functools.cache
def _unset() -> object:
    """The generated client's marker of a field absent from a body."""
    from _volcano_api.types import UNSET

    return UNSET


def error_detail(error: object) -> tuple[str, str, str, int | None] | None:
    """(code, message, request_id, limit) of a generated ErrorDetail, or None.

    None unless the first three are strings; `limit` is None unless it is a limit.
    """
    code, message, request_id, limit = (
        getattr(error, name, None) for name in ("code", "message", "request_id", "limit")
    )
    if not (isinstance(code, str) and isinstance(message, str) and isinstance(request_id, str)):
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        limit = None
    return code, message, request_id, limit


# -- successes ---------------------------------------------------------------------------------


def nothing(parsed: object) -> None:
    """A success without a body (release's 204)."""


def lease(
    parsed: object, *, key: str, owner_token: str, fencing_token: int | None = None
) -> LockLease:
    """A LockLease body, which must describe the lease asked for (renew: its fencing token)."""
    from .._models import LockLease  # with the first answer: see the module docstring

    body = _body(parsed, models().LockLease, "LockLease")
    made = _value(
        LockLease,
        key=_string(body.key, "key"),
        owner_token=_string(body.owner_token, "owner_token"),
        fencing_token=_fencing_token(body.fencing_token),
        expires_at=_timestamp(body.expires_at),
        ttl_seconds=_ttl_seconds(body.ttl_seconds),
    )
    if made.key != key:
        raise SpecMismatchError(f"key {made.key!r} is not the key {key!r} asked for")
    if made.owner_token != owner_token:
        raise SpecMismatchError("owner_token differs from the one sent")
    if fencing_token is not None and made.fencing_token != fencing_token:
        raise SpecMismatchError(
            f"renew changed fencing_token {fencing_token} to {made.fencing_token}"
        )
    return made


def renewals(parsed: object, *, leases: Sequence[LockLease], request_id: str) -> list[Renewed]:
    """A batch's results, one per lease sent, in order: each renewed lease or its refusal.

    A result that breaks the spec is an `UnexpectedResponseError` in its place (as a single
    renew's would be); results that do not match the leases sent, one for one, break the whole.
    """
    body = _body(parsed, models().RenewLeasesResult, "RenewLeasesResult")
    if not isinstance(body.results, list) or len(body.results) != len(leases):
        raise SpecMismatchError(f"it does not hold one result for each of {len(leases)} leases")
    return [
        _renewed(result, sent, request_id)
        for result, sent in zip(body.results, leases, strict=True)
    ]


def _renewed(result: object, sent: LockLease, request_id: str) -> Renewed:
    try:
        return _judged(result, sent)
    except SpecMismatchError as exc:
        return UnexpectedResponseError(
            f"renew_many: the result for {sent.key} breaks the spec: {exc}",
            status_code=200,
            request_id=request_id,
        )


def _judged(result: object, sent: LockLease) -> Renewed:
    """One result of a batch: the renewed lease (which must be the one sent), or its refusal."""
    made = models()
    if getattr(result, "key", None) != sent.key:
        raise SpecMismatchError(f"a result for {getattr(result, 'key', None)!r} in its place")
    if isinstance(result, made.LeaseRenewed):
        return lease(
            result.lease,
            key=sent.key,
            owner_token=sent.owner_token,
            fencing_token=sent.fencing_token,
        )
    if not isinstance(result, made.LeaseRefused) or not isinstance(result.status, int):
        raise SpecMismatchError("it is neither a renewed lease nor a refusal")
    detail = error_detail(result.error)
    if detail is None:
        raise SpecMismatchError("its error is not a Volcano error object")
    code, message, refused_id, limit = detail
    return status_error(
        result.status, code=code, message=message, request_id=refused_id, limit=limit
    )


def live(parsed: object, *, key: str, fencing_token: int) -> bool:
    """A LeaseCheck body, which must be about `key` and `fencing_token`: whether it is live."""
    body = _body(parsed, models().LeaseCheck, "LeaseCheck")
    if _string(body.key, "key") != key:
        raise SpecMismatchError(f"key {body.key!r} is not the key {key!r} asked for")
    if _fencing_token(body.fencing_token) != fencing_token:
        raise SpecMismatchError(f"fencing_token {body.fencing_token} is not {fencing_token}")
    return _boolean(body.live, "live")


def state(parsed: object, *, key: str) -> LockState:
    """A LockState body, which must be the state of `key`."""
    from .._models import LockState

    body = _body(parsed, models().LockState, "LockState")
    made = _value(
        LockState,
        key=_string(body.key, "key"),
        held=_boolean(body.held, "held"),
        expires_at=None if body.expires_at is None else _timestamp(body.expires_at),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
        limit=_count(body.limit, "limit"),
        holders=tuple(_holder(holder) for holder in body.holders),
        waiters=_count(body.waiters, "waiters"),
        version=_count(body.version, "version"),
        holder_count=_holder_count(body.holder_count, len(body.holders)),
    )
    if made.key != key:
        raise SpecMismatchError(f"key {made.key!r} is not the key {key!r} asked for")
    return made


_I = TypeVar("_I")
_C = TypeVar("_C")


class Page(NamedTuple, Generic[_I, _C]):
    """One page of a listing: its items, and the `after` of the next page (or None)."""

    items: tuple[_I, ...]
    next_after: _C | None


def page(parsed: object, *, prefix: str, after: str) -> Page[LockState, str]:
    """A LockList body: states of keys after `after` that start with `prefix`, in key order."""
    body = _body(parsed, models().LockList, "LockList")
    states: list[LockState] = []
    for item in body.locks:
        made = state(item, key=_string(getattr(item, "key", None), "key"))
        if not made.key.startswith(prefix) or made.key <= after:
            raise SpecMismatchError(f"key {made.key!r} is outside the page asked for")
        if states and made.key <= states[-1].key:
            raise SpecMismatchError("the keys are not in order")
        states.append(made)
    # A page may hold fewer keys than asked for, none even, and still have a next: the spec
    # asks only that next move the listing on, past every key of this page.
    following = None if body.next_ is None else _string(body.next_, "next")
    if following is not None and (following <= after or (states and following < states[-1].key)):
        raise SpecMismatchError(f"next {following!r} does not move past the page")
    return Page(tuple(states), following)


def holders_page(parsed: object, *, after: int) -> Page[LockHolder, int]:
    """A HolderList body: live leases with fencing tokens above `after`, in token order."""
    body = _body(parsed, models().HolderList, "HolderList")
    holders = tuple(_holder(item) for item in body.holders)
    tokens = [after, *(holder.fencing_token for holder in holders)]
    if any(earlier >= later for earlier, later in itertools.pairwise(tokens)):
        raise SpecMismatchError("the holders are not in fencing token order after the one asked")
    following = None if body.next_ is None else _fencing_token(body.next_)
    if following is not None and following < tokens[-1]:
        raise SpecMismatchError(f"next {following} does not move past the page")
    return Page(holders, following)


def force_release(parsed: object, *, key: str) -> ForceReleaseResult:
    """A ForceReleaseResult body, which must be about `key`."""
    body = _body(parsed, models().ForceReleaseResult, "ForceReleaseResult")
    from .._models import ForceReleaseResult

    made = ForceReleaseResult(
        key=_string(body.key, "key"),
        released=_boolean(body.released, "released"),
        fencing_token=None if body.fencing_token is None else _fencing_token(body.fencing_token),
        released_count=_count(body.released_count, "released_count"),
    )
    if made.key != key:
        raise SpecMismatchError(f"key {made.key!r} is not the key {key!r} asked for")
    return made


_B = TypeVar("_B")
_V = TypeVar("_V")


def _body(parsed: object, cls: type[_B], name: str) -> _B:
    if not isinstance(parsed, cls):
        raise SpecMismatchError(f"it is not a {name} object")
    return parsed


def _holder(holder: object) -> LockHolder:
    from .._models import LockHolder

    body = _body(holder, models().LockHolder, "LockHolder")
    label = body.label
    if label is not None and not isinstance(label, str):
        raise SpecMismatchError("a holder's label is not a string")
    return _value(
        LockHolder,
        fencing_token=_fencing_token(body.fencing_token),
        expires_at=_timestamp(body.expires_at),
        label=label,
        mode=_mode(body.mode),
    )


def _holder_count(value: object, shown: int) -> int:
    """`holder_count`, or the holders shown when a server older than the field sends none."""
    if value is _unset():
        return shown
    count = _count(value, "holder_count")
    if count < shown:
        raise SpecMismatchError(f"holder_count {count} is below the {shown} holders shown")
    return count


def _mode(value: object) -> LockMode:
    # The generated LockMode is a StrEnum: its value names the SDK's member.
    from .._models import LockMode

    if not isinstance(value, str):
        raise SpecMismatchError("a holder's mode is not a string")
    try:
        return LockMode(str(value))
    except ValueError:
        raise SpecMismatchError(f"a holder's mode is {value!r}") from None


def _count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecMismatchError(f"{name} is not a count")
    return value


def _string(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise SpecMismatchError(f"{name} is not a string")
    return value


def _boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise SpecMismatchError(f"{name} is not a boolean")
    return value


def _fencing_token(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecMismatchError("fencing_token is not an integer")
    if not 1 <= value <= FENCING_TOKEN_MAX:
        raise SpecMismatchError(f"fencing_token {value} is outside 1..2^53-1")
    return value


def _timestamp(value: object) -> datetime:
    # Its offset is the model's to judge (LockLease and LockState keep UTC only).
    if not isinstance(value, datetime):
        raise SpecMismatchError("expires_at is not an RFC 3339 timestamp")
    return value


def _value(cls: Callable[..., _V], **fields: Any) -> _V:
    """An SDK value from checked fields; what its own converters refuse breaks the spec."""
    try:
        return cls(**fields)
    except InvalidArgumentError as exc:
        raise SpecMismatchError(str(exc)) from None


def _ttl_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise SpecMismatchError("ttl_seconds is not a positive number")
    return float(value)
