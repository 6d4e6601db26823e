from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="LockLease")


@_attrs_define
class LockLease:
    """A live lease as granted. Keep `owner_token` private.

    Attributes:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        expires_at (datetime.datetime): When the lease ends by the server's clock, in UTC (RFC 3339).
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
    """

    key: str
    owner_token: str
    fencing_token: int
    expires_at: datetime.datetime
    ttl_seconds: float
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        owner_token = self.owner_token

        fencing_token = self.fencing_token

        expires_at = self.expires_at.isoformat()

        ttl_seconds = self.ttl_seconds

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "owner_token": owner_token,
                "fencing_token": fencing_token,
                "expires_at": expires_at,
                "ttl_seconds": ttl_seconds,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        key = d.pop("key")

        owner_token = d.pop("owner_token")

        fencing_token = d.pop("fencing_token")

        expires_at = datetime.datetime.fromisoformat(d.pop("expires_at"))

        ttl_seconds = d.pop("ttl_seconds")

        lock_lease = cls(
            key=key,
            owner_token=owner_token,
            fencing_token=fencing_token,
            expires_at=expires_at,
            ttl_seconds=ttl_seconds,
        )

        lock_lease.additional_properties = d
        return lock_lease

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
