"""The lock rules, written once over the storage interface.

Each operation is one write transaction: replay a stored outcome for a repeated request id, or
load the key's row, decide (pure functions below), save the row and store the outcome under the
request id. Time is the storage's clock, read once inside the transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable
from typing import Any

import attrs

from ._wire import dumps, error_body, rfc3339_us
from .storage import LockRow, Storage, StoredOutcome

__all__ = ["MAX_FENCING_TOKEN", "Answer", "Caller", "LockService"]

MAX_FENCING_TOKEN = 2**53 - 1


@attrs.frozen
class Caller:
    """Who asks, and under which request id. Only a client-sent id makes a request replayable."""

    project_id: int
    credential: bytes
    request_id: str
    replayable: bool


@attrs.frozen
class Answer:
    """An HTTP answer to a lock operation."""

    status: int
    body: bytes
    retry_after: int | None = None
    replayed: bool = False


@attrs.frozen
class _Decision:
    """What an operation does to a key's row, and what it answers (before rendering)."""

    row: LockRow | None  # the row to save, or None to leave storage unchanged
    status: int
    payload: dict[str, Any] | None = None  # the 2xx body
    code: str = ""  # the 409 code
    message: str = ""
    retry_after: int | None = None


Decide = Callable[[LockRow | None, int], _Decision]


class LockService:
    """Acquire, renew, release, force release and get, with idempotent request ids."""

    def __init__(self, storage: Storage, retention_seconds: float) -> None:
        self._storage = storage
        self._retention_us = round(retention_seconds * 1_000_000)
        self.runs_inline = storage.runs_inline

    def acquire(self, caller: Caller, key: str, owner_token: str, ttl_seconds: float) -> Answer:
        """Take a free or expired key, or extend the caller's own live lease."""
        body = {"owner_token": owner_token, "ttl_seconds": ttl_seconds}
        return self._mutate(
            caller,
            "acquire",
            key,
            body,
            lambda row, now: decide_acquire(
                row,
                now,
                project_id=caller.project_id,
                key=key,
                owner_token=owner_token,
                ttl=ttl_seconds,
            ),
        )

    def renew(
        self, caller: Caller, key: str, owner_token: str, fencing_token: int, ttl_seconds: float
    ) -> Answer:
        """Extend the live lease that matches both tokens."""
        body = {
            "owner_token": owner_token,
            "fencing_token": fencing_token,
            "ttl_seconds": ttl_seconds,
        }
        return self._mutate(
            caller,
            "renew",
            key,
            body,
            lambda row, now: decide_renew(
                row,
                now,
                key=key,
                owner_token=owner_token,
                fencing_token=fencing_token,
                ttl=ttl_seconds,
            ),
        )

    def release(self, caller: Caller, key: str, owner_token: str, fencing_token: int) -> Answer:
        """End the live lease that matches both tokens."""
        body = {"owner_token": owner_token, "fencing_token": fencing_token}
        return self._mutate(
            caller,
            "release",
            key,
            body,
            lambda row, now: decide_release(
                row, now, key=key, owner_token=owner_token, fencing_token=fencing_token
            ),
        )

    def force_release(self, caller: Caller, key: str) -> Answer:
        """End the live lease, whoever holds it."""
        return self._mutate(
            caller,
            "force_release",
            key,
            {},
            lambda row, now: decide_force_release(row, now, key=key),
        )

    def get(self, caller: Caller, key: str) -> Answer:
        """Report the key's state without changing it."""
        with self._storage.read() as tx:
            now = tx.now_us()
            row = tx.load_lock(caller.project_id, key)
        return Answer(200, dumps(lock_state(row, now, key)))

    def _mutate(
        self, caller: Caller, operation: str, key: str, body: dict[str, Any], decide: Decide
    ) -> Answer:
        # Computed before the transaction, so the write lock is held no longer than needed.
        fingerprint = (
            _fingerprint(operation, key, body, caller.credential) if caller.replayable else b""
        )
        with self._storage.write() as tx:
            if caller.replayable:
                prior = tx.claim_request(caller.project_id, caller.request_id)
                if prior is not None:
                    return _replay(prior, fingerprint, caller.request_id)
            now = tx.now_us()
            decision = decide(tx.load_lock(caller.project_id, key), now)
            if decision.row is not None:
                tx.save_lock(decision.row)
            answer = _render(decision, caller.request_id)
            if caller.replayable:
                stored = StoredOutcome(
                    fingerprint,
                    answer.status,
                    answer.body,
                    answer.retry_after,
                    now + self._retention_us,
                )
                tx.save_outcome(caller.project_id, caller.request_id, stored)
            return answer


