"""Helpers for the server's HTTP tests: the lock operations as raw requests."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest


def new_id() -> str:
    return str(uuid.uuid4())


class Locks:
    """The lock operations over raw HTTP, returning the raw responses."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def acquire(
        self, key: str, owner: str, ttl: float = 30, *, request_id: str | None = None
    ) -> httpx.Response:
        return self._post(key, "acquire", {"owner_token": owner, "ttl_seconds": ttl}, request_id)

    def renew(
        self, key: str, owner: str, fence: int, ttl: float = 30, *, request_id: str | None = None
    ) -> httpx.Response:
        return self._post(
            key,
            "renew",
            {"owner_token": owner, "fencing_token": fence, "ttl_seconds": ttl},
            request_id,
        )

    def release(
        self, key: str, owner: str, fence: int, *, request_id: str | None = None
    ) -> httpx.Response:
        return self._post(
            key, "release", {"owner_token": owner, "fencing_token": fence}, request_id
        )

    def get(self, key: str, *, request_id: str | None = None) -> httpx.Response:
        return self.http.get(f"/v1/locks/{key}", headers=_rid(request_id))

    def force_release(self, key: str, *, request_id: str | None = None) -> httpx.Response:
        return self.http.delete(f"/v1/locks/{key}", headers=_rid(request_id))

    def _post(
        self, key: str, action: str, body: dict[str, Any], request_id: str | None
    ) -> httpx.Response:
        return self.http.post(f"/v1/locks/{key}/{action}", json=body, headers=_rid(request_id))


def _rid(request_id: str | None) -> dict[str, str]:
    return {"X-Request-Id": request_id} if request_id is not None else {}


@pytest.fixture
def locks(api: httpx.Client) -> Locks:
    return Locks(api)
