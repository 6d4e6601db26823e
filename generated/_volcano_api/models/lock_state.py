from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

T = TypeVar("T", bound="LockState")


@_attrs_define
class LockState:
    """A key's availability. It never contains the owner token.

    Attributes:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
        held (bool): Whether a live lease exists.
        expires_at (datetime.datetime | None): When the live lease ends (UTC, RFC 3339); null when not held.
        fencing_token (int | None): The live lease's fencing token when held, else the last one issued for the key,
            else null.
    """

    key: str
    held: bool
    expires_at: datetime.datetime | None
    fencing_token: int | None

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        held = self.held

        expires_at: None | str
        if isinstance(self.expires_at, datetime.datetime):
            expires_at = self.expires_at.isoformat()
        else:
            expires_at = self.expires_at

        fencing_token: int | None
        fencing_token = self.fencing_token

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "key": key,
                "held": held,
                "expires_at": expires_at,
                "fencing_token": fencing_token,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        key = d.pop("key")

        held = d.pop("held")

        def _parse_expires_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                expires_at_type_0 = datetime.datetime.fromisoformat(data)

                return expires_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        expires_at = _parse_expires_at(d.pop("expires_at"))

        def _parse_fencing_token(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fencing_token = _parse_fencing_token(d.pop("fencing_token"))

        lock_state = cls(
            key=key,
            held=held,
            expires_at=expires_at,
            fencing_token=fencing_token,
        )

        return lock_state
