"""The group operations, each one transaction over the storage interface.

Each mutation replays a stored outcome for a repeated request id, or locks the group's row
(the clock is read once it is held), loads the one member it is about, decides (the pure rules
of `_group_rules`), writes, and stores the outcome under the request id, as the lock operations
do (`_transactions`). A stored membership is replayed only while it is still live, so no answer
ever tells a caller it holds a membership the server has ended.

A join, a leave or a removal also drops a few of the group's expired members (`SWEEP`): a
group's expired rows go as fast as new members come, however many there are, at a bounded cost
per transaction.

A transaction that moved a group's version tells this server's watchers once it has committed
(`changed`, with the group's watch key), and the servers recorded as watching the group through
an announcement (`storage._groups.watch_key`): group watches share the lock watches' machinery.
Reads run outside any write transaction; none of them loads more than a page of members.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..locks import _batch
from ..locks._registry import KeyRef
from ..locks._transactions import Caller
from ..storage import Storage, StoredOutcome, WouldBlock, WriteTx
from ..storage._groups import GroupCounts, GroupRow, Member, watch_key
from ..wire._errors import ApiError
from ..wire._wire import Answer, dumps
from ._rules import (
    GroupDecision,
    decide_create,
    decide_delete,
    decide_join,
    decide_leave,
    decide_remove,
    decide_renew,
    decide_update,
    group_not_found,
    group_state,
    member_not_found,
    member_view,
    membership_payload,
    stored_capabilities,
)

__all__ = ["MEMBERS_BUDGET", "SWEEP", "GroupTransactions", "MemberRenewal"]

SWEEP = 8
"""How many expired members of its group a join, leave or removal deletes along the way."""
MEMBERS_BUDGET = 262_144
"""The most bytes of capabilities one page of members carries (past its first member)."""


@attrs.frozen
class MemberRenewal:
    """One entry of a batch renewal of memberships."""

    group: str
    member: str
    owner_token: str = attrs.field(repr=False)
    fencing_token: int
    ttl_seconds: float


# What one group operation decides, given the transaction, the group's row and the clock.
_Decide = Callable[[WriteTx, GroupRow | None, int], GroupDecision]


class GroupTransactions:
    """Every group transaction: the API's group operations.

    Built with the storage, how long outcomes are kept for replay, this server's id, and
    `changed(key_ref)`, which tells this server's watchers that a commit moved a group's
    version (the key being its watch key).
    """

    def __init__(
        self,
        storage: Storage,
        *,
        retention_seconds: float,
        server_id: str,
        changed: Callable[[KeyRef], None],
    ) -> None:
        self._storage = storage
        self._retention_us = round(retention_seconds * 1_000_000)
        self._server_id = server_id
        self._changed = changed

    # -- the group --------------------------------------------------------------------------

    def create(self, caller: Caller, group: str, *, may_block: bool = True) -> Answer:
        """Create the group (409 group_exists while it exists)."""
        project_id = caller.project_id

        def decide(_tx: WriteTx, row: GroupRow | None, _now: int) -> GroupDecision:
            return decide_create(row, project_id=project_id, group=group)

        return self._mutate(caller, group, decide, may_block=may_block, placeholder=True)

    def delete(self, caller: Caller, group: str, *, may_block: bool = True) -> Answer:
        """Delete the group and its expired members (409 group_not_empty while one is live)."""
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            counts = tx.group_counts(project_id, group, now) if row is not None else GroupCounts()
            decision = decide_delete(row, counts, group=group)
            if not decision.refused:
                tx.delete_members(project_id, group)
            return decision

        return self._mutate(caller, group, decide, may_block=may_block)

    def list_groups(
        self, caller: Caller, *, prefix: str, after: str, limit: int, may_block: bool = True
    ) -> Answer:
        """One page of the project's groups, in name order."""
        if not may_block:
            raise WouldBlock  # a page of up to 500: longer than the event loop may be held
        with self._storage.read(may_block=may_block) as tx:
            now = tx.now_us()
            rows = tx.list_groups(caller.project_id, prefix=prefix, after=after, limit=limit + 1)
            page = rows[:limit]
            counts = tx.counts_of(caller.project_id, [row.name for row in page], now)
            states = [group_state(row, counts[row.name]) for row in page]
        following = page[-1].name if len(rows) > limit else None
        return Answer(200, dumps({"groups": states, "next": following}))

    # -- members ----------------------------------------------------------------------------

    def list_members(
        self, caller: Caller, group: str, *, after: str, limit: int, may_block: bool = True
    ) -> Answer:
        """One page of the group's live members: at most `limit`, within `MEMBERS_BUDGET`."""
        if not may_block:
            raise WouldBlock  # a page of up to 500: longer than the event loop may be held
        project_id = caller.project_id
        with self._storage.read(may_block=may_block) as tx:
            now = tx.now_us()
            row = tx.load_group(project_id, group)
            if row is None or not row.live:
                raise group_not_found(group)
            counts = tx.group_counts(project_id, group, now)
            sizes = tx.member_sizes(project_id, group, after=after, now_us=now, limit=limit + 1)
            chosen = _within_budget(sizes[:limit], MEMBERS_BUDGET)
            members = tx.members_named(project_id, group, chosen)
        more = len(chosen) < len(sizes)
        body = {
            "group": group,
            "version": row.version + counts.expired,
            "members": [member_view(member) for member in members],
            "next": chosen[-1] if more and chosen else None,
        }
        return Answer(200, dumps(body))

    def get_member(
        self, caller: Caller, group: str, member: str, *, may_block: bool = True
    ) -> Answer:
        """One live member and its capabilities (404 member_not_found, group_not_found)."""
        with self._storage.read(may_block=may_block) as tx:
            now = tx.now_us()
            row = tx.load_group(caller.project_id, group)
            if row is None or not row.live:
                raise group_not_found(group)
            found = tx.load_member(caller.project_id, group, member)
        if found is None or not found.live(now):
            raise member_not_found(group, member)
        return Answer(200, dumps(member_view(found)))

    def join(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        ttl_seconds: float,
        capabilities: dict[str, Any] | None,
        may_block: bool = True,
    ) -> Answer:
        """Join the group as `member` with `capabilities`, or join again as its holder."""
        stored = stored_capabilities(capabilities)  # 422 before any transaction
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            existing = tx.load_member(project_id, group, member)
            return decide_join(
                row,
                existing,
                now,
                group=group,
                member=member,
                owner_token=owner_token,
                ttl=ttl_seconds,
                capabilities=stored,
            )

        return self._mutate(caller, group, decide, may_block=may_block, sweeps=True, lease=True)

    def renew(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        fencing_token: int,
        ttl_seconds: float,
        may_block: bool = True,
    ) -> Answer:
        """Extend the live membership that matches both tokens."""
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            existing = tx.load_member(project_id, group, member) if row is not None else None
            return decide_renew(
                row,
                existing,
                now,
                group=group,
                member=member,
                owner_token=owner_token,
                fencing_token=fencing_token,
                ttl=ttl_seconds,
            )

        return self._mutate(caller, group, decide, may_block=may_block, lease=True)

    def update(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        fencing_token: int,
        capabilities: dict[str, Any] | None,
        may_block: bool = True,
    ) -> Answer:
        """Give the live membership that matches both tokens these capabilities."""
        stored = stored_capabilities(capabilities)
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            existing = tx.load_member(project_id, group, member) if row is not None else None
            return decide_update(
                row,
                existing,
                now,
                group=group,
                member=member,
                owner_token=owner_token,
                fencing_token=fencing_token,
                capabilities=stored,
            )

        return self._mutate(caller, group, decide, may_block=may_block, lease=True)

    def leave(
        self,
        caller: Caller,
        group: str,
        member: str,
        *,
        owner_token: str,
        fencing_token: int,
        may_block: bool = True,
    ) -> Answer:
        """End the live membership that matches both tokens."""
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            existing = tx.load_member(project_id, group, member) if row is not None else None
            return decide_leave(
                row,
                existing,
                now,
                group=group,
                member=member,
                owner_token=owner_token,
                fencing_token=fencing_token,
            )

        return self._mutate(caller, group, decide, may_block=may_block, sweeps=True)

    def remove(self, caller: Caller, group: str, member: str, *, may_block: bool = True) -> Answer:
        """End the member's live membership, whoever holds it."""
        project_id = caller.project_id

        def decide(tx: WriteTx, row: GroupRow | None, now: int) -> GroupDecision:
            existing = tx.load_member(project_id, group, member) if row is not None else None
            return decide_remove(row, existing, now, group=group, member=member)

        return self._mutate(caller, group, decide, may_block=may_block, sweeps=True)

    def renew_many(
        self, caller: Caller, renewals: Sequence[MemberRenewal], *, may_block: bool = True
    ) -> Answer:
        """Renew each membership as `renew` would, in one transaction, one outcome for them all.

        The groups' rows are locked in name order, and the clock read once they all are;
        entries about one member are judged in order, each on what the one before it left.
        """
        if not may_block:
            raise WouldBlock  # up to 500 renewals: longer than the event loop may be held
        project_id, request_id, fingerprint = (
            caller.project_id,
            caller.request_id,
            caller.fingerprint,
        )
        names = sorted({renewal.group for renewal in renewals})
        pairs = sorted({(renewal.group, renewal.member) for renewal in renewals})

        def work(tx: WriteTx) -> Answer:
            prior = tx.claim_request(project_id, request_id) if fingerprint is not None else None
            rows = tx.lock_groups(project_id, names)
            now = tx.now_us()
            members: dict[tuple[str, str], Member | None] = dict.fromkeys(pairs)
            members.update(tx.load_members(project_id, pairs))
            if prior is not None and fingerprint is not None:
                return self._replay_many(caller, prior, fingerprint, members, now)
            results: list[_batch.Result] = []
            renewed: dict[tuple[str, str], Member] = {}
            for entry in renewals:
                pair = (entry.group, entry.member)
                decision = decide_renew(
                    rows[entry.group],
                    members[pair],
                    now,
                    group=entry.group,
                    member=entry.member,
                    owner_token=entry.owner_token,
                    fencing_token=entry.fencing_token,
                    ttl=entry.ttl_seconds,
                )
                if decision.refusal is not None:
                    results.append(_refused(entry, decision.refusal, request_id))
                    continue
                assert decision.member is not None  # noqa: S101 - a renewal's 200 has it
                assert decision.payload is not None  # noqa: S101 - and its body
                members[pair] = renewed[pair] = decision.member
                results.append(_renewed(entry, decision.payload, decision.member.expires_at_us))
            for (group, _), member in sorted(renewed.items()):
                tx.renew_member(project_id, group, member)
            answer = _batch.answer(results)
            if fingerprint is not None:
                tx.save_outcome(project_id, request_id, self._stored(fingerprint, answer, now))
            return answer

        return self._in_transaction(work, may_block=may_block)

    # -- transactions -----------------------------------------------------------------------

    def _mutate(
        self,
        caller: Caller,
        group: str,
        decide: _Decide,
        *,
        may_block: bool,
        placeholder: bool = False,
        sweeps: bool = False,
        lease: bool = False,
    ) -> Answer:
        """One group operation: replay, or decide, write and store its outcome.

        `placeholder`: lock the group's row even if it does not exist yet (a create).
        `sweeps`: drop a few expired members first. `lease`: a 200 tells of a membership,
        which a replay gives back only while it is still live.
        """
        project_id, fingerprint = caller.project_id, caller.fingerprint
        moved: list[str] = []

        def work(tx: WriteTx) -> Answer:
            if fingerprint is not None:
                prior = tx.claim_request(project_id, caller.request_id)
                if prior is not None:
                    return self._replay(tx, caller, prior, fingerprint, lease=lease)
            row = tx.lock_group(project_id, group, placeholder=placeholder)
            now = tx.now_us()
            swept = None
            if sweeps and row is not None and row.live:
                dropped = tx.drop_expired(project_id, group, now, SWEEP)
                if dropped:  # their expiries, counted until now, are saved
                    row = swept = attrs.evolve(row, version=row.version + dropped)
            decision = decide(tx, row, now)
            saved = decision.group or swept
            if saved is not None:
                tx.save_group(saved)
            if decision.member is not None and decision.renewal:
                tx.renew_member(project_id, group, decision.member)
            elif decision.member is not None:
                tx.save_member(project_id, group, decision.member)
            if decision.gone is not None:
                tx.delete_member(project_id, group, decision.gone)
            if decision.group is not None:
                self._announce(tx, project_id, group)
                moved.append(group)
            answer = _render(decision, caller.request_id)
            if fingerprint is not None:
                tx.save_outcome(
                    project_id, caller.request_id, self._stored(fingerprint, answer, now)
                )
            return answer

        answer = self._in_transaction(work, may_block=may_block)
        for name in moved:
            self._changed((project_id, watch_key(name)))
        return answer

    def _announce(self, tx: WriteTx, project_id: int, group: str) -> None:
        """Tell the other servers watching the group that its version moved (on commit)."""
        if any(server != self._server_id for server in tx.group_watchers(project_id, group)):
            tx.announce_change(project_id, watch_key(group))

    def _replay(
        self, tx: WriteTx, caller: Caller, prior: StoredOutcome, fingerprint: bytes, *, lease: bool
    ) -> Answer:
        """The stored answer to a repeated request id, if it still holds true."""
        if not hmac.compare_digest(prior.fingerprint, fingerprint):
            return ApiError.request_id_reused(caller.request_id).answer(caller.request_id)
        replayed = Answer(prior.status, prior.body, prior.retry_after, replayed=True)
        if not (lease and prior.status == 200):
            return replayed
        membership = json.loads(prior.body)
        found = tx.load_member(caller.project_id, membership["group"], membership["member"])
        if found is None or not _is_live(found, tx.now_us(), membership):
            return attrs.evolve(_ended(membership, caller.request_id), replayed=True)
        # The membership as it is now, never its stored expiry (a later join or renewal of
        # its holder may have shortened it).
        told = membership_payload(membership["group"], found)
        body = prior.body if told == membership else dumps(told)
        return attrs.evolve(replayed, body=body, lease_until_us=found.expires_at_us)

    def _replay_many(
        self,
        caller: Caller,
        prior: StoredOutcome,
        fingerprint: bytes,
        members: dict[tuple[str, str], Member | None],
        now: int,
    ) -> Answer:
        """The stored answer to a repeated batch, each membership that has ended since refused."""
        if not hmac.compare_digest(prior.fingerprint, fingerprint):
            return ApiError.request_id_reused(caller.request_id).answer(caller.request_id)
        if prior.status != 200:
            return Answer(prior.status, prior.body, prior.retry_after, replayed=True)
        results: list[_batch.Result] = []
        for result in json.loads(prior.body)["results"]:
            membership = result.get("membership")
            if membership is None:
                results.append((result, None))
            elif (found := members.get((result["group"], result["member"]))) is not None and (
                _is_live(found, now, membership)
            ):
                told = membership_payload(result["group"], found)
                entry = result if told == membership else {**result, "membership": told}
                results.append((entry, found.expires_at_us))
            else:
                error = _ended(membership, caller.request_id)
                detail = json.loads(error.body)["error"]
                refused = {"group": result["group"], "member": result["member"]}
                results.append(({**refused, "status": 409, "error": detail}, None))
        return _batch.answer(results, replay=True)

    def _in_transaction(self, work: Callable[[WriteTx], Answer], *, may_block: bool) -> Answer:
        """Run `work` in one write transaction; an answer telling of a membership is timed."""
        with self._storage.write(may_block=may_block) as tx:
            answer = work(tx)
        if answer.lease_until_us is not None:
            return attrs.evolve(answer, clock_us=tx.committed_us, clock_at=tx.committed_at)
        return answer

    def _stored(self, fingerprint: bytes, answer: Answer, now: int) -> StoredOutcome:
        return StoredOutcome(
            fingerprint, answer.status, answer.body, answer.retry_after, now + self._retention_us
        )


