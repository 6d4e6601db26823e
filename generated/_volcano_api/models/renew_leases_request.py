from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.lease_renewal import LeaseRenewal


T = TypeVar("T", bound="RenewLeasesRequest")


@_attrs_define
class RenewLeasesRequest:
    """The body of a batch renewal (`POST /v1/leases/renew`).

    Attributes:
        leases (list[LeaseRenewal]): The leases to renew, 1 to 500 of them, judged in this order.
    """

    leases: list[LeaseRenewal]

    def to_dict(self) -> dict[str, Any]:
        leases = []
        for leases_item_data in self.leases:
            leases_item = leases_item_data.to_dict()
            leases.append(leases_item)

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "leases": leases,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lease_renewal import LeaseRenewal

        d = dict(src_dict)
        leases = []
        _leases = d.pop("leases")
        for leases_item_data in _leases:
            leases_item = LeaseRenewal.from_dict(leases_item_data)

            leases.append(leases_item)

        renew_leases_request = cls(
            leases=leases,
        )

        return renew_leases_request
