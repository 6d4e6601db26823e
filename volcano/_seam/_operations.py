"""The table of operations, and the `Call` of each request: its body, and how to read it.

A Call is frozen, and it is one request id: sending it again is a retry of the same request.
The generated modules are imported on first use, so `import volcano` stays light (the first
request pays about 8 ms).
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from . import _reading
from ._reading import models

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType

    from .._models import ForceReleaseResult, LockHolder, LockLease, LockState
    from ._reading import Page, Renewed

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)  # a frozen value: read only


class Operation(NamedTuple):
    """One operation of the spec: the generated module that sends it, and its success status.

    `tag` is the spec's tag of the operation, the package the generator put its module in.
    """

    name: str
    module: str
    success_status: int
    tag: str = "locks"

    def generated(self) -> ModuleType:
        """The generated module of this operation (`sync_detailed`, `asyncio_detailed`)."""
        return _module(self.tag, self.module)


class Call(NamedTuple, Generic[T_co]):
    """One lock request, ready to send: its operation, arguments, and how to read a success.

    `subject` names what it is about in logs: the lock's key (a batch: how many leases).
    """

    operation: Operation
    subject: str
    request_id: str
    kwargs: Mapping[str, Any]
    convert: Callable[[object], T_co]


@functools.cache
def _module(tag: str, name: str) -> ModuleType:
    return importlib.import_module(f"_volcano_api.api.{tag}.{name}")


ACQUIRE = Operation("acquire", "acquire_lock", 200)
RENEW = Operation("renew", "renew_lock", 200)
RENEW_MANY = Operation("renew_many", "renew_leases", 200)
RELEASE = Operation("release", "release_lock", 204)
GET = Operation("get", "get_lock", 200)
FORCE_RELEASE = Operation("force_release", "force_release_lock", 200)
CHECK = Operation("check", "check_lease", 200)
WATCH = Operation("watch", "get_lock", 200)
LIST = Operation("list", "list_locks", 200)
HOLDERS = Operation("holders", "list_holders", 200)


def acquire(
    key: str,
    *,
    owner_token: str,
    ttl: float,
    request_id: str,
    wait: float = 0.0,
    limit: int = 1,
    label: str | None = None,
    shared: bool = False,
) -> Call[LockLease]:
    """The request that acquires `key` for `owner_token` for `ttl` seconds.

    With `wait`, it queues for the key up to that many seconds (the body then carries
    `wait_seconds`; without it, it is exactly the request of a client that never waits). A
    `limit` above 1 asks for one of that many slots; 1, the server's default, is not sent, so a
    plain lock's request stays the one a client without semaphores sends. A `label` is sent
    only when given, and `shared` only when true (an exclusive lease is the default).
    """
    body = models().AcquireRequest(owner_token=owner_token, ttl_seconds=ttl)
    if wait > 0:
        body.wait_seconds = wait
    if limit != 1:
        body.limit = limit
    if label is not None:
        body.label = label
    if shared:
        body.shared = True
    expected = functools.partial(_reading.lease, key=key, owner_token=owner_token)
    return Call(ACQUIRE, key, request_id, {"key": key, "body": body}, expected)


def renew(
    lease: LockLease, *, ttl: float, request_id: str, label: str | None = None
) -> Call[LockLease]:
    """The request that extends `lease` to `ttl` seconds from now.

    With `label`, the lease's label becomes it (an empty one: none); without, it is kept.
    """
    body = models().RenewRequest(
        owner_token=lease.owner_token, fencing_token=lease.fencing_token, ttl_seconds=ttl
    )
    if label is not None:
        body.label = label
    expected = functools.partial(
        _reading.lease,
        key=lease.key,
        owner_token=lease.owner_token,
        fencing_token=lease.fencing_token,
    )
    return Call(RENEW, lease.key, request_id, {"key": lease.key, "body": body}, expected)


def renew_many(leases: Sequence[LockLease], *, request_id: str) -> Call[list[Renewed]]:
    """The request that renews each of `leases` for its own ttl, in one batch."""
    made = models()
    body = made.RenewLeasesRequest(
        leases=[
            made.LeaseRenewal(
                key=lease.key,
                owner_token=lease.owner_token,
                fencing_token=lease.fencing_token,
                ttl_seconds=lease.ttl_seconds,
            )
            for lease in leases
        ]
    )
    expected = functools.partial(_reading.renewals, leases=tuple(leases), request_id=request_id)
    return Call(RENEW_MANY, f"{len(leases)} leases", request_id, {"body": body}, expected)


def renewals(leases: Sequence[LockLease], *, request_id: str) -> Call[list[Renewed]]:
    """The request that renews `leases`, each for its own ttl, with one result per lease.

    A plain renew for one lease (what every server has), a batch for more.
    """
    if len(leases) > 1:
        return renew_many(leases, request_id=request_id)
    (lease,) = leases
    one = renew(lease, ttl=lease.ttl_seconds, request_id=request_id)

    def convert(parsed: object) -> list[Renewed]:
        return [one.convert(parsed)]

    return Call(one.operation, one.subject, one.request_id, one.kwargs, convert)


def release(lease: LockLease, *, request_id: str) -> Call[None]:
    """The request that ends `lease`."""
    body = models().ReleaseRequest(owner_token=lease.owner_token, fencing_token=lease.fencing_token)
    key = lease.key
    return Call(RELEASE, key, request_id, {"key": key, "body": body}, _reading.nothing)


def get(key: str, *, request_id: str) -> Call[LockState]:
    """The request that reads `key`'s state."""
    return Call(GET, key, request_id, {"key": key}, functools.partial(_reading.state, key=key))


def check(key: str, fencing_token: int, *, request_id: str) -> Call[bool]:
    """The fence check: whether `fencing_token` names a live lease of `key`."""
    convert = functools.partial(_reading.live, key=key, fencing_token=fencing_token)
    kwargs = {"key": key, "fencing_token": fencing_token}
    return Call(CHECK, key, request_id, kwargs, convert)


def force_release(key: str, *, request_id: str) -> Call[ForceReleaseResult]:
    """The request that removes `key`'s live leases, whatever their owners."""
    convert = functools.partial(_reading.force_release, key=key)
    return Call(FORCE_RELEASE, key, request_id, {"key": key}, convert)


def watch(key: str, *, after_version: int, wait: float, request_id: str) -> Call[LockState]:
    """The long poll that reads `key` once its version differs from `after_version`.

    The server answers then, or when `wait` seconds pass, with the key's state either way.
    """
    kwargs = {"key": key, "after_version": after_version, "wait_seconds": wait}
    return Call(WATCH, key, request_id, kwargs, functools.partial(_reading.state, key=key))


def list_page(
    *, prefix: str, after: str, limit: int, request_id: str
) -> Call[Page[LockState, str]]:
    """The request for one page of the keys that are held or waited for."""
    kwargs: dict[str, Any] = {"limit": limit}
    if prefix:
        kwargs["prefix"] = prefix
    if after:
        kwargs["after"] = after
    convert = functools.partial(_reading.page, prefix=prefix, after=after)
    return Call(LIST, prefix or "*", request_id, kwargs, convert)


def holders_page(
    key: str, *, after: int, limit: int, request_id: str
) -> Call[Page[LockHolder, int]]:
    """The request for one page of `key`'s live leases, after the fencing token `after`."""
    kwargs: dict[str, Any] = {"key": key, "limit": limit}
    if after:
        kwargs["after"] = after
    convert = functools.partial(_reading.holders_page, after=after)
    return Call(HOLDERS, key, request_id, kwargs, convert)
