from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ErrorDetail")


@_attrs_define
class ErrorDetail:
    """
    Attributes:
        code (str): A stable, machine-readable reason. Known values: `invalid_request`, `unauthorized`,
            `forbidden`, `not_found`, `method_not_allowed`, `lock_held`, `lease_not_held`,
            `limit_mismatch`, `mode_mismatch`, `shared_with_limit`, `quota_exceeded`,
            `request_id_reused`,
            `payload_too_large`, `validation_error`, `rate_limited`, `group_not_found`,
            `member_not_found`, `group_exists`, `group_not_empty`, `member_exists`,
            `unavailable`, `internal`. A plain string, not an enum: newer servers may add codes.
        message (str): A human-readable explanation naming what was wrong.
        request_id (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        limit (int | Unset): With `limit_mismatch` only: the limit the key is in use with (the message names it
            too). Absent from every other error.
    """

    code: str
    message: str
    request_id: str
    limit: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        code = self.code

        message = self.message

        request_id = self.request_id

        limit = self.limit

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "code": code,
                "message": message,
                "request_id": request_id,
            }
        )
        if limit is not UNSET:
            field_dict["limit"] = limit

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        code = d.pop("code")

        message = d.pop("message")

        request_id = d.pop("request_id")

        limit = d.pop("limit", UNSET)

        error_detail = cls(
            code=code,
            message=message,
            request_id=request_id,
            limit=limit,
        )

        error_detail.additional_properties = d
        return error_detail

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
