"""Volcano: project-scoped leases (distributed locks) for trusted server code.

```python
import volcano

with volcano.Client() as client:  # VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY, VOLCANO_API_URL
    lease = client.locks.acquire("daily-report", ttl=30)
    try:
        print("fencing token", lease.fencing_token)
    finally:
        client.locks.release("daily-report", lease)

    with client.locks.with_lock("daily-report", ttl=30) as guard:
        guard.check()  # raises volcano.LockLostError once ownership is lost
```

`AsyncClient` has the same surface for asyncio. Every error is a `volcano.Error`. The
`volcano` logger reports requests at DEBUG (operation, lock key, status, request id, duration)
and leases at risk or lost at WARNING; it never logs API keys or owner tokens (lock key names
are not secrets, and are logged). The package adds no handler.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import TYPE_CHECKING, Any

from ._client import Client, Locks
from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ClientClosedError,
    ConflictError,
    Error,
    GroupExistsError,
    GroupNotEmptyError,
    GroupNotFoundError,
    GuardStateError,
    InternalServerError,
    InvalidArgumentError,
    LeaseNotHeldError,
    LimitMismatchError,
    LockHeldError,
    LockLostError,
    MemberExistsError,
    MemberNotFoundError,
    MethodNotAllowedError,
    ModeMismatchError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    RequestIdReusedError,
    ServiceUnavailableError,
    SharedWithLimitError,
    UnexpectedResponseError,
    UnprocessableEntityError,
)
from ._version import __version__

if TYPE_CHECKING:
    from ._async_client import AsyncClient, AsyncLocks
    from ._elections import (
        AsyncCampaign,
        AsyncElections,
        AsyncLeaderObserver,
        AsyncLeadership,
        Campaign,
        Elections,
        Leader,
        LeaderObserver,
        Leadership,
    )
    from ._group_models import GroupMember, GroupState, MemberRemoval, Membership
    from ._group_watch import AsyncGroupWatch, GroupWatch
    from ._groups import AsyncGroups, Groups
    from ._guard import AsyncLockGuard, LockGuard
    from ._membership import AsyncMembershipGuard, MembershipGuard
    from ._models import ForceReleaseResult, LockHolder, LockLease, LockMode, LockState
    from ._ownership import GuardState
    from ._watch import AsyncLockWatch, LockWatch

# Loaded on first use (`__getattr__`), so that `import volcano` brings in neither attrs nor the
# renewal machinery: the values come with the first answer, the rest with its first user.
_LAZY = {
    "AsyncClient": "_async_client",
    "AsyncLocks": "_async_client",
    "AsyncCampaign": "_elections",
    "AsyncElections": "_elections",
    "AsyncLeaderObserver": "_elections",
    "AsyncLeadership": "_elections",
    "Campaign": "_elections",
    "Elections": "_elections",
    "Leader": "_elections",
    "LeaderObserver": "_elections",
    "Leadership": "_elections",
    "GroupMember": "_group_models",
    "GroupState": "_group_models",
    "MemberRemoval": "_group_models",
    "Membership": "_group_models",
    "AsyncGroupWatch": "_group_watch",
    "GroupWatch": "_group_watch",
    "AsyncGroups": "_groups",
    "Groups": "_groups",
    "AsyncLockGuard": "_guard",
    "LockGuard": "_guard",
    "AsyncMembershipGuard": "_membership",
    "MembershipGuard": "_membership",
    "ForceReleaseResult": "_models",
    "LockHolder": "_models",
    "LockLease": "_models",
    "LockMode": "_models",
    "LockState": "_models",
    "GuardState": "_ownership",
    "AsyncLockWatch": "_watch",
    "LockWatch": "_watch",
}

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncCampaign",
    "AsyncClient",
    "AsyncElections",
    "AsyncGroupWatch",
    "AsyncGroups",
    "AsyncLeaderObserver",
    "AsyncLeadership",
    "AsyncLockGuard",
    "AsyncLockWatch",
    "AsyncLocks",
    "AsyncMembershipGuard",
    "AuthenticationError",
    "BadRequestError",
    "Campaign",
    "Client",
    "ClientClosedError",
    "ConflictError",
    "Elections",
    "Error",
    "ForceReleaseResult",
    "GroupExistsError",
    "GroupMember",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "GroupState",
    "GroupWatch",
    "Groups",
    "GuardState",
    "GuardStateError",
    "InternalServerError",
    "InvalidArgumentError",
    "Leader",
    "LeaderObserver",
    "Leadership",
    "LeaseNotHeldError",
    "LimitMismatchError",
    "LockGuard",
    "LockHeldError",
    "LockHolder",
    "LockLease",
    "LockLostError",
    "LockMode",
    "LockState",
    "LockWatch",
    "Locks",
    "MemberExistsError",
    "MemberNotFoundError",
    "MemberRemoval",
    "Membership",
    "MembershipGuard",
    "MethodNotAllowedError",
    "ModeMismatchError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RateLimitError",
    "RequestIdReusedError",
    "ServiceUnavailableError",
    "SharedWithLimitError",
    "UnexpectedResponseError",
    "UnprocessableEntityError",
    "__version__",
]


def _publish(found: object) -> None:
    """Make a public class say `volcano.X`, where users reach it (as httpx and openai do).

    Tracebacks name `volcano.AuthenticationError`, not `volcano._exceptions...`, and pickles
    refer to `volcano.X`, which stays put when the private modules move.

    Annotations written as strings are resolved first, in the module that wrote them, so that
    `typing.get_type_hints` (attrs, pydantic, FastAPI) still reads them once `__module__` says
    `volcano`.
    """
    if not isinstance(found, type) or found.__module__ == __name__:
        return
    own = inspect.get_annotations(found)
    if any(isinstance(hint, str) for hint in own.values()):
        hints = typing.get_type_hints(found)
        found.__annotations__ = {name: hints[name] for name in own}
    found.__module__ = __name__


for _name in __all__:
    if _name in globals():
        _publish(globals()[_name])
del _name


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'volcano' has no attribute {name!r}")
    found = getattr(importlib.import_module(f".{module}", __name__), name)
    _publish(found)
    globals()[name] = found  # found by the next look-up without coming here
    return found


def __dir__() -> list[str]:
    # Only the public names: not the private modules, nor the typing helpers used above.
    return sorted(__all__)
