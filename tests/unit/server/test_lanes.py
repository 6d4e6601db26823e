"""Lanes: one key's transactions in the order they asked, a lane left early lets the next go; the
runner hands work in a lane what leaves it, and decides where the wait for the disk runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import pytest

from volcano_server.locks._admission import Job
from volcano_server.locks._lanes import Lanes
from volcano_server.locks._offload import Runner
from volcano_server.storage import OnLocked
from volcano_server.telemetry._metrics import Metrics

T = TypeVar("T")

pytestmark = pytest.mark.anyio


async def test_a_key_s_lane_is_taken_in_the_order_it_was_asked_for() -> None:
    lanes = Lanes()
    entered: list[int] = []
    first_in = asyncio.Event()
    go_on = asyncio.Event()

    async def transaction(number: int) -> None:
        async with lanes.lane((1, "k")):
            entered.append(number)
            if number == 0:
                first_in.set()
                await go_on.wait()  # as a transaction in a worker thread would
            await asyncio.sleep(0)

    first = asyncio.create_task(transaction(0))
    await first_in.wait()
    later = [asyncio.create_task(transaction(n)) for n in (1, 2, 3)]
    other_key = asyncio.create_task(_enter(lanes, (1, "other"), entered))
    await asyncio.sleep(0.01)
    assert entered == [0, 99]  # the others wait for key k; another key does not
    go_on.set()
    await asyncio.gather(first, *later, other_key)
    assert entered == [0, 99, 1, 2, 3]
    assert len(lanes) == 0  # nothing kept once no transaction runs or waits


async def test_leaving_the_lane_early_lets_the_next_one_in_at_once() -> None:
    lanes = Lanes()
    entered: list[int] = []
    left = asyncio.Event()
    done = asyncio.Event()

    async def holding() -> None:
        async with lanes.lane((1, "k")) as leave:
            leave()  # holds the key's lock in the database now
            leave()  # once is enough; again changes nothing
            left.set()
            await done.wait()

    holder = asyncio.create_task(holding())
    await left.wait()
    await _enter(lanes, (1, "k"), entered)
    assert entered == [99]  # in while the first is still under way
    done.set()
    await holder
    assert len(lanes) == 0


async def test_the_runner_hands_work_in_a_lane_what_leaves_it() -> None:
    """Work run in a key's lane is handed `on_locked`: called from its worker thread (as
    PostgreSQL calls it once it holds the key's row lock), the next work on the key runs while
    the first is still under way."""

    async def in_a_thread(work: Callable[[bool], T], job: Job) -> T:
        return await anyio.to_thread.run_sync(work, True)

    storage: Any = _Storage()
    run = Runner(in_a_thread, storage, Metrics())
    run.lanes = Lanes(patience=60)  # never let in by the one ahead stalling: only by on_locked
    order: list[str] = []
    second_ran = threading.Event()

    def first(_may_block: bool, on_locked: OnLocked) -> None:
        order.append("first in")
        on_locked()
        second_ran.wait(10)  # bounded only so that a broken hand-over fails, not hangs
        order.append("first out")

    def second(_may_block: bool, _on_locked: OnLocked) -> None:
        order.append("second")
        second_ran.set()

    job = Job(1)
    first_run = asyncio.create_task(run.in_lane((1, "k"), first, job=job, traced_as="acquire"))
    await asyncio.sleep(0)  # the first takes the lane
    await run.in_lane((1, "k"), second, job=job, traced_as="acquire")
    await first_run
    assert order == ["first in", "second", "first out"]
    assert len(run.lanes) == 0


async def test_the_runner_waits_for_the_disk_here_only_for_a_request_alone() -> None:
    """`synced` waits on the loop's thread (`here`) only when one request is being served:
    requests parked (waiting in line, watching, held for the waiters they granted) do not
    count; two requests served send the wait to a thread, so the loop serves the other."""
    storage = _Storage()
    as_storage: Any = storage
    run = Runner(_inline, as_storage, Metrics())
    with run.serving():
        await run.synced()  # alone
        with run.serving(), run.parked():
            await run.synced()  # the other one is parked
        with run.serving():
            await run.synced()  # another one is being served
    assert storage.asked == [True, True, False]


async def _inline(work: Callable[[bool], T], job: Job) -> T:
    return work(False)


class _Storage:
    """The storage a runner waits on: it notes where each wait for the disk would run."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    async def synced(self, *, here: bool = False) -> None:
        self.asked.append(here)


async def test_a_stalled_lane_is_waited_for_only_so_long() -> None:
    """A transaction stalled in the lane (a lost database link) holds up the next one for
    the lane's patience, not until it ends; the lane is still whole afterwards."""
    lanes = Lanes(patience=0.05)
    entered: list[int] = []
    stalled = asyncio.Event()
    done = asyncio.Event()

    async def stalling() -> None:
        async with lanes.lane((1, "k")):
            stalled.set()
            await done.wait()

    holder = asyncio.create_task(stalling())
    await stalled.wait()
    await asyncio.wait_for(_enter(lanes, (1, "k"), entered), 5)
    assert entered == [99]  # in, though the first never left
    done.set()
    await holder
    assert len(lanes) == 0
    await _enter(lanes, (1, "k"), entered)  # and the lane works as before
    assert entered == [99, 99]


async def _enter(lanes: Lanes, key_ref: tuple[int, str], entered: list[int]) -> None:
    async with lanes.lane(key_ref):
        entered.append(99)
