from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.membership_refused import MembershipRefused
    from ..models.membership_renewed import MembershipRenewed


T = TypeVar("T", bound="RenewMembershipsResult")


@_attrs_define
class RenewMembershipsResult:
    """The answer to a batch renewal of memberships, one result per entry sent.

    Attributes:
        results (list[MembershipRefused | MembershipRenewed]): One result per entry of the request, in its order.
    """

    results: list[MembershipRefused | MembershipRenewed]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.membership_renewed import MembershipRenewed

        results = []
        for results_item_data in self.results:
            results_item: dict[str, Any]
            if isinstance(results_item_data, MembershipRenewed):
                results_item = results_item_data.to_dict()
            else:
                results_item = results_item_data.to_dict()

            results.append(results_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "results": results,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.membership_refused import MembershipRefused
        from ..models.membership_renewed import MembershipRenewed

        d = dict(src_dict)
        results = []
        _results = d.pop("results")
        for results_item_data in _results:

            def _parse_results_item(
                data: object,
            ) -> MembershipRefused | MembershipRenewed:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    componentsschemas_membership_renewal_result_type_0 = (
                        MembershipRenewed.from_dict(data)
                    )

                    return componentsschemas_membership_renewal_result_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_membership_renewal_result_type_1 = (
                    MembershipRefused.from_dict(data)
                )

                return componentsschemas_membership_renewal_result_type_1

            results_item = _parse_results_item(results_item_data)

            results.append(results_item)

        renew_memberships_result = cls(
            results=results,
        )

        renew_memberships_result.additional_properties = d
        return renew_memberships_result

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
