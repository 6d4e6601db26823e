"""The exit statuses of `volcano`, and the one line that explains each error.

Statuses follow the BSD sysexits convention where one fits, so scripts and supervisors can
tell "someone else has the lock" (75) from "the server is down" (69) without reading text:

    0     success (for `locks run`: the command's own status, whatever it is)
    1     `locks check`: the fencing token is not live
    64    usage error: a bad or missing argument or variable, a --limit other than the key's
          own, --shared on a key in use with a --limit (or the other way round), or a mode
          other than the one the --token holds the key in
    69    the server could not be reached (or answered 5xx / 429)
    70    the server gave an answer this tool did not expect
    75    the lock is held by another owner (every slot, with a --limit)
    76    ownership was lost (the lease expired, was released, force-released or taken over)
    77    the server refused the credentials
    126   `locks run`: the command could not be executed
    127   `locks run`: the command was not found
    128+N `locks run`: the command was ended by signal N
"""

from __future__ import annotations

import enum

import volcano


class Exit(enum.IntEnum):
    """The exit statuses `volcano` chooses itself."""

    OK = 0
    NOT_LIVE = 1
    USAGE = 64
    UNAVAILABLE = 69
    UNEXPECTED = 70
    BUSY = 75
    LOST = 76
    REFUSED = 77
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    SIGNALLED = 128


class Failure(Exception):
    """A failure reported as one line on stderr and an exit status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def failure(
    error: volcano.Error, *, key: str, api_url: str, limit: int = 1, shared: bool = False
) -> Failure:
    """The exit status and one-line explanation for an error the SDK raised.

    `limit` is the --limit asked for, which names what was held (a lock or every slot), and
    `shared` whether --shared was given.
    """
    if isinstance(error, volcano.LockHeldError) and shared:
        return Failure(Exit.BUSY, f"{key!r} is not free for a shared lease: {error.message}")
    status, message = _explain(error, repr(key), api_url, limit)
    return Failure(status, message)


def _explain(error: volcano.Error, lock: str, api_url: str, limit: int) -> tuple[Exit, str]:  # noqa: PLR0911 - one branch per class of error
    if isinstance(error, volcano.InvalidArgumentError):
        return Exit.USAGE, str(error)
    if isinstance(error, volcano.LockHeldError):
        return Exit.BUSY, _held(error, lock, limit)
    if isinstance(error, volcano.ModeMismatchError):
        return Exit.USAGE, (
            f"this --token holds {lock} in the other mode (shared or exclusive): release that "
            "lease first"
        )
    if isinstance(error, volcano.SharedWithLimitError):
        return Exit.USAGE, f"{lock}: --shared and --limit do not mix on one key: {error.message}"
    if isinstance(error, volcano.LimitMismatchError):
        theirs = "another limit" if error.limit is None else f"--limit {error.limit}"
        return Exit.USAGE, (
            f"{lock} is in use with {theirs}, not --limit {limit}: every holder of a key gives "
            "the same limit (it can change once the key is free)"
        )
    if isinstance(error, volcano.LeaseNotHeldError):
        return Exit.LOST, f"the lease on {lock} is not held: {error}"
    if isinstance(error, volcano.UnprocessableEntityError):  # the server judged an argument
        return Exit.USAGE, f"the server refused an argument: {error}"
    if isinstance(error, volcano.RequestIdReusedError):
        return Exit.USAGE, f"that request id was already used for a different request: {error}"
    if isinstance(error, volcano.AuthenticationError | volcano.PermissionDeniedError):
        return Exit.REFUSED, (
            f"the server refused the credentials ({error}); "
            "check VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY"
        )
    if isinstance(error, volcano.APIConnectionError):
        return Exit.UNAVAILABLE, f"cannot reach the server at {api_url}: {error}"
    if isinstance(
        error,
        volcano.ServiceUnavailableError | volcano.InternalServerError | volcano.RateLimitError,
    ):
        return Exit.UNAVAILABLE, f"the server at {api_url} cannot serve the request now: {error}"
    return Exit.UNEXPECTED, f"unexpected answer from the server: {error}"


def _held(error: volcano.LockHeldError, lock: str, limit: int) -> str:
    """What holds the lock: another owner, shared holders, or every slot of a semaphore."""
    if limit == 1:
        later = "" if error.retry_after is None else f"; its lease ends in {error.retry_after:g}s"
        if "held shared" in error.message:  # by readers: an exclusive lease waits for them all
            return f"{lock} is held shared by other owners{later}"
        return f"{lock} is held by another owner{later}"
    later = "" if error.retry_after is None else f"; the first ends in {error.retry_after:g}s"
    return f"all {limit} slots of {lock} are held by other owners{later}"
