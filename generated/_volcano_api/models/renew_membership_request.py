from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="RenewMembershipRequest")


@_attrs_define
class RenewMembershipRequest:
    """
    Attributes:
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
    """

    owner_token: str
    fencing_token: int
    ttl_seconds: float

    def to_dict(self) -> dict[str, Any]:
        owner_token = self.owner_token

        fencing_token = self.fencing_token

        ttl_seconds = self.ttl_seconds

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "owner_token": owner_token,
                "fencing_token": fencing_token,
                "ttl_seconds": ttl_seconds,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        owner_token = d.pop("owner_token")

        fencing_token = d.pop("fencing_token")

        ttl_seconds = d.pop("ttl_seconds")

        renew_membership_request = cls(
            owner_token=owner_token,
            fencing_token=fencing_token,
            ttl_seconds=ttl_seconds,
        )

        return renew_membership_request
