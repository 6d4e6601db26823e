from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.lock_holder import LockHolder


T = TypeVar("T", bound="LockState")


@_attrs_define
class LockState:
    """A key's availability. It never contains an owner token.

    Attributes:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or `-`.
        held (bool): Whether a live lease exists.
        expires_at (datetime.datetime | None): When the live lease ends (the soonest of them, with several), UTC, RFC
            3339; null
            when not held.
        fencing_token (int | None): The live lease's fencing token when held (the highest of them, with several), else
            the last one issued for the key, else null.
        limit (int): The key's limit while it has a live lease or a waiter; else 1 (the next acquire
            sets it).
        holders (list[LockHolder]): The live leases, soonest expiry first, each with its mode (one exclusive, or shared
            ones, or up to `limit` exclusive ones of a semaphore): all of them, or the 20 that
            end soonest when there are more (`holder_count` says how many; `GET
            /v1/locks/{key}/holders` lists them all).
        waiters (int): How many callers wait in the key's queue.
        version (int): A key's version: 0 for a key never acquired, then greater after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        holder_count (int | Unset): How many live leases the key has, shown in `holders` or not. (Absent from servers
            older than this field: count `holders` then.)
    """

    key: str
    held: bool
    expires_at: datetime.datetime | None
    fencing_token: int | None
    limit: int
    holders: list[LockHolder]
    waiters: int
    version: int
    holder_count: int | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        held = self.held

        expires_at: None | str
        if isinstance(self.expires_at, datetime.datetime):
            expires_at = self.expires_at.isoformat()
        else:
            expires_at = self.expires_at

        fencing_token: int | None
        fencing_token = self.fencing_token

        limit = self.limit

        holders = []
        for holders_item_data in self.holders:
            holders_item = holders_item_data.to_dict()
            holders.append(holders_item)

        waiters = self.waiters

        version = self.version

        holder_count = self.holder_count

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "held": held,
                "expires_at": expires_at,
                "fencing_token": fencing_token,
                "limit": limit,
                "holders": holders,
                "waiters": waiters,
                "version": version,
            }
        )
        if holder_count is not UNSET:
            field_dict["holder_count"] = holder_count

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lock_holder import LockHolder

        d = dict(src_dict)
        key = d.pop("key")

        held = d.pop("held")

        def _parse_expires_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                expires_at_type_0 = datetime.datetime.fromisoformat(data)

                return expires_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        expires_at = _parse_expires_at(d.pop("expires_at"))

        def _parse_fencing_token(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        fencing_token = _parse_fencing_token(d.pop("fencing_token"))

        limit = d.pop("limit")

        holders = []
        _holders = d.pop("holders")
        for holders_item_data in _holders:
            holders_item = LockHolder.from_dict(holders_item_data)

            holders.append(holders_item)

        waiters = d.pop("waiters")

        version = d.pop("version")

        holder_count = d.pop("holder_count", UNSET)

        lock_state = cls(
            key=key,
            held=held,
            expires_at=expires_at,
            fencing_token=fencing_token,
            limit=limit,
            holders=holders,
            waiters=waiters,
            version=version,
            holder_count=holder_count,
        )

        lock_state.additional_properties = d
        return lock_state

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
