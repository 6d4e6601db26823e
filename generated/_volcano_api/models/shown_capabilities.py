from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ShownCapabilities")


@_attrs_define
class ShownCapabilities:
    """A member's capabilities as it gave them: `json` (any JSON value) or `base64` (bytes),
    exactly one of them.

        Attributes:
            json (Any | Unset): The JSON value the member gave.
            base64 (str | Unset): The bytes the member gave, in standard base64 with padding.
    """

    json: Any | Unset = UNSET
    base64: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        json = self.json

        base64 = self.base64

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if json is not UNSET:
            field_dict["json"] = json
        if base64 is not UNSET:
            field_dict["base64"] = base64

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        json = d.pop("json", UNSET)

        base64 = d.pop("base64", UNSET)

        shown_capabilities = cls(
            json=json,
            base64=base64,
        )

        shown_capabilities.additional_properties = d
        return shown_capabilities

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
