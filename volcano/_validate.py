"""Checks on caller arguments, made before anything is sent; shared by both clients.

Each check returns the value as it will be sent or raises `InvalidArgumentError` naming the
argument. Owner tokens are secrets, so their checks describe a bad value without echoing it.
"""

from __future__ import annotations

import math
import os
import re
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

from ._exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._exceptions import Error
    from ._models import LockLease

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
KEY_MAX_LENGTH = 255
UUID_PATTERN = re.compile(
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
)
TTL_MIN_SECONDS = 0.1
TTL_MAX_SECONDS = 86400.0
TIMEOUT_MAX_SECONDS = 3600.0
LIMIT_MAX = 1000
FENCING_TOKEN_MAX = 2**53 - 1
LABEL_MAX_LENGTH = 200
LABEL_PATTERN = re.compile(r"[ -~]*")  # printable ASCII: space to '~'
KEY_PART_PATTERN = re.compile(r"[A-Za-z0-9._:-]*")
PAGE_MAX = 500


def key(value: object) -> str:
    """Return a valid lock key: 1 to 255 characters, a letter or digit, then [A-Za-z0-9._:-]."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"key must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= KEY_MAX_LENGTH or not KEY_PATTERN.fullmatch(value):
        raise InvalidArgumentError(
            f"key must be 1 to {KEY_MAX_LENGTH} characters: a letter or digit, then letters, "
            f"digits, '.', '_', ':' or '-'; got {_shorten(value)}"
        )
    return value


def ttl(value: object) -> int | float:
    """Return a lease time to live in seconds (0.1 to 86400) as a JSON number."""
    seconds = _seconds("ttl", value)
    if not TTL_MIN_SECONDS <= seconds <= TTL_MAX_SECONDS:
        raise InvalidArgumentError(
            f"ttl must be from {TTL_MIN_SECONDS} to {TTL_MAX_SECONDS:g} seconds, got {seconds!r}"
        )
    return seconds


def wait(value: object) -> float:
    """Return how long an acquire may wait for the lock, in seconds: 0 (the default) or more."""
    seconds = float(_seconds("wait", value))
    if seconds < 0:
        raise InvalidArgumentError(f"wait must be 0 or more seconds, got {seconds!r}")
    return seconds


def label(value: object) -> str | None:
    """Return a lease's public label: None, or 0 to 200 printable ASCII characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"label must be a str or None, got {type(value).__name__}")
    if len(value) > LABEL_MAX_LENGTH or not LABEL_PATTERN.fullmatch(value):
        raise InvalidArgumentError(
            f"label must be 0 to {LABEL_MAX_LENGTH} printable ASCII characters (space to '~'),"
            f" got {_shorten(value)}"
        )
    return value


def prefix(value: object) -> str:
    """Return a key prefix for listing: up to 255 of the characters keys are made of."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"prefix must be a str, got {type(value).__name__}")
    if len(value) > KEY_MAX_LENGTH or not KEY_PART_PATTERN.fullmatch(value):
        raise InvalidArgumentError(
            f"prefix must be up to {KEY_MAX_LENGTH} letters, digits, '.', '_', ':' or '-';"
            f" got {_shorten(value)}"
        )
    return value


HOLDERS_PAGE_MAX = 100
"""The most leases one page of `client.locks.holders` asks for (openapi.yaml)."""


def page_size(value: object, most: int = PAGE_MAX) -> int:
    """Return how many items one page of a listing asks for: 1 to `most` (keys: 500)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidArgumentError(
            f"page_size must be a whole number (int) from 1 to {most}, got {value!r}"
        )
    return int(value)


def version(value: object) -> int | None:
    """Return a key's version to watch after: None, or a whole number from 0 to 2^53-1."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= FENCING_TOKEN_MAX:
        raise InvalidArgumentError(
            f"after_version must be None or a whole number from 0 to 2^53-1, got {value!r}"
        )
    return int(value)


def limit(value: object) -> int:
    """Return a key's limit: how many live leases it may have at once, 1 (a lock) to 1000."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(
            f"limit must be a whole number (int) from 1 to {LIMIT_MAX}, got {type(value).__name__}"
        )
    if not 1 <= value <= LIMIT_MAX:
        raise InvalidArgumentError(f"limit must be from 1 to {LIMIT_MAX}, got {value!r}")
    return int(value)


