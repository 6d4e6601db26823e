"""The interoperability scenario with two Python clients generated from openapi.yaml.

    python scenario.py datamodel|openapi-generator BASE_URL   (keys in VOLCANO_*_KEY)

- datamodel: pydantic models written by datamodel-code-generator (out/volcano_models.py), sent
  with httpx; every answer is parsed by the models.
- openapi-generator: the Python client openapi-generator writes (out/og/volcano_og), with its
  own auth settings; it parses every answer itself.

Both also parse a lease with one field more than documented, as a later minor version may send.
scripts/interop.sh generates both clients, then runs this once per client.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

OUT = Path(__file__).resolve().parent / "out"


@dataclass(frozen=True)
class Answer:
    """An answer as a client's generated code gave it: status, headers, parsed body."""

    status: int
    headers: Mapping[str, str]  # lower-case names
    body: dict[str, Any] | None


class LockClient(Protocol):
    """The five lock operations, through one generated client."""

    def acquire(self, key: str, token: str, ttl: float, request_id: str | None = None) -> Answer:
        """POST /v1/locks/{key}/acquire."""

    def get(self, key: str) -> Answer:
        """GET /v1/locks/{key}."""

    def renew(self, key: str, token: str, fencing_token: int, ttl: float) -> Answer:
        """POST /v1/locks/{key}/renew."""

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        """POST /v1/locks/{key}/release."""

    def force_release(self, key: str) -> Answer:
        """DELETE /v1/locks/{key}."""

    def parse_lease(self, text: str) -> dict[str, Any]:
        """A LockLease body parsed by the generated models."""


def run(client: LockClient, name: str) -> None:
    """Acquire, get, renew, conflict, release, force release, replay; raise on any surprise."""
    key = f"interop-{name.replace('-', '')}-{uuid.uuid4().hex[:8]}"

    def step(text: str) -> None:
        print(f"  {name}: {text}", flush=True)

    step("acquire")
    first = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(first.status == 200 and first.body is not None, "acquire", first)
    lease = first.body or {}
    _expect(lease["key"] == key and lease["ttl_seconds"] == 30, "acquire", first)
    fencing = lease["fencing_token"]

    step("get")
    state = client.get(key)
    _expect(state.status == 200, "get", state)
    _expect(_pick(state, "held", "fencing_token") == (True, fencing), "get", state)

    step("renew")
    renewed = client.renew(key, lease["owner_token"], fencing, 60)
    _expect(_pick(renewed, "fencing_token", "ttl_seconds") == (fencing, 60), "renew", renewed)

    step("conflict with Retry-After")
    conflict = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(conflict.status == 409, "conflict", conflict)
    _expect((conflict.body or {})["error"]["code"] == "lock_held", "conflict", conflict)
    _expect(int(conflict.headers["retry-after"]) >= 1, "conflict", conflict)

    step("release")
    released = client.release(key, lease["owner_token"], fencing)
    _expect(released.status == 204, "release", released)

    step("force release")
    taken = client.acquire(key, str(uuid.uuid4()), 30)
    _expect(taken.status == 200 and (taken.body or {})["fencing_token"] > fencing, "take", taken)
    forced = client.force_release(key)
    expected = (True, (taken.body or {})["fencing_token"])
    _expect(_pick(forced, "released", "fencing_token") == expected, "force release", forced)

    step("replay with an upper-case caller-supplied token and request id")
    token, request_id = str(uuid.uuid4()).upper(), str(uuid.uuid4()).upper()
    original = client.acquire(key, token, 30, request_id)
    replay = client.acquire(key, token, 30, request_id)
    for answer in (original, replay):
        _expect(
            answer.status == 200 and (answer.body or {})["owner_token"] == token, "replay", answer
        )
        _expect(answer.headers["x-request-id"] == request_id, "replay", answer)
    _expect("idempotent-replayed" not in original.headers, "replay", original)
    _expect(replay.headers.get("idempotent-replayed") == "true", "replay", replay)
    _expect(replay.body == original.body, "replay", replay)
    cleanup = client.release(key, token, (original.body or {})["fencing_token"])
    _expect(cleanup.status == 204, "release", cleanup)

    step("a lease with a field added by a later version")
    added = {**(original.body or {}), "added_in_a_later_version": True}
    parsed = client.parse_lease(json.dumps(added, default=str))
    _expect(parsed["owner_token"] == token, "parse", Answer(200, {}, parsed))
    print(f"  {name}: scenario passed on {key}", flush=True)


def _pick(answer: Answer, *fields: str) -> tuple[Any, ...]:
    body = answer.body or {}
    return tuple(body.get(field) for field in fields)


