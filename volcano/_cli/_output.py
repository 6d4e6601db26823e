"""What the lock commands print: the API's field names, for people or (`--json`) for scripts.

Human output is one `field  value` line per field (a list of holders: its length, then one
indented line per holder under a header); `--json` is one JSON object on one line, with the
fields named and typed as the HTTP API names them (`expires_at` in RFC 3339, UTC).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    import volcano

Scalar = str | int | float | bool | None
Fields = dict[str, Scalar | list[dict[str, Scalar]]]


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
    """A key's state, as `get` reports it: its holders too (never an owner token).

    At most 20 holders are listed (those ending soonest); `holder_count` counts them all.
    """
    return {
        "key": value.key,
        "held": value.held,
        "expires_at": None if value.expires_at is None else _timestamp(value.expires_at),
        "fencing_token": value.fencing_token,
        "limit": value.limit,
        "waiters": value.waiters,
        "version": value.version,
        "holder_count": value.holder_count,
        "holders": [
            {
                "fencing_token": holder.fencing_token,
                "expires_at": _timestamp(holder.expires_at),
                "label": holder.label,
                "mode": holder.mode.value,
            }
            for holder in value.holders
        ],
    }


def released(key: str, *, released: bool, fencing_token: int | None, count: int) -> Fields:
    """What `release` and `force-release` ended: the shape of the API's ForceReleaseResult."""
    return {
        "key": key,
        "released": released,
        "fencing_token": fencing_token,
        "released_count": count,
    }


def checked(key: str, fencing_token: int, *, live: bool) -> Fields:
    """What `check` found."""
    return {"key": key, "fencing_token": fencing_token, "live": live}


def render(fields: Fields, *, as_json: bool) -> str:
    """The text to print for `fields`."""
    if as_json:
        return json.dumps(fields)
    width = max(len(name) for name in fields) + 2
    lines = []
    for name, value in fields.items():
        if isinstance(value, list):
            lines.append(f"{name:<{width}}{len(value)}")
            lines.extend(_table(value))
        else:
            lines.append(f"{name:<{width}}{human(value)}")
    return "\n".join(lines)


def _table(rows: list[dict[str, Scalar]]) -> list[str]:
    """Rows as aligned columns under a header, indented by two spaces; nothing for no rows."""
    if not rows:
        return []
    cells = [list(rows[0])] + [[human(value) for value in row.values()] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    return [
        "  "
        + "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def human(value: Scalar) -> str:
    """A value as people read it: `-` for none, yes/no, whole numbers without `.0`."""
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
