from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.lock_mode import LockMode

T = TypeVar("T", bound="LockHolder")


@_attrs_define
class LockHolder:
    """One live lease of a key, as anyone may see it (never its owner token).

    Attributes:
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        expires_at (datetime.datetime): When this lease ends by the server's clock (UTC, RFC 3339).
        label (None | str): A public label for a lease: 0 to 200 printable ASCII characters (space to `~`), such
            as a host name and port. Shown to anyone who reads the key; never put a secret in it.
            An empty label is no label, shown as null. In a request, null is the same as leaving
            the field out.
        mode (LockMode): How a lease holds its key: `shared` (beside other shared leases) or `exclusive` (alone,
            or as one slot of a semaphore). A lease keeps its mode for life.
    """

    fencing_token: int
    expires_at: datetime.datetime
    label: None | str
    mode: LockMode
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        fencing_token = self.fencing_token

        expires_at = self.expires_at.isoformat()

        label: None | str
        label = self.label

        mode = self.mode.value

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "fencing_token": fencing_token,
                "expires_at": expires_at,
                "label": label,
                "mode": mode,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        fencing_token = d.pop("fencing_token")

        expires_at = datetime.datetime.fromisoformat(d.pop("expires_at"))

        def _parse_label(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        label = _parse_label(d.pop("label"))

        mode = LockMode(d.pop("mode"))

        lock_holder = cls(
            fencing_token=fencing_token,
            expires_at=expires_at,
            label=label,
            mode=mode,
        )

        lock_holder.additional_properties = d
        return lock_holder

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
