from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.error_detail import ErrorDetail


T = TypeVar("T", bound="MembershipRefused")


@_attrs_define
class MembershipRefused:
    """An entry of a batch renewal that was refused (and changed nothing), with the status
    and error a single renewal of it would have answered.

        Attributes:
            group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
                `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
                a key.
            member (str): 1 to 200 characters, made as a key is, so that a member's name is also a label (the
                group's leader is shown by its member name).
            status (int): The status a single renewal of this membership would have answered.
            error (ErrorDetail):
    """

    group: str
    member: str
    status: int
    error: ErrorDetail
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        member = self.member

        status = self.status

        error = self.error.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "member": member,
                "status": status,
                "error": error,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.error_detail import ErrorDetail

        d = dict(src_dict)
        group = d.pop("group")

        member = d.pop("member")

        status = d.pop("status")

        error = ErrorDetail.from_dict(d.pop("error"))

        membership_refused = cls(
            group=group,
            member=member,
            status=status,
            error=error,
        )

        membership_refused.additional_properties = d
        return membership_refused

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
