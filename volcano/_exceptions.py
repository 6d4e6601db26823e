"""Every error the SDK raises, under one root.

```
Error
├── InvalidArgumentError (also a ValueError)   an argument refused before anything was sent
├── ClientClosedError                           the client was closed
├── GuardStateError (also a RuntimeError)       a with_lock guard used out of order
├── LockLostError                               a guard's lease ran out without a renewal
├── APIConnectionError                          no HTTP answer: connect, read, write, protocol
│   └── APITimeoutError                         no answer within the timeout
└── APIStatusError                              an HTTP answer other than success
    ├── BadRequestError                 400
    ├── AuthenticationError             401
    ├── PermissionDeniedError           403
    ├── NotFoundError                   404  (any other code)
    │   ├── GroupNotFoundError          404 group_not_found
    │   └── MemberNotFoundError         404 member_not_found
    ├── MethodNotAllowedError           405
    ├── ConflictError                   409  (any other code)
    │   ├── LockHeldError               409 lock_held
    │   ├── LeaseNotHeldError           409 lease_not_held
    │   ├── LimitMismatchError          409 limit_mismatch
    │   ├── ModeMismatchError           409 mode_mismatch
    │   ├── QuotaExceededError          409 quota_exceeded
    │   ├── SharedWithLimitError        409 shared_with_limit
    │   ├── RequestIdReusedError        409 request_id_reused
    │   ├── GroupExistsError            409 group_exists
    │   ├── GroupNotEmptyError          409 group_not_empty
    │   └── MemberExistsError           409 member_exists
    ├── PayloadTooLargeError            413
    ├── UnprocessableEntityError        422
    ├── RateLimitError                  429
    ├── InternalServerError             500 and every other 5xx but 503
    ├── ServiceUnavailableError         503
    └── UnexpectedResponseError         an undocumented status, or a body that breaks the spec
```

Status errors are chosen by status code (`status_error`); a body that is not a Volcano error
object still gets its status's class, with `code` None. No error's text holds a key or an
owner token.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any


class _ErrorType(type):
    """The type of `Error`, which finds `volcano.ConflictError` as `volcano.Error.ConflictError`.

    That is the Ruby SDK's spelling (`Volcano::Error::ConflictError`).

    An `except` clause names its class only once an exception is raised, so a wrong guess there
    would turn a handled `LockHeldError` into an AttributeError at the worst moment; it finds the
    class instead. Type checkers see no such attribute, and point to the one spelling.
    """

    if not TYPE_CHECKING:

        def __getattr__(cls, name: str) -> type[Error]:
            found = globals().get(name) if cls is Error and not name.startswith("_") else None
            if isinstance(found, type) and issubclass(found, Error):
                return found
            raise AttributeError(f"type object {cls.__name__!r} has no attribute {name!r}")


class Error(Exception, metaclass=_ErrorType):
    """The root of every error the volcano package raises.

    Every error sits directly under `volcano` (`volcano.ConflictError`); the Ruby SDK's
    `volcano.Error.ConflictError` finds the same class, though type checkers know only the
    first spelling.
    """


class InvalidArgumentError(Error, ValueError):
    """An argument was refused before any request was sent; the message names it."""


class ClientClosedError(Error):
    """The client was closed: it sends nothing more, and its guards are lost."""


class GuardStateError(Error, RuntimeError):
    """A with_lock guard was used out of order: entered twice, or read before it was entered."""


class LockLostError(Error):
    """A with_lock guard's lease reached its deadline without a successful renewal.

    Its `__cause__` is the last renewal error, when there was one.
    """


class APIConnectionError(Error):
    """No HTTP answer arrived: the connection failed, broke, or spoke bad HTTP.

    The operation may still have happened on the server. Repeat an acquisition with the same
    owner token and request id to learn its outcome.

    Attributes:
        request_id: The X-Request-Id that was sent.
    """

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id

    def __str__(self) -> str:
        if self.request_id is None:
            return self.message
        return f"{self.message} (request_id={self.request_id})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, request_id={self.request_id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), (self.message,), {"request_id": self.request_id}))


class APITimeoutError(APIConnectionError):
    """No answer arrived within the timeout."""


class APIStatusError(Error):
    """The server (or something in between) answered with a status other than success.

    Attributes:
        status_code: The HTTP status.
        code: The Volcano error code (`lock_held`, ...), or None when the body was not a
            Volcano error object.
        message: The server's explanation, or a description of what arrived.
        request_id: The request id from the error body, else the X-Request-Id response header.
        retry_after: The Retry-After header in seconds, or None when absent or unreadable.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        code: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = f"{self.status_code} {self.code}" if self.code else str(self.status_code)
        tail = "" if self.request_id is None else f" (request_id={self.request_id})"
        return f"{head}: {self.message}{tail}"

    def __repr__(self) -> str:
        head = f"{self.status_code} {self.code}" if self.code else str(self.status_code)
        return f"{type(self).__name__}({head}: {self.message}, request_id={self.request_id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {
            "status_code": self.status_code,
            "code": self.code,
            "request_id": self.request_id,
            "retry_after": self.retry_after,
        }
        return (_rebuild, (type(self), (self.message,), fields))


class BadRequestError(APIStatusError):
    """400: the request was malformed (not JSON, or a malformed header)."""


class AuthenticationError(APIStatusError):
    """401: the anon key or service key is missing, unknown, or from two projects."""


class PermissionDeniedError(APIStatusError):
    """403: the credential may not do this (the anon key sent as the service key)."""


class NotFoundError(APIStatusError):
    """404: no such route on this server (or no such group or member: the subclasses)."""


class GroupNotFoundError(NotFoundError):
    """404 group_not_found: the group was never created, or was deleted (tooz's GroupNotCreated)."""


