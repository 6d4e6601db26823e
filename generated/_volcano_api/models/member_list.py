from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.group_member import GroupMember


T = TypeVar("T", bound="MemberList")


@_attrs_define
class MemberList:
    """One page of a group's live members.

    Attributes:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        version (int): A key's version: 0 for a key never acquired, then greater after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        members (list[GroupMember]): The members, in member order.
        next_ (None | str): The `after` of the following page, or null when this page is the last.
    """

    group: str
    version: int
    members: list[GroupMember]
    next_: None | str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        version = self.version

        members = []
        for members_item_data in self.members:
            members_item = members_item_data.to_dict()
            members.append(members_item)

        next_: None | str
        next_ = self.next_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "version": version,
                "members": members,
                "next": next_,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.group_member import GroupMember

        d = dict(src_dict)
        group = d.pop("group")

        version = d.pop("version")

        members = []
        _members = d.pop("members")
        for members_item_data in _members:
            members_item = GroupMember.from_dict(members_item_data)

            members.append(members_item)

        def _parse_next_(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        next_ = _parse_next_(d.pop("next"))

        member_list = cls(
            group=group,
            version=version,
            members=members,
            next_=next_,
        )

        member_list.additional_properties = d
        return member_list

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