def _within_budget(sizes: Sequence[tuple[str, int]], budget: int) -> list[str]:
    """The members of a page: in order, while their capabilities fit `budget` (one at least)."""
    chosen: list[str] = []
    total = 0
    for name, size in sizes:
        if chosen and total + size > budget:
            break
        chosen.append(name)
        total += size
    return chosen


def _is_live(found: Member | None, now: int, membership: dict[str, Any]) -> bool:
    """Whether the membership of a stored Membership body is still that member's live one."""
    return (
        found is not None
        and found.live(now)
        and found.owner_token == membership["owner_token"]
        and found.fencing_token == membership["fencing_token"]
    )


def _ended(membership: dict[str, Any], request_id: str) -> Answer:
    message = (
        f"the membership this request produced (fencing token {membership['fencing_token']} of"
        f" {membership['member']} in {membership['group']}) is no longer live: it left, was"
        " removed or expired since"
    )
    return ApiError.lease_not_held(message).answer(request_id)


def _render(decision: GroupDecision, request_id: str) -> Answer:
    if decision.refusal is not None:
        return decision.refusal.answer(request_id)
    body = dumps(decision.payload) if decision.payload is not None else b""
    until = decision.lease.expires_at_us if decision.lease is not None else None
    return Answer(decision.status, body, lease_until_us=until)


def _renewed(entry: MemberRenewal, payload: dict[str, Any], until_us: int) -> _batch.Result:
    return {"group": entry.group, "member": entry.member, "membership": payload}, until_us


def _refused(entry: MemberRenewal, error: ApiError, request_id: str) -> _batch.Result:
    detail = error.detail(request_id)
    return {
        "group": entry.group,
        "member": entry.member,
        "status": error.status,
        "error": detail,
    }, None
