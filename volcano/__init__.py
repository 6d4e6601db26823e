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
    GuardStateError,
    InternalServerError,
    InvalidArgumentError,
    LeaseNotHeldError,
    LimitMismatchError,
    LockHeldError,
    LockLostError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    RequestIdReusedError,
    ServiceUnavailableError,
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
    from ._guard import AsyncLockGuard, LockGuard
    from ._models import ForceReleaseResult, LockHolder, LockLease, LockState
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
    "AsyncLockGuard": "_guard",
    "LockGuard": "_guard",
    "ForceReleaseResult": "_models",
    "LockHolder": "_models",
    "LockLease": "_models",
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
    "AsyncLeaderObserver",
    "AsyncLeadership",
    "AsyncLockGuard",
    "AsyncLockWatch",
    "AsyncLocks",
    "AuthenticationError",
    "BadRequestError",
    "Campaign",
    "Client",
    "ClientClosedError",
    "ConflictError",
    "Elections",
    "Error",
    "ForceReleaseResult",
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
    "LockState",
    "LockWatch",
    "Locks",
    "MethodNotAllowedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestIdReusedError",
    "ServiceUnavailableError",
    "UnexpectedResponseError",
    "UnprocessableEntityError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'volcano' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # found by the next look-up without coming here
    return value


def __dir__() -> list[str]:
    # Only the public names: not the private modules, nor the typing helpers used above.
    return sorted(__all__)
