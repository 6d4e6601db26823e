"""Group commit: one fsync covers every commit made while the previous one ran."""

from __future__ import annotations

import threading

import pytest

from volcano_server.storage import StorageUnavailable
from volcano_server.storage._syncer import Syncer

pytestmark = pytest.mark.anyio


class GatedSync:
    """An fsync that records who called it and, while the gate is shut, blocks until it opens."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = False

    def __call__(self, fd: int) -> None:
        self.threads.append(threading.get_ident())
        self.entered.set()
        assert self.gate.wait(10)
        if self.fail:
            raise OSError(5, "Input/output error")


def waiting(syncer: Syncer, ticket: int) -> tuple[threading.Thread, list[BaseException]]:
    """A thread that waits for `ticket`, and where it puts what `block_until_synced` raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            syncer.block_until_synced(ticket)
        except StorageUnavailable as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


class TestSyncer:
    def test_commits_during_an_fsync_share_the_next(self) -> None:
        """Tickets 2-4, taken while ticket 1's fsync runs, are covered by one more fsync."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        try:
            first, _ = waiting(syncer, syncer.committed())
            assert sync.entered.wait(10)
            later = [waiting(syncer, syncer.committed())[0] for _ in range(3)]
            sync.gate.set()
            for thread in [first, *later]:
                thread.join(10)
            assert (len(sync.threads), syncer.fsyncs) == (2, 2)
        finally:
            sync.gate.set()
            syncer.close()

    def test_wait_returns_only_after_the_fsync(self) -> None:
        """A writer waiting for its ticket is still waiting while the fsync is under way."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        try:
            thread, _ = waiting(syncer, syncer.committed())
            assert sync.entered.wait(10)
            thread.join(0.2)
            assert thread.is_alive()
            sync.gate.set()
            thread.join(10)
            assert not thread.is_alive()
        finally:
            sync.gate.set()
            syncer.close()

    def test_nothing_is_synced_until_someone_waits(self) -> None:
        """A commit alone starts no fsync: the first wait for it does."""
        sync = GatedSync()
        sync.gate.set()
        syncer = Syncer(-1, sync)
        try:
            ticket = syncer.committed()
            assert not sync.entered.wait(0.1)
            syncer.block_until_synced(ticket)
            assert syncer.fsyncs == 1
        finally:
            syncer.close()

    async def test_the_event_loop_awaits_on_the_syncer_thread(self) -> None:
        """`synced` suspends the awaiting task, not the loop, while the syncer thread syncs."""
        sync = GatedSync()
        syncer = Syncer(-1, sync)
        try:
            ticket = syncer.committed()
            threading.Timer(0.2, sync.gate.set).start()
            await syncer.synced(ticket)
            assert syncer.fsyncs == 1
            assert sync.threads != [threading.get_ident()]
        finally:
            sync.gate.set()
            syncer.close()

    async def test_here_syncs_on_the_calling_thread(self) -> None:
        """`here=True` with no fsync under way fsyncs on the caller's thread, no hand-off."""
        sync = GatedSync()
        sync.gate.set()
        syncer = Syncer(-1, sync)
        try:
            await syncer.synced(syncer.committed(), here=True)
            assert sync.threads == [threading.get_ident()]
        finally:
            syncer.close()

    def test_a_failed_fsync_fails_every_commit_it_covered(self) -> None:
        """EIO from the fsync is StorageUnavailable (503) for each ticket of that fsync only."""
        sync = GatedSync()
        sync.fail = True
        syncer = Syncer(-1, sync)
        try:
            first, first_errors = waiting(syncer, syncer.committed())
            assert sync.entered.wait(10)
            second, second_errors = waiting(syncer, syncer.committed())
            sync.gate.set()
            first.join(10)
            second.join(10)
            assert [str(e) for e in first_errors] == [
                "sqlite: the commit did not reach the disk: [Errno 5] Input/output error"
            ]
            assert len(second_errors) == 1
            sync.fail = False
            syncer.block_until_synced(syncer.committed())
        finally:
            sync.gate.set()
            syncer.close()
