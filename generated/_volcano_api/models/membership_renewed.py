from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.membership import Membership


T = TypeVar("T", bound="MembershipRenewed")


@_attrs_define
class MembershipRenewed:
    """An entry of a batch renewal that was renewed, with its membership as renewed.

    Attributes:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a label (the
            group's leader is shown by its member name).
        membership (Membership): A live membership (a member's lease on its group) as granted. Keep `owner_token`
            private.
    """

    group: str
    member: str
    membership: Membership
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        member = self.member

        membership = self.membership.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "member": member,
                "membership": membership,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.membership import Membership

        d = dict(src_dict)
        group = d.pop("group")

        member = d.pop("member")

        membership = Membership.from_dict(d.pop("membership"))

        membership_renewed = cls(
            group=group,
            member=member,
            membership=membership,
        )

        membership_renewed.additional_properties = d
        return membership_renewed

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
