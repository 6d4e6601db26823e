"""API keys: how they are made, stored (SHA-256 hashes only) and checked on each request.

Keys are 256-bit random secrets, so a fast hash is enough (there is nothing to brute-force, unlike
passwords); the server stores only the hash, looks a presented key up by its hash and compares the
stored hash in constant time. Known keys are cached in memory for a short while (2 s by default)
so a request costs no extra database read, and a key revoked by `keys revoke` in another process
is refused by every server within that; unknown keys are never cached, so a key made by `keys
create` works at once. Each key's last use is noted in memory and written in batches by a
background task (`take_uses`), never on a request's path.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable

import attrs

from ..storage import KeyRecord, ProjectKeys, Storage
from ..wire._errors import ApiError

__all__ = [
    "Authenticator",
    "Principal",
    "hash_key",
    "make_project_keys",
]

# "local": made by a volcano-server of the user's own, not the hosted service. The SDK will not
# send such a key to the hosted default URL unless the user names it (volcano/_config.py).
# Keys made before this prefix (vk_anon_..., vk_service_...) keep working: only hashes are stored.
_ANON_PREFIX = "vk_local_anon_"
_SERVICE_PREFIX = "vk_local_service_"


def hash_key(key: str) -> bytes:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def make_project_keys(
    storage: Storage, project: str, *, actor: str = "volcano-server"
) -> ProjectKeys:
    """Make a new anon key and service key for `project` (created if new) and store their hashes."""
    keys = ProjectKeys(
        project=project,
        anon_key=_ANON_PREFIX + secrets.token_urlsafe(32),
        service_key=new_service_key(),
    )
    storage.create_project_keys(
        project, hash_key(keys.anon_key), hash_key(keys.service_key), actor=actor
    )
    return keys


def new_service_key() -> str:
    """A fresh service key (store only its hash)."""
    return _SERVICE_PREFIX + secrets.token_urlsafe(32)


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
        cache_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self._storage = storage
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._wall_clock_us = wall_clock_us
        self._cache: dict[bytes, tuple[KeyRecord, float]] = {}
        self._uses: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def authenticate(
        self, apikey: str | None, authorization: str | None, *, may_block: bool = True
    ) -> Principal:
        """Check both credentials in the contract's order.

        401 for missing or unknown keys or keys of two projects; 403 for the anon key used as
        the service credential.
        """
        if not apikey:
            raise ApiError.unauthorized("missing apikey header (the project's anon key)")
        bearer = _bearer_token(authorization)
        anon = self._lookup(apikey, may_block)
        if anon is None:
            raise ApiError.unauthorized("unknown apikey")
        if anon.revoked:
            raise ApiError.unauthorized("the apikey was revoked")
        if anon.kind != "anon":
            raise ApiError.unauthorized(
                "the apikey header takes the project's anon key, not a service key"
            )
        service = self._lookup(bearer, may_block)
        if service is None:
            raise ApiError.unauthorized("unknown service key in Authorization")
        if service.revoked:
            raise ApiError.unauthorized("the service key in Authorization was revoked")
        if service.project_id != anon.project_id:
            raise ApiError.unauthorized(
                "the apikey and the service key belong to different projects"
            )
        if service.kind != "service":
            raise ApiError.forbidden("the anon key cannot be used as the service credential")
        now_us = self._wall_clock_us()
        with self._lock:
            self._uses[anon.key_hash] = self._uses[service.key_hash] = now_us
        return Principal(service.project_id, service.key_hash)

    def put_back_uses(self, uses: dict[bytes, int]) -> None:
        """Keep uses that could not be written, for the next try (newer ones win)."""
        with self._lock:
            for key_hash, at_us in uses.items():
                self._uses[key_hash] = max(at_us, self._uses.get(key_hash, at_us))

    def take_uses(self) -> dict[bytes, int]:
        """The keys used since the last call (key hash -> last use), for `record_key_uses`."""
        with self._lock:
            uses, self._uses = self._uses, {}
        return uses

    def revoked(self, digest: bytes, *, may_block: bool = True) -> bool:
        """Whether the service key with this hash is revoked (or gone), as of the cache.

        Looked up again once its cached record is older than the cache's lifetime, so a
        revocation is known here within `cache_seconds`.
        """
        record = self._record(digest, may_block)
        return record is None or record.revoked

    def known_revoked(self, digest: bytes) -> bool:
        """Whether the cache already says this key is revoked (never a database read)."""
        cached = self._cache.get(digest)
        return cached is not None and cached[0].revoked

    def _lookup(self, key: str, may_block: bool) -> KeyRecord | None:
        return self._record(hash_key(key), may_block)

    def _record(self, digest: bytes, may_block: bool) -> KeyRecord | None:
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            record = cached[0]
        else:
            found = self._storage.find_key(digest, may_block=may_block)
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
