from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="GroupState")


@_attrs_define
class GroupState:
    """A group as anyone may see it.

    Attributes:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters, digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        version (int): A key's version: 0 for a key never acquired, then greater after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        fencing_token (int | None): The last fencing token issued to a member of the group, or null if none ever joined.
        members (int): How many live members the group has.
    """

    group: str
    version: int
    fencing_token: int | None
    members: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        group = self.group

        version = self.version

        fencing_token: int | None
        fencing_token = self.fencing_token

        members = self.members

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "group": group,
                "version": version,
                "fencing_token": fencing_token,
                "members": members,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        group = d.pop("group")

        version = d.pop("version")

        def _parse_fencing_token(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fencing_token = _parse_fencing_token(d.pop("fencing_token"))

        members = d.pop("members")

        group_state = cls(
            group=group,
            version=version,
            fencing_token=fencing_token,
            members=members,
        )

        group_state.additional_properties = d
        return group_state

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