def _expect(condition: bool, what: str, answer: Answer) -> None:
    if not condition:
        raise SystemExit(f"{what}: unexpected answer {answer}")


class DatamodelClient:
    """httpx with the pydantic models datamodel-code-generator wrote."""

    def __init__(self, base_url: str, anon_key: str, service_key: str) -> None:
        import httpx

        sys.path.insert(0, str(OUT))
        import volcano_models

        self.models = volcano_models
        credentials = {"apikey": anon_key, "Authorization": f"Bearer {service_key}"}
        self.http = httpx.Client(base_url=base_url, headers=credentials, timeout=30)

    def _send(
        self, method: str, path: str, model: Any, body: Any = None, request_id: str | None = None
    ) -> Answer:
        response = self.http.request(
            method,
            path,
            json=None if body is None else body.model_dump(mode="json"),
            headers={"X-Request-Id": request_id} if request_id else {},
        )
        parsed = None
        if response.content:
            reader = model if response.is_success else self.models.Error
            parsed = reader.model_validate_json(response.content).model_dump(mode="json")
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, headers, parsed)

    def acquire(self, key: str, token: str, ttl: float, request_id: str | None = None) -> Answer:
        body = self.models.AcquireRequest(owner_token=token, ttl_seconds=ttl)
        return self._send(
            "POST", f"/v1/locks/{key}/acquire", self.models.LockLease, body, request_id
        )

    def get(self, key: str) -> Answer:
        return self._send("GET", f"/v1/locks/{key}", self.models.LockState)

    def renew(self, key: str, token: str, fencing_token: int, ttl: float) -> Answer:
        body = self.models.RenewRequest(
            owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl
        )
        return self._send("POST", f"/v1/locks/{key}/renew", self.models.LockLease, body)

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        body = self.models.ReleaseRequest(owner_token=token, fencing_token=fencing_token)
        return self._send("POST", f"/v1/locks/{key}/release", None, body)

    def force_release(self, key: str) -> Answer:
        return self._send("DELETE", f"/v1/locks/{key}", self.models.ForceReleaseResult)

    def parse_lease(self, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self.models.LockLease.model_validate_json(text).model_dump(
            mode="json"
        )
        return result


class OpenApiGeneratorClient:
    """The Python client openapi-generator wrote, configured with its own auth settings."""

    def __init__(self, base_url: str, anon_key: str, service_key: str) -> None:
        sys.path.insert(0, str(OUT / "og"))
        import volcano_og

        self.og = volcano_og
        config = volcano_og.Configuration(
            host=base_url, api_key={"anonKey": anon_key}, access_token=service_key
        )
        self.locks = volcano_og.LocksApi(volcano_og.ApiClient(config))

    def _call(self, operation: Callable[..., Any], **arguments: Any) -> Answer:
        try:
            response = operation(**arguments)
        except self.og.ApiException as exc:
            body = exc.data.to_dict() if exc.data is not None else None
            return Answer(exc.status, _lower(exc.headers or {}), body)
        body = response.data.to_dict() if response.data is not None else None
        return Answer(response.status_code, _lower(response.headers or {}), body)

    def acquire(self, key: str, token: str, ttl: float, request_id: str | None = None) -> Answer:
        return self._call(
            self.locks.acquire_lock_with_http_info,
            key=key,
            acquire_request=self.og.AcquireRequest(owner_token=token, ttl_seconds=ttl),
            x_request_id=request_id,
        )

    def get(self, key: str) -> Answer:
        return self._call(self.locks.get_lock_with_http_info, key=key)

    def renew(self, key: str, token: str, fencing_token: int, ttl: float) -> Answer:
        body = self.og.RenewRequest(owner_token=token, fencing_token=fencing_token, ttl_seconds=ttl)
        return self._call(self.locks.renew_lock_with_http_info, key=key, renew_request=body)

    def release(self, key: str, token: str, fencing_token: int) -> Answer:
        body = self.og.ReleaseRequest(owner_token=token, fencing_token=fencing_token)
        return self._call(self.locks.release_lock_with_http_info, key=key, release_request=body)

    def force_release(self, key: str) -> Answer:
        return self._call(self.locks.force_release_lock_with_http_info, key=key)

    def parse_lease(self, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self.og.LockLease.from_json(text).to_dict()
        return result


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


CLIENTS = {"datamodel": DatamodelClient, "openapi-generator": OpenApiGeneratorClient}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in CLIENTS:
        sys.exit(__doc__)
    name, url = sys.argv[1:]
    keys = (os.environ["VOLCANO_ANON_KEY"], os.environ["VOLCANO_SERVICE_KEY"])
    run(CLIENTS[name](url, *keys), name)
