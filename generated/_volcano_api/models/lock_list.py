from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.lock_state import LockState


T = TypeVar("T", bound="LockList")


@_attrs_define
class LockList:
    """One page of the keys that are held or waited for.

    Attributes:
        locks (list[LockState]): The keys' states, in key order.
        next_ (None | str): The `after` of the following page, or null when this page is the last.
    """

    locks: list[LockState]
    next_: None | str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        locks = []
        for locks_item_data in self.locks:
            locks_item = locks_item_data.to_dict()
            locks.append(locks_item)

        next_: None | str
        next_ = self.next_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "locks": locks,
                "next": next_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lock_state import LockState

        d = dict(src_dict)
        locks = []
        _locks = d.pop("locks")
        for locks_item_data in _locks:
            locks_item = LockState.from_dict(locks_item_data)

            locks.append(locks_item)

        def _parse_next_(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        next_ = _parse_next_(d.pop("next"))

        lock_list = cls(
            locks=locks,
            next_=next_,
        )

        lock_list.additional_properties = d
        return lock_list

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
