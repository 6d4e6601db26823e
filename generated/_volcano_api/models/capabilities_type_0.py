from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="CapabilitiesType0")


@_attrs_define
class CapabilitiesType0:
    """A member's public capabilities, as JSON or as bytes: exactly one of `json` (any JSON
    value, at most 65,538 bytes once written compactly in UTF-8) or `base64` (bytes, at
    most 65,538 of them, in standard base64 with padding). Null: none. Anyone holding
    the project's keys can read them: never put a secret in them.

        Attributes:
            json (Any | Unset): Any JSON value; answered as given (written compactly).
            base64 (str | Unset): Bytes in standard base64 (RFC 4648, with padding), at most 65,538 of them.
    """

    json: Any | Unset = UNSET
    base64: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        json = self.json

        base64 = self.base64

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if json is not UNSET:
            field_dict["json"] = json
        if base64 is not UNSET:
            field_dict["base64"] = base64

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        json = d.pop("json", UNSET)

        base64 = d.pop("base64", UNSET)

        capabilities_type_0 = cls(
            json=json,
            base64=base64,
        )

        return capabilities_type_0
