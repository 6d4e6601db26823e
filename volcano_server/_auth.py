"""API keys: how they are made, stored (SHA-256 hashes only) and checked on each request.

Keys are 256-bit random secrets, so a fast hash is enough (there is nothing to brute-force, unlike
passwords); the server stores only the hash, looks a presented key up by its hash and compares the
stored hash in constant time. Known keys are cached in memory for a short while so a request
costs no extra database read; unknown keys are never cached, so a key made by `keys create` in
another process works at once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable

import attrs

from ._errors import ApiError
from .storage import KeyRecord, ProjectKeys, Storage

__all__ = ["Authenticator", "Principal", "hash_key", "make_project_keys"]

_ANON_PREFIX = "vk_anon_"
_SERVICE_PREFIX = "vk_service_"


def hash_key(key: str) -> bytes:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def make_project_keys(storage: Storage, project: str) -> ProjectKeys:
    """Make a new anon key and service key for `project` (created if new) and store their hashes."""
    keys = ProjectKeys(
        project=project,
        anon_key=_ANON_PREFIX + secrets.token_urlsafe(32),
        service_key=_SERVICE_PREFIX + secrets.token_urlsafe(32),
    )
    storage.create_project_keys(project, hash_key(keys.anon_key), hash_key(keys.service_key))
    return keys


@attrs.frozen
class Principal:
    """An authenticated caller: its project and the identity of the credential it used."""

    project_id: int
    credential: bytes


class Authenticator:
    """Turns the `apikey` and `Authorization` headers into a `Principal`, or an ApiError."""

    def __init__(
        self,
        storage: Storage,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._storage = storage
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[bytes, tuple[KeyRecord, float]] = {}
        self._lock = threading.Lock()

    def authenticate(
        self, apikey: str | None, authorization: str | None, *, may_wait: bool = True
    ) -> Principal:
        """Check both credentials in the contract's order.

        401 for missing or unknown keys or keys of two projects; 403 for the anon key used as
        the service credential.
        """
        if not apikey:
            raise ApiError.unauthorized("missing apikey header (the project's anon key)")
        bearer = _bearer_token(authorization)
        anon = self._lookup(apikey, may_wait)
        if anon is None:
            raise ApiError.unauthorized("unknown apikey")
        if anon.kind != "anon":
            raise ApiError.unauthorized(
                "the apikey header takes the project's anon key, not a service key"
            )
        service = self._lookup(bearer, may_wait)
        if service is None:
            raise ApiError.unauthorized("unknown service key in Authorization")
        if service.project_id != anon.project_id:
            raise ApiError.unauthorized(
                "the apikey and the service key belong to different projects"
            )
        if service.kind != "service":
            raise ApiError.forbidden("the anon key cannot be used as the service credential")
        return Principal(service.project_id, service.key_hash)

    def _lookup(self, key: str, may_wait: bool) -> KeyRecord | None:
        digest = hash_key(key)
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            record = cached[0]
        else:
            found = self._storage.find_key(digest, wait=may_wait)
            if found is None:
                return None
            record = found
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (record, now + self._cache_seconds)
        return record if hmac.compare_digest(record.key_hash, digest) else None


def _bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise ApiError.unauthorized("missing Authorization: Bearer <service key>")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError.unauthorized("Authorization must be 'Bearer <service key>'")
    return token
