"""The pacer: bursts of callbacks run in order, a bounded number per event-loop turn."""

from __future__ import annotations

import asyncio

import pytest

from volcano_server.transport._pacing import Pacer


async def turns_taken(pacer: Pacer, count: int) -> list[int]:
    """Submit `count` callbacks at once; the loop turn each one ran in, in run order."""
    loop = asyncio.get_running_loop()
    turn = 0
    ran: list[tuple[int, int]] = []

    def tick() -> None:  # counts turns: one call per turn, rescheduled each time
        nonlocal turn
        turn += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    await asyncio.sleep(0)
    for n in range(count):
        pacer.submit(lambda n=n: ran.append((n, turn)))  # type: ignore[misc]
    for _ in range(count + 2):  # more turns than it can take
        await asyncio.sleep(0)
    assert [n for n, _ in ran] == list(range(count)), "not all run, or out of order"
    return [at for _, at in ran]


class TestPacer:
    def test_a_burst_runs_in_order_a_few_per_turn(self) -> None:
        """100 callbacks submitted at once with room for 10 per turn: the first 10 run at once,
        the rest 10 per turn after, in the order submitted."""

        async def main() -> list[int]:
            pacer = Pacer(10)
            return await turns_taken(pacer, 100)

        turns = asyncio.run(main())
        per_turn = [turns.count(turn) for turn in sorted(set(turns))]
        assert per_turn == [10] * 10

    def test_a_quiet_turn_runs_work_at_once(self) -> None:
        """Once the burst has drained and a turn passed, a new callback runs inside submit."""

        async def main() -> tuple[int, int]:
            pacer = Pacer(2)
            await turns_taken(pacer, 5)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            ran: list[int] = []
            pacer.submit(lambda: ran.append(1))
            return len(ran), len(pacer)

        assert asyncio.run(main()) == (1, 0)

    def test_a_failing_callback_does_not_stop_the_rest(self) -> None:
        """A callback that raises is reported by the loop; those queued after it still run."""

        async def main() -> list[int]:
            loop = asyncio.get_running_loop()
            errors: list[object] = []
            loop.set_exception_handler(lambda _loop, context: errors.append(context))
            pacer = Pacer(1)
            ran: list[int] = []

            def fail() -> None:
                raise RuntimeError("boom")

            pacer.submit(lambda: ran.append(0))
            pacer.submit(fail)
            pacer.submit(lambda: ran.append(2))
            for _ in range(10):
                await asyncio.sleep(0)
            assert len(errors) == 1
            return ran

        assert asyncio.run(main()) == [0, 2]

    def test_per_turn_must_be_positive(self) -> None:
        """A pacer that could run nothing is refused."""
        with pytest.raises(ValueError, match="at least 1"):
            Pacer(0)
