from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.capabilities_type_0 import CapabilitiesType0


T = TypeVar("T", bound="JoinRequest")


@_attrs_define
class JoinRequest:
    """
    Attributes:
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
        capabilities (CapabilitiesType0 | None | Unset): A member's public capabilities, as JSON or as bytes: exactly
            one of `json` (any JSON
            value, at most 65,538 bytes once written compactly in UTF-8) or `base64` (bytes, at
            most 65,538 of them, in standard base64 with padding). Null: none. Anyone holding
            the project's keys can read them: never put a secret in them.
    """

    owner_token: str
    ttl_seconds: float
    capabilities: CapabilitiesType0 | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.capabilities_type_0 import CapabilitiesType0

        owner_token = self.owner_token

        ttl_seconds = self.ttl_seconds

        capabilities: dict[str, Any] | None | Unset
        if isinstance(self.capabilities, Unset):
            capabilities = UNSET
        elif isinstance(self.capabilities, CapabilitiesType0):
            capabilities = self.capabilities.to_dict()
        else:
            capabilities = self.capabilities

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "owner_token": owner_token,
                "ttl_seconds": ttl_seconds,
            }
        )
        if capabilities is not UNSET:
            field_dict["capabilities"] = capabilities

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.capabilities_type_0 import CapabilitiesType0

        d = dict(src_dict)
        owner_token = d.pop("owner_token")

        ttl_seconds = d.pop("ttl_seconds")

        def _parse_capabilities(data: object) -> CapabilitiesType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
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
            return cast(CapabilitiesType0 | None | Unset, data)

        capabilities = _parse_capabilities(d.pop("capabilities", UNSET))

        join_request = cls(
            owner_token=owner_token,
            ttl_seconds=ttl_seconds,
            capabilities=capabilities,
        )

        return join_request
