"""Fair admission: slots for storage work by each project's recent use, lease-keeping first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from volcano_server.locks._admission import UPKEEP, Admission, Job
from volcano_server.wire._errors import ApiError

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Holder:
    """Work that holds a slot until the test lets it go; records the order slots came."""

    def __init__(self, admission: Admission, order: list[str]) -> None:
        self._admission = admission
        self._order = order
        self._done: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, job: Job) -> None:
        done = self._done[name] = asyncio.Event()

        async def run() -> None:
            async with self._admission.slot(job):
                self._order.append(name)
                await done.wait()

        self.tasks[name] = asyncio.ensure_future(run())

    def finish(self, name: str) -> None:
        self._done[name].set()


@contextlib.asynccontextmanager
async def holder(admission: Admission) -> AsyncIterator[tuple[Holder, list[str]]]:
    order: list[str] = []
    work = Holder(admission, order)
    try:
        yield work, order
    finally:
        for task in work.tasks.values():
            task.cancel()
        await asyncio.gather(*work.tasks.values(), return_exceptions=True)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class TestAdmission:
    async def test_a_free_slot_is_taken_at_once(self) -> None:
        """With a slot free and nobody in line, work runs without waiting a loop turn."""
        admission = Admission(2)
        entered = False

        async def work() -> None:
            nonlocal entered
            async with admission.slot(Job(1)):
                entered = True

        task = asyncio.ensure_future(work())
        await settle()
        assert entered
        await task

    async def test_a_freed_slot_goes_to_the_project_that_used_least(self) -> None:
        """Project 1 has used 5 s lately, project 2 none: when the one slot frees, project 2's
        work goes first though it came last."""
        clock = Clock()
        admission = Admission(2, reserved=1, clock=clock)
        admission.charge(1, 5.0)
        async with holder(admission) as (work, order):
            work.start("running", Job(3))
            await settle()
            work.start("flooder", Job(1))
            work.start("quiet", Job(2))
            await settle()
            assert order == ["running"]
            work.finish("running")
            await settle()
            assert order == ["running", "quiet"]
            work.finish("quiet")
            await settle()
            assert order == ["running", "quiet", "flooder"]

    async def test_within_a_project_lease_keeping_goes_first(self) -> None:
        """A project's renewal waiting behind its own read gets the freed slot first."""
        admission = Admission(2, reserved=1)
        async with holder(admission) as (work, order):
            work.start("running", Job(1))
            await settle()
            work.start("read", Job(1))
            work.start("renewal", Job(1, keeps=True))
            await settle()
            assert order == ["running", "renewal"]  # the reserved slot: only keepers use it
            work.finish("running")
            await settle()
            assert order == ["running", "renewal", "read"]

    async def test_reads_never_take_the_reserved_slots(self) -> None:
        """Of three slots one is reserved: two reads run, a third waits; a renewal of another
        project still runs at once."""
        admission = Admission(3, reserved=1)
        async with holder(admission) as (work, order):
            for name in ("a", "b", "c"):
                work.start(name, Job(1))
            await settle()
            assert order == ["a", "b"]
            work.start("renewal", Job(2, keeps=True))
            await settle()
            assert order == ["a", "b", "renewal"]

    async def test_a_request_waiting_past_patience_gets_429(self) -> None:
        """A request whose work cannot get a slot within the patience: 429 rate_limited with
        Retry-After, and it leaves the line."""
        admission = Admission(1, reserved=0, patience=0.01)
        async with holder(admission) as (work, _order):
            work.start("running", Job(1))
            await settle()
            with pytest.raises(ApiError) as refused:
                async with admission.slot(Job(1)):
                    pass
            assert (refused.value.status, refused.value.code) == (429, "rate_limited")
            assert refused.value.retry_after == 1
            assert admission.waiting == 0
            assert admission.refused == 1

    async def test_the_servers_own_work_waits_however_long(self) -> None:
        """Work that is no client's request (a hand-off) is never refused; upkeep takes no
        slot at all."""
        admission = Admission(1, reserved=0, patience=0.01)
        async with holder(admission) as (work, order):
            work.start("running", Job(1))
            await settle()
            work.start("hand-off", Job(2, keeps=True, request=False))
            await asyncio.sleep(0.05)
            async with admission.slot(UPKEEP):
                order.append("upkeep")
            assert order == ["running", "upkeep"]
            work.finish("running")
            await settle()
            assert order == ["running", "upkeep", "hand-off"]

    async def test_work_that_leaves_the_line_gives_its_place_up(self) -> None:
        """A waiter cancelled (its client left) is out of line; one granted a slot as it was
        cancelled gives the slot back."""
        admission = Admission(1, reserved=0)
        async with holder(admission) as (work, order):
            work.start("running", Job(1))
            await settle()
            work.start("left", Job(1))
            await settle()
            work.tasks["left"].cancel()
            await settle()
            assert admission.waiting == 0
            work.start("next", Job(2))
            work.finish("running")
            await settle()
            assert order == ["running", "next"]

    def test_use_decays_by_half_life(self) -> None:
        """Storage time charged decays: half after one half-life."""
        clock = Clock()
        admission = Admission(1, reserved=0, half_life=1.0, clock=clock)
        admission.charge(1, 4.0)
        clock.now = 1.0
        assert admission.used(1) == pytest.approx(2.0)
        admission.charge(1, 1.0)
        clock.now = 2.0
        assert admission.used(1) == pytest.approx(1.5)
        assert admission.used(2) == 0.0
