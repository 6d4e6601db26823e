from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ForceReleaseResult")


@_attrs_define
class ForceReleaseResult:
    """
    Attributes:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
        released (bool): Whether a live lease was removed.
        fencing_token (int | None): The removed lease's fencing token (the highest of them, with several); null when
            nothing was released.
        released_count (int): How many live leases were removed.
    """

    key: str
    released: bool
    fencing_token: int | None
    released_count: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        released = self.released

        fencing_token: int | None
        fencing_token = self.fencing_token

        released_count = self.released_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "released": released,
                "fencing_token": fencing_token,
                "released_count": released_count,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        key = d.pop("key")

        released = d.pop("released")

        def _parse_fencing_token(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fencing_token = _parse_fencing_token(d.pop("fencing_token"))

        released_count = d.pop("released_count")

        force_release_result = cls(
            key=key,
            released=released,
            fencing_token=fencing_token,
            released_count=released_count,
        )

        force_release_result.additional_properties = d
        return force_release_result

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
