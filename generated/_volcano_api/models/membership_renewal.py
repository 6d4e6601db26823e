from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from attrs import define as _attrs_define

T = TypeVar("T", bound="MembershipRenewal")


@_attrs_define
class MembershipRenewal:
    """One membership to renew, as a single renewal names it, with its group and member.

    Attributes:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a label (the
            group's leader is shown by its member name).
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
    """

    group: str
    member: str
    owner_token: str
    fencing_token: int
    ttl_seconds: float

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        member = self.member

        owner_token = self.owner_token

        fencing_token = self.fencing_token

        ttl_seconds = self.ttl_seconds

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "group": group,
                "member": member,
                "owner_token": owner_token,
                "fencing_token": fencing_token,
                "ttl_seconds": ttl_seconds,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        group = d.pop("group")

        member = d.pop("member")

        owner_token = d.pop("owner_token")

        fencing_token = d.pop("fencing_token")

        ttl_seconds = d.pop("ttl_seconds")

        membership_renewal = cls(
            group=group,
            member=member,
            owner_token=owner_token,
            fencing_token=fencing_token,
            ttl_seconds=ttl_seconds,
        )

        return membership_renewal