class MemberNotFoundError(NotFoundError):
    """404 member_not_found: the member has not joined, or left, was removed or expired."""


class MethodNotAllowedError(APIStatusError):
    """405: the route does not take this method."""


class ConflictError(APIStatusError):
    """409: the request conflicts with the lock's state or an earlier request."""


class LockHeldError(ConflictError):
    """409 lock_held: other owners hold the lease, or every slot of a semaphore.

    Also when others wait in line first. `retry_after` says how long until the soonest lease
    ends.
    """


class LeaseNotHeldError(ConflictError):
    """409 lease_not_held: the lease expired, was released, force-released or taken over."""


class LimitMismatchError(ConflictError):
    """409 limit_mismatch: the key is in use with another limit than this acquire asked for.

    A key's limit belongs to it while it has a live lease or a waiter; once it is free, the
    next acquire sets it. Acquire with the key's own limit, or wait until it is free.

    Attributes:
        limit: The limit the key is in use with, or None when the answer did not say.
    """

    def __init__(self, message: str, *, limit: int | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        rebuild, (cls, args, fields) = super().__reduce__()
        return (rebuild, (cls, args, {**fields, "limit": self.limit}))


class QuotaExceededError(ConflictError):
    """409 quota_exceeded: the request would pass one of the server's per-project quotas.

    The message names the quota (keys in use per project, holders per key, label bytes) and
    the server option that sets it. Not retried: free keys (they are deleted once unused for
    the server's key retention), ask for fewer holders, or shorten the label.
    """


class ModeMismatchError(ConflictError):
    """409 mode_mismatch: this owner token holds the key in the other mode.

    A lease keeps its mode (shared or exclusive) for life: the owner of a shared lease cannot
    take the key exclusive with the same token, nor the other way round. Release the lease,
    then acquire in the mode wanted (others waiting in line may come first).
    """


class SharedWithLimitError(ConflictError):
    """409 shared_with_limit: shared leases and a semaphore's limit do not mix on one key.

    A shared acquire of a key in use as a semaphore, or an acquire with a limit above 1 of a
    key held shared. (One acquire asking for both is refused before it is sent, with
    `InvalidArgumentError`; a server answers it with this error too.)
    """


class RequestIdReusedError(ConflictError):
    """409 request_id_reused: this request id was already used for a different request."""


class GroupExistsError(ConflictError):
    """409 group_exists: the group exists already (tooz's GroupAlreadyExist)."""


class GroupNotEmptyError(ConflictError):
    """409 group_not_empty: the group has live members; they leave before it can be deleted."""


class MemberExistsError(ConflictError):
    """409 member_exists: another owner token holds this member of the group.

    `retry_after` says how long until that membership expires, unless it is renewed.
    """


class PayloadTooLargeError(APIStatusError):
    """413: the request body is larger than the server accepts."""


class UnprocessableEntityError(APIStatusError):
    """422: the request parsed but broke the schema."""


class RateLimitError(APIStatusError):
    """429: too many requests for this project; `retry_after` says when to try again."""


class InternalServerError(APIStatusError):
    """500, or any other 5xx but 503: the operation may or may not have happened."""


class ServiceUnavailableError(APIStatusError):
    """503: the server cannot reach its storage right now; `retry_after` says when to retry."""


class UnexpectedResponseError(APIStatusError):
    """An undocumented status, or a response body that does not match the spec."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    500: InternalServerError,
    503: ServiceUnavailableError,
}

_CONFLICT_BY_CODE: dict[str, type[ConflictError]] = {
    "lock_held": LockHeldError,
    "lease_not_held": LeaseNotHeldError,
    "limit_mismatch": LimitMismatchError,
    "mode_mismatch": ModeMismatchError,
    "quota_exceeded": QuotaExceededError,
    "shared_with_limit": SharedWithLimitError,
    "request_id_reused": RequestIdReusedError,
    "group_exists": GroupExistsError,
    "group_not_empty": GroupNotEmptyError,
    "member_exists": MemberExistsError,
}

_NOT_FOUND_BY_CODE: dict[str, type[NotFoundError]] = {
    "group_not_found": GroupNotFoundError,
    "member_not_found": MemberNotFoundError,
}


def status_error(
    status_code: int,
    *,
    code: str | None,
    message: str,
    request_id: str | None,
    retry_after: float | None = None,
    limit: int | None = None,
) -> APIStatusError:
    """Build the error for an unsuccessful answer, choosing its class by status and code.

    `limit` is the key's limit that a `limit_mismatch` answer names; other errors ignore it.
    """
    cls = _status_class(status_code, code)
    fields: dict[str, Any] = {
        "status_code": status_code,
        "code": code,
        "request_id": request_id,
        "retry_after": retry_after,
    }
    if issubclass(cls, LimitMismatchError):
        return cls(message, limit=limit, **fields)
    return cls(message, **fields)


def parse_retry_after(value: str | None) -> float | None:
    """Read a Retry-After header given in seconds; None when absent or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _status_class(status_code: int, code: str | None) -> type[APIStatusError]:
    if status_code == 409 and code in _CONFLICT_BY_CODE:
        return _CONFLICT_BY_CODE[code]
    if status_code == 404 and code in _NOT_FOUND_BY_CODE:
        return _NOT_FOUND_BY_CODE[code]
    if status_code in _BY_STATUS:
        return _BY_STATUS[status_code]
    if 500 <= status_code <= 599:
        return InternalServerError
    return UnexpectedResponseError


def _rebuild(cls: type[Error], args: tuple[Any, ...], fields: dict[str, Any]) -> Error:
    # Exceptions pickle through their args only; these carry keyword fields too.
    return cls(*args, **fields)