def shared(value: object, checked_limit: int) -> bool:
    """Return whether a lease is to be shared: a bool, and never with a limit above 1."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"shared must be True or False, got {type(value).__name__}")
    if value and checked_limit != 1:
        raise InvalidArgumentError(
            f"shared=True and limit={checked_limit} do not mix: a shared lock has any number of"
            " shared holders or one exclusive holder, a semaphore N exclusive holders"
        )
    return value


def fencing_token(value: object) -> int:
    """Return a fencing token to check: a whole number from 1 to 2^53-1."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(
            f"fencing_token must be a whole number (int), got {type(value).__name__}"
        )
    if not 1 <= value <= FENCING_TOKEN_MAX:
        raise InvalidArgumentError(
            f"fencing_token must be from 1 to 2^53-1 ({FENCING_TOKEN_MAX}), got {value!r}"
        )
    return int(value)


def timeout(value: object) -> float:
    """Return a request timeout in seconds: more than 0, at most an hour."""
    seconds = float(_seconds("timeout", value))
    if not 0 < seconds <= TIMEOUT_MAX_SECONDS:
        raise InvalidArgumentError(
            f"timeout must be more than 0 and at most {TIMEOUT_MAX_SECONDS:g} seconds, "
            f"got {seconds!r}"
        )
    return seconds


def at_risk_margin(value: object, ttl_seconds: float) -> float | None:
    """Return an at-risk margin in seconds (None: the default), at most half the ttl.

    Renewal starts a third of the way into the ttl; a margin of more than half would call a
    lease at risk before its renewal had a fair chance.
    """
    if value is None:
        return None
    seconds = float(_seconds("at_risk_margin", value))
    if not 0 <= seconds <= ttl_seconds / 2:
        raise InvalidArgumentError(
            f"at_risk_margin must be from 0 to half the ttl ({ttl_seconds / 2:g} seconds), "
            f"got {seconds!r}"
        )
    return seconds


def callback(name: str, value: object) -> Callable[[Error], object] | None:
    """Return a callback (anything callable), or None."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{name} must be callable, got {type(value).__name__}")
    return value


def owner_token(value: object) -> str:
    """Return an owner token (a UUID string in any case, or a `uuid.UUID`) exactly as spelled."""
    return _uuid_string("token", value, secret=True)


def request_id(value: object) -> str:
    """Return a request id (a UUID string in any case, or a `uuid.UUID`) exactly as spelled."""
    return _uuid_string("request_id", value, secret=False)


def new_uuid() -> str:
    """A fresh random (version 4) UUID string, for an owner token or a request id.

    Made from os.urandom like uuid.uuid4(), without importing the uuid module (it pulls in
    `platform`), which keeps `import volcano` light.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def lease_for(key_value: str, lease: object) -> LockLease:
    """Return `lease` when it is a LockLease for `key_value`; renew and release act on no other."""
    from ._models import LockLease  # attrs: never needed before a lease exists

    if not isinstance(lease, LockLease):
        raise InvalidArgumentError(f"lease must be a volcano.LockLease, got {type(lease).__name__}")
    if lease.key != key_value:
        raise InvalidArgumentError(
            f"lease is for key {lease.key!r}, not {key_value!r}: pass the key it was acquired for"
        )
    return lease


def _seconds(name: str, value: object) -> int | float:
    if isinstance(value, timedelta):
        seconds: int | float = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        # int() / float() turn subclasses (numpy scalars, IntEnum) into plain JSON numbers.
        seconds = int(value) if isinstance(value, int) else float(value)
    else:
        raise InvalidArgumentError(
            f"{name} must be seconds (int or float) or a timedelta, got {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise InvalidArgumentError(f"{name} must be finite, got {seconds!r}")
    return seconds


def _uuid_string(name: str, value: object, *, secret: bool) -> str:
    # A uuid.UUID can only exist if its module was imported, so look there instead of importing.
    uuid_module = sys.modules.get("uuid")
    if uuid_module is not None and isinstance(value, uuid_module.UUID):
        return str(value)
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{name} must be a UUID string or uuid.UUID, got {type(value).__name__}"
        )
    if not UUID_PATTERN.fullmatch(value):
        shown = f"a str of length {len(value)}" if secret else _shorten(value)
        raise InvalidArgumentError(
            f"{name} must be a UUID in 8-4-4-4-12 hexadecimal form (any letter case), got {shown}"
        )
    return value


def _shorten(value: str, limit: int = 80) -> str:
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
