from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.capabilities_type_0 import CapabilitiesType0


T = TypeVar("T", bound="CapabilitiesRequest")


@_attrs_define
class CapabilitiesRequest:
    """
    Attributes:
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        capabilities (CapabilitiesType0 | None): A member's public capabilities, as JSON or as bytes: exactly one of
            `json` (any JSON
            value, at most 65,538 bytes once written compactly in UTF-8) or `base64` (bytes, at
            most 65,538 of them, in standard base64 with padding). Null: none. Anyone holding
            the project's keys can read them: never put a secret in them.
    """

    owner_token: str
    fencing_token: int
    capabilities: CapabilitiesType0 | None

    def to_dict(self) -> dict[str, Any]:
        from ..models.capabilities_type_0 import CapabilitiesType0

        owner_token = self.owner_token

        fencing_token = self.fencing_token

        capabilities: dict[str, Any] | None
        if isinstance(self.capabilities, CapabilitiesType0):
            capabilities = self.capabilities.to_dict()
        else:
            capabilities = self.capabilities

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "owner_token": owner_token,
                "fencing_token": fencing_token,
                "capabilities": capabilities,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.capabilities_type_0 import CapabilitiesType0

        d = dict(src_dict)
        owner_token = d.pop("owner_token")

        fencing_token = d.pop("fencing_token")

        def _parse_capabilities(data: object) -> CapabilitiesType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                componentsschemas_capabilities_type_0 = CapabilitiesType0.from_dict(
                    data
                )

                return componentsschemas_capabilities_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(CapabilitiesType0 | None, data)

        capabilities = _parse_capabilities(d.pop("capabilities"))

        capabilities_request = cls(
            owner_token=owner_token,
            fencing_token=fencing_token,
            capabilities=capabilities,
        )

        return capabilities_request
