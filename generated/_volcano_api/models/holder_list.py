from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.lock_holder import LockHolder


T = TypeVar("T", bound="HolderList")


@_attrs_define
class HolderList:
    """One page of a key's live leases.

    Attributes:
        holders (list[LockHolder]): The live leases, by fencing token (lowest first).
        next_ (int | None): The `after` of the following page (the last fencing token in this one), or null
            when this page is the last.
    """

    holders: list[LockHolder]
    next_: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        holders = []
        for holders_item_data in self.holders:
            holders_item = holders_item_data.to_dict()
            holders.append(holders_item)

        next_: int | None
        next_ = self.next_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "holders": holders,
                "next": next_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lock_holder import LockHolder

        d = dict(src_dict)
        holders = []
        _holders = d.pop("holders")
        for holders_item_data in _holders:
            holders_item = LockHolder.from_dict(holders_item_data)

            holders.append(holders_item)

        def _parse_next_(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_ = _parse_next_(d.pop("next"))

        holder_list = cls(
            holders=holders,
            next_=next_,
        )

        holder_list.additional_properties = d
        return holder_list

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
