from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="AcquireRequest")


@_attrs_define
class AcquireRequest:
    """
    Attributes:
        owner_token (str): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case, kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        ttl_seconds (float): The lease's time to live in seconds, from 0.1 to 86400.
        wait_seconds (float | Unset): How long an acquire may wait in the key's queue for the lock, in seconds: 0 (the
            default) answers at once; at most 60 per request, so that no request outlives common
            proxy and load-balancer timeouts. A server may end a wait sooner (its operator keeps it
            below their load balancer's idle timeout): the answer is then the same `409 lock_held`.
            Wait longer by acquiring again with the same `owner_token` as soon as a wait runs out:
            the queue keeps the caller's place for a few seconds.
        limit (int | Unset): How many live leases the key may have at once: 1 (the default) for a lock, N for a
            semaphore of N slots. It belongs to the key while the key has a live lease or a waiter.
        label (None | str | Unset): A public label for a lease: 0 to 200 printable ASCII characters (space to `~`), such
            as a host name and port. Shown to anyone who reads the key; never put a secret in it.
            An empty label is no label, shown as null. In a request, null is the same as leaving
            the field out.
        shared (bool | Unset): Whether the lease is shared: granted beside other shared leases of the key (up to 1,000
            at once), never beside an exclusive one. False (the default) asks for an exclusive
            lease, alone on the key. A waiting shared request never overtakes an exclusive one that
            asked earlier. Not with a `limit` above 1.
    """

    owner_token: str
    ttl_seconds: float
    wait_seconds: float | Unset = UNSET
    limit: int | Unset = UNSET
    label: None | str | Unset = UNSET
    shared: bool | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        owner_token = self.owner_token

        ttl_seconds = self.ttl_seconds

        wait_seconds = self.wait_seconds

        limit = self.limit

        label: None | str | Unset
        if isinstance(self.label, Unset):
            label = UNSET
        else:
            label = self.label

        shared = self.shared

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "owner_token": owner_token,
                "ttl_seconds": ttl_seconds,
            }
        )
        if wait_seconds is not UNSET:
            field_dict["wait_seconds"] = wait_seconds
        if limit is not UNSET:
            field_dict["limit"] = limit
        if label is not UNSET:
            field_dict["label"] = label
        if shared is not UNSET:
            field_dict["shared"] = shared

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        d = dict(src_dict)
        owner_token = d.pop("owner_token")

        ttl_seconds = d.pop("ttl_seconds")

        wait_seconds = d.pop("wait_seconds", UNSET)

        limit = d.pop("limit", UNSET)

        def _parse_label(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        label = _parse_label(d.pop("label", UNSET))

        shared = d.pop("shared", UNSET)

        acquire_request = cls(
            owner_token=owner_token,
            ttl_seconds=ttl_seconds,
            wait_seconds=wait_seconds,
            limit=limit,
            label=label,
            shared=shared,
        )

        return acquire_request
