"""The watching room on its own: which read answers which watcher, with reads the test answers.

The event loop's clock is virtual (`VirtualTime`): it moves only when a test advances it, so a
wait that runs out or a lease's expiry fires its timer then, without a real wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from volcano_server.locks._transactions import Caller
from volcano_server.locks._watching import KeyView, Watches, delivers
from volcano_server.transport._pacing import Pacer
from volcano_server.wire._wire import Answer

pytestmark = pytest.mark.anyio


class VirtualTime(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when a test says (`advance`); its timers go by it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "asyncio", {"loop_factory": VirtualTime}


async def advance(seconds: float) -> None:
    """Move the loop's clock on, and let what falls due by then run."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTime)
    loop.now += seconds
    await turns()


CALLER = Caller(1, "7C9E6679-7425-40DE-944B-E07FC1F90AE7")


class _Storage:
    """A storage that records no watches (as SQLite): every read is a plain read."""

    pushes_handoffs = False


class Reads:
    """The room's storage work, each read answered by the test when it chooses."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[KeyView]] = []

    async def __call__(self, work: Callable[[bool], Any], **_how: Any) -> KeyView:
        future: asyncio.Future[KeyView] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        return await future

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """A watch held open, which the runner counts as not needing the loop (not here)."""
        yield

    def answer(self, index: int, version: int, expires_in: float | None = None) -> KeyView:
        view = KeyView(version, Answer(200, str(version).encode()), expires_in)
        self.pending[index].set_result(view)
        return view


def room(reads: Reads) -> Watches:
    storage: Any = _Storage()
    run: Any = reads
    return Watches(
        storage,
        run,
        server_id="here",
        max_wait_seconds=60,
        heartbeat_lifetime_us=3_000_000,
        pace=Pacer(64).submit,
    )


async def turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def watch(watches: Watches, after: int, *, wait: float = 30) -> tuple[asyncio.Task[Any], Any]:
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(
        watches.watch(CALLER, "k", after_version=after, wait_seconds=wait, gone=gone)
    )
    return task, gone


class TestDelivers:
    def test_a_different_version_or_a_fresh_wish(self) -> None:
        """A state answers a watcher when its version differs, or when any state will do."""
        assert delivers(4, 3, fresh=False)
        assert not delivers(3, 3, fresh=False)
        assert delivers(3, 3, fresh=True)


class TestWatches:
    async def test_a_read_under_way_never_answers_a_later_watcher(self) -> None:
        """A read that started before a watcher asked answers only the earlier watchers: the
        later one gets the read after it (it may have heard of a newer version elsewhere)."""
        reads = Reads()
        watches = room(reads)
        first, _ = watch(watches, 3)
        await turns()
        later, _ = watch(watches, 5)
        await turns()
        old = reads.answer(0, 4)
        await turns()
        assert first.done()
        assert first.result() == old.answer
        assert not later.done()
        assert len(reads.pending) == 2
        new = reads.answer(1, 6)
        assert await later == new.answer
        assert len(watches) == 0

    async def test_one_read_answers_every_watcher(self) -> None:
        """Many watchers of one key share each read: one read answers them all."""
        reads = Reads()
        watches = room(reads)
        tasks = [watch(watches, 1)[0] for _ in range(50)]
        await turns()
        assert len(reads.pending) == 1
        view = reads.answer(0, 1)
        await turns()
        assert not any(task.done() for task in tasks)
        watches.changed((1, "k"))
        await turns()
        assert len(reads.pending) == 2
        view = reads.answer(1, 2)
        assert await asyncio.gather(*tasks) == [view.answer] * 50

    async def test_polling_again_after_a_change_costs_no_read(self) -> None:
        """Issue 33 (B1'): 50 watchers answered by a read of version 2 poll again with 2: they
        wait without a read of their own, and the next change's one read answers them all
        (before: each new poll read the key, a thousand reads per change of a crowded key)."""
        reads = Reads()
        watches = room(reads)
        first = [watch(watches, 1)[0] for _ in range(50)]
        await turns()
        view = reads.answer(0, 2)
        assert await asyncio.gather(*first) == [view.answer] * 50
        again = [watch(watches, 2)[0] for _ in range(50)]
        await turns()
        assert len(reads.pending) == 1  # no read for the 50 new polls
        watches.changed((1, "k"))
        await turns()
        view = reads.answer(1, 3)
        assert await asyncio.gather(*again) == [view.answer] * 50

    async def test_a_poll_behind_the_last_read_is_answered_from_it(self) -> None:
        """A watcher that knows an older version than the last read found is answered with
        that read at once (it is newer than anything the watcher saw); one that knows a newer
        version than the last read is read for."""
        reads = Reads()
        watches = room(reads)
        keeper, _ = watch(watches, 5)
        await turns()
        reads.answer(0, 5)  # the version the keeper knows: it waits on
        await turns()
        behind, _ = watch(watches, 3)
        await turns()
        assert behind.done()
        assert len(reads.pending) == 1
        ahead, _ = watch(watches, 7)
        await turns()
        assert len(reads.pending) == 2
        view = reads.answer(1, 7)
        await turns()
        assert not ahead.done()  # 7 is what it knows: no change yet
        assert not keeper.done() or keeper.result() == view.answer

    async def test_a_change_while_nobody_watches_makes_the_next_watcher_read(self) -> None:
        """With no watcher, a change is read by nobody, so the last read goes stale: the next
        watcher reads the key again, whatever version it knows."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1)
        await turns()
        reads.answer(0, 2)
        await task
        watches.changed((1, "k"))
        await turns()
        watch(watches, 2)
        await turns()
        assert len(reads.pending) == 2

    async def test_a_watcher_that_leaves_is_answered_none(self) -> None:
        """A client gone before a change: None, and it is no longer counted."""
        reads = Reads()
        watches = room(reads)
        task, gone = watch(watches, 1)
        await turns()
        reads.answer(0, 1)
        await turns()
        assert len(watches) == 1
        gone.set_result(None)
        assert await task is None
        assert len(watches) == 0

    async def test_a_wait_that_runs_out_reads_afresh(self) -> None:
        """When the wait runs out, a new read answers, whatever its version."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1, wait=0.01)
        await turns()
        reads.answer(0, 1)
        await turns()
        assert len(reads.pending) == 1  # parked until the wait runs out
        await advance(0.01)
        assert len(reads.pending) == 2
        view = reads.answer(1, 1)
        assert await task == view.answer

    async def test_an_expiry_reads_the_key_again(self) -> None:
        """A state whose lease expires sets a timer that reads the key when it does."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1)
        await turns()
        reads.answer(0, 1, expires_in=0.01)
        await turns()
        assert len(reads.pending) == 1  # parked until the lease expires
        await advance(0.011)
        assert len(reads.pending) == 2
        view = reads.answer(1, 2)
        assert await task == view.answer

    async def test_a_failed_read_answers_its_watchers_with_the_error(self) -> None:
        """An outage while reading is every waiting watcher's answer (503 upstream)."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1)
        await turns()
        reads.pending[0].set_exception(RuntimeError("boom"))
        with pytest.raises(Exception, match="internal server error"):
            await task

    async def test_closing_answers_every_watcher(self) -> None:
        """Shutting down: a fresh read answers each parked watcher at once."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1)
        await turns()
        reads.answer(0, 1)
        await turns()
        watches.close()
        await turns()
        view = reads.answer(1, 1)
        assert await task == view.answer

    async def test_stopping_answers_a_watcher_whose_read_never_came(self) -> None:
        """The loop ends with a read still under way: its watcher gets 503, not silence."""
        reads = Reads()
        watches = room(reads)
        task, _ = watch(watches, 1)
        await turns()
        watches.stop()
        with pytest.raises(Exception, match="shutting down"):
            await task
