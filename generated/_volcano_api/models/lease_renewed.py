from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.lock_lease import LockLease


T = TypeVar("T", bound="LeaseRenewed")


@_attrs_define
class LeaseRenewed:
    """An entry of a batch renewal that was renewed, with its lease as renewed.

    Attributes:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
        lease (LockLease): A live lease as granted. Keep `owner_token` private.
    """

    key: str
    lease: LockLease
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        lease = self.lease.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "lease": lease,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lock_lease import LockLease

        d = dict(src_dict)
        key = d.pop("key")

        lease = LockLease.from_dict(d.pop("lease"))

        lease_renewed = cls(
            key=key,
            lease=lease,
        )

        lease_renewed.additional_properties = d
        return lease_renewed

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
