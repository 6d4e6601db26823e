from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.error_detail import ErrorDetail


T = TypeVar("T", bound="LeaseRefused")


@_attrs_define
class LeaseRefused:
    """An entry of a batch renewal that was refused (and changed nothing), with the status and
    error a single renew of it would have answered.

        Attributes:
            key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
            status (int): The status a single renew of this lease would have answered (409).
            error (ErrorDetail):
    """

    key: str
    status: int
    error: ErrorDetail
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        status = self.status

        error = self.error.to_dict()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "status": status,
                "error": error,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.error_detail import ErrorDetail

        d = dict(src_dict)
        key = d.pop("key")

        status = d.pop("status")

        error = ErrorDetail.from_dict(d.pop("error"))

        lease_refused = cls(
            key=key,
            status=status,
            error=error,
        )

        lease_refused.additional_properties = d
        return lease_refused

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
