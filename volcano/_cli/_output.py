"""What the lock commands print: the API's field names, for people or (`--json`) for scripts.

Human output is one `field  value` line per field; `--json` is one JSON object on one line,
with the fields named and typed as the HTTP API names them (`expires_at` in RFC 3339, UTC).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    import volcano

Fields = dict[str, str | int | float | bool | None]


def lease(value: volcano.LockLease) -> Fields:
    """A lease's fields, owner token included: the caller needs it to renew or release."""
    return {
        "key": value.key,
        "owner_token": value.owner_token,
        "fencing_token": value.fencing_token,
        "expires_at": _timestamp(value.expires_at),
        "ttl_seconds": value.ttl_seconds,
    }


def state(value: volcano.LockState) -> Fields:
    """A key's state, as `get` reports it."""
    return {
        "key": value.key,
        "held": value.held,
        "expires_at": None if value.expires_at is None else _timestamp(value.expires_at),
        "fencing_token": value.fencing_token,
    }


def released(key: str, *, released: bool, fencing_token: int | None) -> Fields:
    """What `release` and `force-release` ended: the shape of the API's ForceReleaseResult."""
    return {"key": key, "released": released, "fencing_token": fencing_token}


def render(fields: Fields, *, as_json: bool) -> str:
    """The text to print for `fields`."""
    if as_json:
        return json.dumps(fields)
    width = max(len(name) for name in fields) + 2
    return "\n".join(f"{name:<{width}}{_human(value)}" for name, value in fields.items())


def _human(value: str | int | float | bool | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _timestamp(value: datetime) -> str:
    # The SDK's datetimes are UTC; spell them as the API does.
    return value.isoformat().replace("+00:00", "Z")