def decide_acquire(
    row: LockRow | None, now: int, *, project_id: int, key: str, owner_token: str, ttl: float
) -> _Decision:
    """Decide an acquire.

    A free or expired key gets the next fencing token; the live holder's own token gets its
    lease back with a new expiry; anyone else gets 409 lock_held.
    """
    expires = now + _micros(ttl)
    if row is not None and row.live(now):
        if row.owner_token != owner_token:
            assert row.expires_at_us is not None  # noqa: S101 - live() checked it
            wait = max(1, math.ceil((row.expires_at_us - now) / 1_000_000))
            message = f"{key} is held by another owner for up to {wait} more seconds"
            return _Decision(None, 409, code="lock_held", message=message, retry_after=wait)
        kept = attrs.evolve(row, expires_at_us=expires, ttl_seconds=ttl)
        return _Decision(kept, 200, payload=_lease(kept))
    last = row.fencing_token if row is not None else 0
    if last >= MAX_FENCING_TOKEN:  # 2^53 acquisitions of one key: unreachable in practice
        raise RuntimeError(f"fencing tokens of {key!r} in project {project_id} are exhausted")
    granted = LockRow(project_id, key, last + 1, owner_token, expires, ttl)
    return _Decision(granted, 200, payload=_lease(granted))


def decide_renew(
    row: LockRow | None, now: int, *, key: str, owner_token: str, fencing_token: int, ttl: float
) -> _Decision:
    """The matching live lease gets a new expiry and keeps its fencing token."""
    refusal = _refusal(row, now, key, owner_token, fencing_token)
    if refusal is not None:
        return refusal
    assert row is not None  # noqa: S101 - _refusal checked it
    renewed = attrs.evolve(row, expires_at_us=now + _micros(ttl), ttl_seconds=ttl)
    return _Decision(renewed, 200, payload=_lease(renewed))


def decide_release(
    row: LockRow | None, now: int, *, key: str, owner_token: str, fencing_token: int
) -> _Decision:
    """The matching live lease ends; the key keeps its last fencing token."""
    refusal = _refusal(row, now, key, owner_token, fencing_token)
    if refusal is not None:
        return refusal
    assert row is not None  # noqa: S101 - _refusal checked it
    return _Decision(_vacated(row), 204)


def decide_force_release(row: LockRow | None, now: int, *, key: str) -> _Decision:
    """The live lease, if any, ends whatever its owner."""
    if row is None or not row.live(now):
        return _Decision(None, 200, payload={"key": key, "released": False, "fencing_token": None})
    return _Decision(
        _vacated(row),
        200,
        payload={"key": key, "released": True, "fencing_token": row.fencing_token},
    )


def lock_state(row: LockRow | None, now: int, key: str) -> dict[str, Any]:
    """The public view of a key: never the owner token."""
    if row is not None and row.live(now):
        assert row.expires_at_us is not None  # noqa: S101 - live() checked it
        return {
            "key": key,
            "held": True,
            "expires_at": rfc3339_us(row.expires_at_us),
            "fencing_token": row.fencing_token,
        }
    return {
        "key": key,
        "held": False,
        "expires_at": None,
        "fencing_token": row.fencing_token if row else None,
    }


def _refusal(
    row: LockRow | None, now: int, key: str, owner_token: str, fencing_token: int
) -> _Decision | None:
    if (
        row is not None
        and row.live(now)
        and row.owner_token == owner_token
        and row.fencing_token == fencing_token
    ):
        return None
    if row is None:
        why = "it has never been acquired"
    elif row.live(now) and row.fencing_token != fencing_token:
        why = f"it is held under fencing token {row.fencing_token}"
    elif row.live(now):
        why = "the owner token does not match the live lease"
    else:
        why = "no lease is live (it expired or was released)"
    message = (
        f"no live lease on {key} matches this owner token and fencing token {fencing_token}: {why}"
    )
    return _Decision(None, 409, code="lease_not_held", message=message)


def _vacated(row: LockRow) -> LockRow:
    return attrs.evolve(row, owner_token=None, expires_at_us=None, ttl_seconds=None)


def _lease(row: LockRow) -> dict[str, Any]:
    assert row.expires_at_us is not None  # noqa: S101 - only live rows become leases
    return {
        "key": row.key,
        "owner_token": row.owner_token,
        "fencing_token": row.fencing_token,
        "expires_at": rfc3339_us(row.expires_at_us),
        "ttl_seconds": row.ttl_seconds,
    }


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _render(decision: _Decision, request_id: str) -> Answer:
    if decision.status >= 400:
        return Answer(
            decision.status,
            error_body(decision.code, decision.message, request_id),
            decision.retry_after,
        )
    return Answer(decision.status, dumps(decision.payload) if decision.payload is not None else b"")


def _replay(prior: StoredOutcome, fingerprint: bytes, request_id: str) -> Answer:
    if hmac.compare_digest(prior.fingerprint, fingerprint):
        return Answer(prior.status, prior.body, prior.retry_after, replayed=True)
    message = (
        f"request id {request_id} was already used for a different request; use a new request id"
    )
    return Answer(409, error_body("request_id_reused", message, request_id))


def _fingerprint(operation: str, key: str, body: dict[str, Any], credential: bytes) -> bytes:
    """What makes two requests "the same": operation, key, validated body and credential."""
    return hashlib.sha256(dumps([operation, key, sorted(body.items()), credential.hex()])).digest()
