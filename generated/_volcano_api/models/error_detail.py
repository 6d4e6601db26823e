from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="ErrorDetail")


@_attrs_define
class ErrorDetail:
    """
    Attributes:
        code (str): A stable, machine-readable reason. Known values: `invalid_request`, `unauthorized`,
            `forbidden`, `not_found`, `method_not_allowed`, `lock_held`, `lease_not_held`,
            `request_id_reused`, `payload_too_large`, `validation_error`, `rate_limited`,
            `unavailable`, `internal`. A plain string, not an enum: newer servers may add codes.
        message (str): A human-readable explanation naming what was wrong.
        request_id (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            (Not `format: uuid`: tools that parse it would change its spelling.)
    """

    code: str
    message: str
    request_id: str

    def to_dict(self) -> dict[str, Any]:
        code = self.code

        message = self.message

        request_id = self.request_id

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "code": code,
                "message": message,
                "request_id": request_id,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        code = d.pop("code")

        message = d.pop("message")

        request_id = d.pop("request_id")

        error_detail = cls(
            code=code,
            message=message,
            request_id=request_id,
        )

        return error_detail
