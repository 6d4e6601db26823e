"""Small helpers the suites share: the lock API over raw HTTP (a second party that bypasses the
SDK), fresh ids, which operation a request is, and polling with an upper bound."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

__all__ = ["Locks", "Waiter", "new_id", "operation", "wait_for"]


def new_id() -> str:
    """A fresh UUID string (owner token or request id)."""
    return str(uuid.uuid4())


def operation(request: httpx.Request) -> str:
    """The lock operation a request performs: acquire, renew, release, get, force_release or
    check (the fence check)."""
    if request.method == "GET":
        return "check" if "/leases/" in request.url.path else "get"
    if request.method == "DELETE":
        return "force_release"
    return request.url.path.rsplit("/", 1)[-1]


def wait_for(condition: Callable[[], object], what: str = "", timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail when `timeout` seconds pass first (an upper bound,
    never a measurement)."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {timeout}s: {what or condition}")
        time.sleep(0.005)


class Locks:
    """The lock operations over raw HTTP, returning the raw responses."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def acquire(
        self,
        key: str,
        owner: str,
        ttl: float = 30,
        *,
        request_id: str | None = None,
        wait: float | None = None,
        limit: int | None = None,
        shared: bool | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"owner_token": owner, "ttl_seconds": ttl}
        if wait is not None:
            body["wait_seconds"] = wait
        if limit is not None:
            body["limit"] = limit
        if shared is not None:
            body["shared"] = shared
        return self._post(key, "acquire", body, request_id)

    def check(self, key: str, fence: int | str) -> httpx.Response:
        """The fence check: is `fence` a live lease of `key`?"""
        return self.http.get(f"/v1/locks/{key}/leases/{fence}")

    def renew(
        self, key: str, owner: str, fence: int, ttl: float = 30, *, request_id: str | None = None
    ) -> httpx.Response:
        body = {"owner_token": owner, "fencing_token": fence, "ttl_seconds": ttl}
        return self._post(key, "renew", body, request_id)

    def renew_many(
        self, entries: list[dict[str, Any]], *, request_id: str | None = None
    ) -> httpx.Response:
        """`POST /v1/leases/renew` with these entries (`{key, owner_token, fencing_token,
        ttl_seconds}` each)."""
        return self.http.post(
            "/v1/leases/renew", json={"leases": entries}, headers=_rid(request_id)
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

    def state(self, key: str) -> dict[str, Any]:
        """The key's LockState as the server reports it."""
        response = self.get(key)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def _post(
        self, key: str, action: str, body: dict[str, Any], request_id: str | None
    ) -> httpx.Response:
        return self.http.post(f"/v1/locks/{key}/{action}", json=body, headers=_rid(request_id))


def _rid(request_id: str | None) -> dict[str, str]:
    return {"X-Request-Id": request_id} if request_id is not None else {}


class Waiter:
    """A waiting acquire in a thread of its own, on `http` (closed when it ends)."""

    def __init__(
        self,
        http: httpx.Client,
        key: str,
        *,
        wait: float = 20,
        ttl: float = 30,
        owner: str | None = None,
        request_id: str | None = None,
        limit: int | None = None,
        shared: bool | None = None,
    ) -> None:
        self.owner = owner or new_id()
        self.request_id = request_id or new_id()
        self.response: httpx.Response | None = None
        self.error: httpx.HTTPError | None = None
        self.answered_at: float | None = None
        self._http = http
        self._limit = limit
        self._shared = shared
        self._thread = threading.Thread(
            target=self._run, args=(key, wait, ttl), name=f"waiter-{key}", daemon=True
        )
        self._thread.start()

    def _run(self, key: str, wait: float, ttl: float) -> None:
        try:
            self.response = Locks(self._http).acquire(
                key,
                self.owner,
                ttl,
                wait=wait,
                request_id=self.request_id,
                limit=self._limit,
                shared=self._shared,
            )
            self.answered_at = time.monotonic()
        except httpx.HTTPError as exc:
            self.error = exc
        finally:
            self._http.close()

    def outcome(self, timeout: float = 30) -> httpx.Response | httpx.HTTPError:
        """The answer, or the transport error, once the request has ended."""
        self._thread.join(timeout)
        outcome = self.response or self.error
        assert outcome is not None, "the waiting acquire did not finish"
        return outcome

    def result(self, timeout: float = 30) -> httpx.Response:
        """The answer, once it has come."""
        outcome = self.outcome(timeout)
        assert isinstance(outcome, httpx.Response), f"no answer: {outcome!r}"
        return outcome

    @property
    def lease(self) -> dict[str, Any]:
        """The lease it was granted."""
        response = self.result()
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body
