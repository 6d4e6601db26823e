"""Group commit: one fsync covers every commit made while the previous one ran."""

from __future__ import annotations

import threading

import pytest

from volcano_server.storage import StorageUnavailable
from volcano_server.storage._syncer import Syncer

pytestmark = pytest.mark.anyio


class GatedSync:
    """An fsync that records each call and, while the gate is shut, blocks until it opens."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = False

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(10)
        if self.fail:
            raise OSError(5, "Input/output error")


class TestSyncer:
    def test_commits_during_an_fsync_share_the_next(self) -> None:
        """Tickets 2-4, taken while ticket 1's fsync runs, are covered by one more fsync."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        try:
            first = syncer.committed()
            assert sync.entered.wait(10)
            later = [syncer.committed() for _ in range(3)]
            sync.gate.set()
            syncer.wait(later[-1])
            syncer.wait(first)
            assert (sync.calls, syncer.fsyncs) == (2, 2)
        finally:
            sync.gate.set()
            syncer.close()

    def test_wait_returns_only_after_the_fsync(self) -> None:
        """A writer waiting for its ticket is still waiting while the fsync is under way."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        done = threading.Event()
        try:
            ticket = syncer.committed()
            waiter = threading.Thread(target=lambda: (syncer.wait(ticket), done.set()))
            waiter.start()
            assert sync.entered.wait(10)
            assert not done.wait(0.2)
            sync.gate.set()
            waiter.join(10)
            assert done.is_set()
        finally:
            sync.gate.set()
            syncer.close()

    async def test_the_event_loop_awaits_without_blocking(self) -> None:
        """`synced` suspends the awaiting task, not the loop, until its ticket is on disk."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        try:
            ticket = syncer.committed()
            assert sync.entered.wait(10)
            threading.Timer(0.2, sync.gate.set).start()
            await syncer.synced(ticket)
            assert syncer.fsyncs == 1
        finally:
            sync.gate.set()
            syncer.close()

    def test_a_failed_fsync_fails_every_commit_it_covered(self) -> None:
        """EIO from the fsync is StorageUnavailable (503) for each ticket of that fsync only."""
        sync = GatedSync()
        sync.fail = True
        syncer = Syncer(-1, sync)
        try:
            first = syncer.committed()
            assert sync.entered.wait(10)
            second = syncer.committed()
            sync.gate.set()
            with pytest.raises(StorageUnavailable, match="did not reach the disk"):
                syncer.wait(first)
            with pytest.raises(StorageUnavailable):
                syncer.wait(second)
            sync.fail = False
            third = syncer.committed()
            syncer.wait(third)
        finally:
            sync.gate.set()
            syncer.close()
