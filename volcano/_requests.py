"""Validated requests for every lock operation, shared by Client and AsyncClient.

Arguments are checked here, before anything is sent; an owner token or request id left out
becomes a fresh UUID, and one supplied is kept exactly as spelled.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from . import _seam, _validate

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from ._exceptions import Error
    from ._models import ForceReleaseResult, LockHolder, LockLease, LockState
    from ._seam import Call, Page

FOREVER = math.inf
"""The `wait` of an acquisition that waits as long as it takes (a campaign's, by default)."""


class Acquisition(NamedTuple):
    """An acquisition, checked: one request, or a chain of them when it waits long.

    Every request of the chain carries the same owner token (the server keeps its place in line
    between them); the first one carries `request_id`, the others fresh ones. Its repr leaves
    the owner token out.
    """

    key: str
    owner_token: str
    ttl: float
    wait: float
    request_id: str
    limit: int = 1
    label: str | None = None
    shared: bool = False

    def __repr__(self) -> str:
        return (
            f"Acquisition(key={self.key!r}, ttl={self.ttl!r}, wait={self.wait!r},"
            f" request_id={self.request_id!r}, limit={self.limit!r}, label={self.label!r})"
        )

    def call(self, *, wait: float, request_id: str) -> Call[LockLease]:
        """The request of this acquisition that waits up to `wait` seconds."""
        return _seam.acquire(
            self.key,
            owner_token=self.owner_token,
            ttl=self.ttl,
            request_id=request_id,
            wait=wait,
            limit=self.limit,
            label=self.label,
            shared=self.shared,
        )


class GuardPlan(NamedTuple):
    """What a with_lock guard is made of: its acquisition and how it reports on the lease."""

    acquisition: Acquisition
    replayable: bool
    """A caller's request id may be answered with a replay of an earlier call's lease."""
    at_risk_margin: float | None
    on_lost: Callable[[Error], object] | None
    on_at_risk: Callable[[Error], object] | None


def acquire(
    key: object,
    *,
    ttl: object,
    limit: object = 1,
    wait: object = 0.0,
    token: str | uuid.UUID | None,
    request_id: str | uuid.UUID | None,
    label: object = None,
    shared: object = False,
) -> Acquisition:
    """The acquisition for these arguments; `wait` FOREVER waits as long as it takes."""
    checked_limit = _validate.limit(limit)
    return Acquisition(
        key=_validate.key(key),
        owner_token=_validate.new_uuid() if token is None else _validate.owner_token(token),
        ttl=_validate.ttl(ttl),
        wait=FOREVER if wait is FOREVER else _validate.wait(wait),
        request_id=_request_id(request_id),
        limit=checked_limit,
        label=_validate.label(label),
        shared=_validate.shared(shared, checked_limit),
    )


def with_lock(
    key: object,
    *,
    ttl: object,
    limit: object = 1,
    wait: object = 0.0,
    token: str | uuid.UUID | None,
    request_id: str | uuid.UUID | None,
    at_risk_margin: object,
    on_lost: object,
    on_at_risk: object,
    label: object = None,
    shared: object = False,
) -> GuardPlan:
    """The plan of a with_lock guard for these arguments."""
    acquisition = acquire(
        key,
        ttl=ttl,
        limit=limit,
        wait=wait,
        token=token,
        request_id=request_id,
        label=label,
        shared=shared,
    )
    return GuardPlan(
        acquisition,
        replayable=request_id is not None,
        at_risk_margin=_validate.at_risk_margin(at_risk_margin, acquisition.ttl),
        on_lost=_validate.callback("on_lost", on_lost),
        on_at_risk=_validate.callback("on_at_risk", on_at_risk),
    )


def renew(
    key: object,
    lease: object,
    *,
    ttl: object,
    request_id: str | uuid.UUID | None,
    label: object = None,
) -> Call[LockLease]:
    """The renew request for these arguments.

    `ttl` None means the lease's own ttl; `label` None keeps the lease's label.
    """
    checked = _validate.lease_for(_validate.key(key), lease)
    return _seam.renew(
        checked,
        ttl=_validate.ttl(checked.ttl_seconds if ttl is None else ttl),
        request_id=_request_id(request_id),
        label=_validate.label(label),
    )


def release(key: object, lease: object, *, request_id: str | uuid.UUID | None) -> Call[None]:
    """The release request for these arguments."""
    checked = _validate.lease_for(_validate.key(key), lease)
    return _seam.release(checked, request_id=_request_id(request_id))


def get(key: object, *, request_id: str | uuid.UUID | None) -> Call[LockState]:
    """The get request for these arguments."""
    return _seam.get(_validate.key(key), request_id=_request_id(request_id))


def force_release(key: object, *, request_id: str | uuid.UUID | None) -> Call[ForceReleaseResult]:
    """The force release request for these arguments."""
    return _seam.force_release(_validate.key(key), request_id=_request_id(request_id))


def check(key: object, fencing_token: object, *, request_id: str | uuid.UUID | None) -> Call[bool]:
    """The fence check for these arguments: is `fencing_token` a live lease of `key`?"""
    return _seam.check(
        _validate.key(key),
        _validate.fencing_token(fencing_token),
        request_id=_request_id(request_id),
    )


def watch(key: str, *, after_version: int, wait: float) -> Call[LockState]:
    """One long poll of a watch (a fresh request id each: it changes nothing)."""
    return _seam.watch(key, after_version=after_version, wait=wait, request_id=_validate.new_uuid())


def list_page(prefix: str, *, after: str, page_size: int) -> Call[Page[LockState, str]]:
    """One page of a listing, after the key `after` (arguments checked by the caller)."""
    return _seam.list_page(
        prefix=prefix, after=after, limit=page_size, request_id=_validate.new_uuid()
    )


def holders_page(key: str, *, after: int, page_size: int) -> Call[Page[LockHolder, int]]:
    """One page of a key's live leases, after the fencing token `after` (checked by the caller)."""
    return _seam.holders_page(key, after=after, limit=page_size, request_id=_validate.new_uuid())


def _request_id(value: str | uuid.UUID | None) -> str:
    return _validate.new_uuid() if value is None else _validate.request_id(value)
