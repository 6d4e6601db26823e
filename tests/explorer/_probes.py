"""Checks of the explorer's probes: requests no honest client sends, whose answer is known.

A client of the explorer only ever names its own owner token with a fencing token it was told
of. The probes (`test_schedules.Schedules.wrong_tokens`) also send renews and releases that pair
an owner token with a fencing token it was never granted: another holder's token, a token never
issued, or a fresh owner token with a live lease's token. Such a pair names no lease, so its
answer must be a refusal, whatever the key holds (rules 1 and 8 of docs/safety.md: a release that
ignored either token would end someone else's lease, or the owner's newer one).
"""

from __future__ import annotations

from typing import Any

from tests.explorer._checks import Checks, Violation
from tests.explorer._world import Request, World

__all__ = ["Probes", "WrongTokenAccepted"]


class WrongTokenAccepted(Violation):
    """A renew or release naming an owner token and a fencing token never granted together was
    not refused."""


class Probes:
    """Remembers which owner each fencing token was told to, and judges the probes' answers."""

    def __init__(self, world: World, checks: Checks) -> None:
        self._checks = checks
        self.owners: dict[tuple[str, int], str] = {}  # (key, fencing token) -> owner told
        world.answer_hooks.append(self._heard)

    def _heard(self, request: Request) -> None:
        for lease in _leases_in(request):
            self.owners.setdefault((lease["key"], lease["fencing_token"]), lease["owner_token"])
        body = request.body or {}
        if request.op == "renew_many" and request.status == 200:
            for index, (entry, result) in enumerate(
                zip(body["leases"], request.payload["results"], strict=True)
            ):
                if "lease" in result and self._wrong(entry["key"], entry):
                    self._checks.problem(
                        WrongTokenAccepted,
                        f"{request.describe()} entry {index} named fencing token"
                        f" {entry['fencing_token']}, never granted to its owner token, and was"
                        " renewed",
                    )
        if request.op not in ("renew", "release") or "fencing_token" not in body:
            return
        if self._wrong(request.key, body) and _accepted(request):
            self._checks.problem(
                WrongTokenAccepted,
                f"{request.describe()} named fencing token {body['fencing_token']}, never granted"
                f" to its owner token, and got {request.status}",
            )

    def _wrong(self, key: str, named: dict[str, Any]) -> bool:
        """Whether `named` pairs an owner token with a fencing token never granted to it: told
        to another owner, or never issued."""
        told = self.owners.get((key, named["fencing_token"]))
        if told is None:
            return bool(named["fencing_token"] >= NEVER_ISSUED)
        return told != named["owner_token"]


NEVER_ISSUED = 1_000_000
"""Fencing tokens from here up are never issued in a schedule (probes name them)."""


def _accepted(request: Request) -> bool:
    return request.status is not None and 200 <= request.status < 300


def _leases_in(request: Request) -> list[dict[str, Any]]:
    if request.status != 200 or not isinstance(request.payload, dict):
        return []
    if request.op in ("acquire", "renew"):
        return [request.payload]
    if request.op == "renew_many":
        return [r["lease"] for r in request.payload["results"] if "lease" in r]
    return []
