from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="MemberRemoval")


@_attrs_define
class MemberRemoval:
    """What removing a member did.

    Attributes:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a label (the
            group's leader is shown by its member name).
        removed (bool): Whether a live member was removed.
        fencing_token (int | None): The removed membership's fencing token; null when nothing was removed.
    """

    group: str
    member: str
    removed: bool
    fencing_token: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        member = self.member

        removed = self.removed

        fencing_token: int | None
        fencing_token = self.fencing_token

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "member": member,
                "removed": removed,
                "fencing_token": fencing_token,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        group = d.pop("group")

        member = d.pop("member")

        removed = d.pop("removed")

        def _parse_fencing_token(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fencing_token = _parse_fencing_token(d.pop("fencing_token"))

        member_removal = cls(
            group=group,
            member=member,
            removed=removed,
            fencing_token=fencing_token,
        )

        member_removal.additional_properties = d
        return member_removal

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
