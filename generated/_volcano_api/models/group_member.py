from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.shown_capabilities import ShownCapabilities


T = TypeVar("T", bound="GroupMember")


@_attrs_define
class GroupMember:
    """A live member as anyone may see it (never its owner token).

    Attributes:
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a label (the
            group's leader is shown by its member name).
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        expires_at (datetime.datetime): When the membership ends by the server's clock, unless renewed (UTC, RFC 3339).
        capabilities (None | ShownCapabilities): The member's capabilities, or null for none.
    """

    member: str
    fencing_token: int
    expires_at: datetime.datetime
    capabilities: None | ShownCapabilities
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.shown_capabilities import ShownCapabilities

        member = self.member

        fencing_token = self.fencing_token

        expires_at = self.expires_at.isoformat()

        capabilities: dict[str, Any] | None
        if isinstance(self.capabilities, ShownCapabilities):
            capabilities = self.capabilities.to_dict()
        else:
            capabilities = self.capabilities

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "member": member,
                "fencing_token": fencing_token,
                "expires_at": expires_at,
                "capabilities": capabilities,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.shown_capabilities import ShownCapabilities

        d = dict(src_dict)
        member = d.pop("member")

        fencing_token = d.pop("fencing_token")

        expires_at = datetime.datetime.fromisoformat(d.pop("expires_at"))

        def _parse_capabilities(data: object) -> None | ShownCapabilities:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                capabilities_type_0 = ShownCapabilities.from_dict(data)

                return capabilities_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | ShownCapabilities, data)

        capabilities = _parse_capabilities(d.pop("capabilities"))

        group_member = cls(
            member=member,
            fencing_token=fencing_token,
            expires_at=expires_at,
            capabilities=capabilities,
        )

        group_member.additional_properties = d
        return group_member

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
