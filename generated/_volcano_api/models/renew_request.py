from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RenewRequest")


@_attrs_define
class RenewRequest:
    """
    Attributes:
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        fencing_token (int): Issued per key, strictly increasing and never reused. At most 2^53-1 so that every JSON
            implementation holds it exactly.
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
        label (None | str | Unset): A public label for a lease: 0 to 200 printable ASCII characters (space to `~`), such
            as a host name and port. Shown to anyone who reads the key; never put a secret in it.
            An empty label is no label, shown as null. In a request, null is the same as leaving
            the field out.
    """

    owner_token: str
    fencing_token: int
    ttl_seconds: float
    label: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        owner_token = self.owner_token

        fencing_token = self.fencing_token

        ttl_seconds = self.ttl_seconds

        label: None | str | Unset
        if isinstance(self.label, Unset):
            label = UNSET
        else:
            label = self.label

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "owner_token": owner_token,
                "fencing_token": fencing_token,
                "ttl_seconds": ttl_seconds,
            }
        )
        if label is not UNSET:
            field_dict["label"] = label

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        owner_token = d.pop("owner_token")

        fencing_token = d.pop("fencing_token")

        ttl_seconds = d.pop("ttl_seconds")

        def _parse_label(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        label = _parse_label(d.pop("label", UNSET))

        renew_request = cls(
            owner_token=owner_token,
            fencing_token=fencing_token,
            ttl_seconds=ttl_seconds,
            label=label,
        )

        return renew_request
