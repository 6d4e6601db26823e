from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.membership_renewal import MembershipRenewal


T = TypeVar("T", bound="RenewMembershipsRequest")


@_attrs_define
class RenewMembershipsRequest:
    """The body of a batch renewal of memberships (`POST /v1/members/renew`).

    Attributes:
        memberships (list[MembershipRenewal]): The memberships to renew, 1 to 500 of them, judged in this order.
    """

    memberships: list[MembershipRenewal]

    def to_dict(self) -> dict[str, Any]:
        memberships = []
        for memberships_item_data in self.memberships:
            memberships_item = memberships_item_data.to_dict()
            memberships.append(memberships_item)

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "memberships": memberships,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.membership_renewal import MembershipRenewal

        d = dict(src_dict)
        memberships = []
        _memberships = d.pop("memberships")
        for memberships_item_data in _memberships:
            memberships_item = MembershipRenewal.from_dict(memberships_item_data)

            memberships.append(memberships_item)

        renew_memberships_request = cls(
            memberships=memberships,
        )

        return renew_memberships_request
