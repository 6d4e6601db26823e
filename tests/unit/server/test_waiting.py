"""The waiting code's pure parts: an entry's state machine, a request's next turn, and the
hand-off decision; and one shell path that needs no database."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from volcano_server._config import WaitingSettings
from volcano_server.locks._pulse import Pulse
from volcano_server.locks._registry import MOVES, Entry, Move, Phase, Registry
from volcano_server.locks._revocations import NoRevocations
from volcano_server.locks._transactions import Transactions
from volcano_server.locks._waiters import HandoffTimers, Turn, Waits, next_turn
from volcano_server.locks._watching import Watches
from volcano_server.storage import StorageUnavailable
from volcano_server.telemetry._lockmetrics import LockMetrics
from volcano_server.transport._pacing import Pacer
from volcano_server.wire._wire import Answer

pytestmark = pytest.mark.anyio

NOW = 1_780_000_000_000_000
SECOND = 1_000_000


def entry() -> Entry:
    return Entry(
        project_id=1,
        key="k",
        owner_token="0F8FAD5B-D9CB-469F-A165-70867728950E",
        ttl_seconds=30.0,
        request_id="7c9e6679-7425-40de-944b-e07fc1f90ae7",
        fingerprint=b"f" * 32,
    )


class TestStateMachine:
    @pytest.mark.parametrize(("phase", "move"), list(itertools.product(Phase, Move)))
    async def test_every_phase_and_move(self, phase: Phase, move: Move) -> None:
        """A move applies exactly where the table allows it, and nowhere else."""
        room = Registry("here")
        made = entry()
        room.join(made, 7)
        made.phase = phase
        moved = room.move(made, move)
        expected = MOVES.get((phase, move))
        assert moved == (expected is not None)
        assert made.phase is (expected or phase)

    async def test_a_granted_entry_leaves_the_room_with_its_answer(self) -> None:
        """Commit records the lease as the answer and forgets the entry's place."""
        room = Registry("here")
        made = entry()
        room.join(made, 7)
        assert room.claim(7) is made
        answer = Answer(200, b"{}")
        assert room.move(made, Move.COMMIT, answer)
        assert made.answer is answer
        assert len(room) == 0
        assert room.claim(7) is None

    async def test_a_leaving_entry_cannot_be_granted(self) -> None:
        """Once its request leaves, a hand-off finds nobody to claim at its place."""
        room = Registry("here")
        made = entry()
        room.join(made, 7)
        assert room.move(made, Move.LEAVE)
        assert room.claim(7) is None

    async def test_joining_again_supersedes_the_older_request(self) -> None:
        """A newer request with the same owner token takes the place; the older gets 409."""
        room = Registry("here")
        older, newer = entry(), entry()
        room.join(older, 7)
        room.join(newer, 7)
        assert older.phase is Phase.SUPERSEDED
        assert older.answer is not None
        assert older.answer.status == 409
        assert room.claim(7) is newer


class TestRevocation:
    async def test_a_revoked_waiter_is_answered_401_and_cannot_be_granted(self) -> None:
        """Revoking an entry records a 401, drops its place, and no hand-off can claim it."""
        room = Registry("here")
        made = entry()
        room.join(made, 7)
        assert room.revoke(made)
        assert made.phase is Phase.REVOKED
        assert made.answer is not None
        assert made.answer.status == 401
        assert room.claim(7) is None
        assert len(room) == 0


class TestNextTurn:
    @pytest.mark.parametrize(
        ("phase", "gone", "closing", "timed_out", "turn"),
        [
            (Phase.GRANTED, False, False, False, Turn.DELIVER),
            (Phase.GRANTED, True, False, False, Turn.UNDELIVER),
            (Phase.GRANTED, True, True, True, Turn.UNDELIVER),
            (Phase.SUPERSEDED, True, False, False, Turn.DELIVER),
            (Phase.GRANTING, True, True, True, Turn.AWAIT_COMMIT),
            (Phase.QUEUED, True, False, False, Turn.LEAVE),
            (Phase.QUEUED, False, True, False, Turn.LEAVE),
            (Phase.QUEUED, False, False, True, Turn.GIVE_UP),
            (Phase.QUEUED, False, False, False, Turn.WAIT),
            (Phase.LEAVING, False, False, True, Turn.WAIT),
            (Phase.REVOKED, False, False, False, Turn.REVOKED),
            (Phase.REVOKED, True, True, True, Turn.REVOKED),
        ],
    )
    async def test_each_phase(
        self, phase: Phase, gone: bool, closing: bool, timed_out: bool, turn: Turn
    ) -> None:
        """A granted lease goes to its client, or is ended when the client left; a queued
        request leaves or gives up; a grant on its way is awaited."""
        assert next_turn(phase, gone=gone, closing=closing, timed_out=timed_out) is turn


class _Unreachable:
    """A storage whose database is out of reach."""

    pushes_handoffs = True

    def write(self, **_kwargs: Any) -> Any:
        raise StorageUnavailable("the database is out of reach")


class _Inline:
    """Runs storage work at once, on the loop, its errors as they come (no 503)."""

    async def __call__(self, work: Any, **_options: Any) -> Any:
        return work(True)

    async def in_lane(self, _lane: Any, work: Any, **_options: Any) -> Any:
        return work(True, lambda: None)


class TestWaitTurn:
    async def test_a_wait_whose_last_hand_off_fails_leaves_the_line(self) -> None:
        """The wait runs out while the database is out of reach: the request gets the error,
        and its entry is out of line, so no hand-off after the database is back grants it."""
        room = Registry("here")
        made = entry()
        room.join(made, 7)

        run = _Inline()
        storage: Any = _Unreachable()
        timers = HandoffTimers(room)
        watches = Watches(
            storage,
            run,  # type: ignore[arg-type]
            server_id="here",
            max_wait_seconds=60,
            heartbeat_lifetime_us=3_000_000,
            pace=Pacer(64).submit,
        )
        metrics = LockMetrics(CollectorRegistry())
        transactions = Transactions(
            storage,
            room,
            retention_seconds=600,
            settings=WaitingSettings(),
            time_handoff=timers.time_handoff,
            changed=watches.changed,
            pulse=Pulse(3_000_000),
            revocations=NoRevocations(),
            metrics=metrics,
        )
        waits = Waits(
            storage,
            room,
            transactions,
            timers,
            settings=WaitingSettings(),
            run=run,  # type: ignore[arg-type]
            pulse=Pulse(3_000_000),
            revocations=NoRevocations(),
            watches=watches,
            metrics=metrics,
        )
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with pytest.raises(StorageUnavailable):
            await waits._turns(made, 0.0, gone)
        assert made.phase is Phase.LEAVING
        assert len(room) == 0
        assert room.claim(7) is None
