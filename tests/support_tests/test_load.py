"""The CPU hog behind `--cpu-hog N` (tests/support/load.py)."""

from __future__ import annotations

from tests.support.load import hogging


class TestHogging:
    def test_spins_n_processes_and_ends_them_with_the_block(self) -> None:
        """Each hog runs until the block ends, and none outlives it."""
        with hogging(2) as hogs:
            assert len(hogs) == 2
            assert all(hog.poll() is None for hog in hogs)
        assert all(hog.poll() is not None for hog in hogs)

    def test_none_by_default(self) -> None:
        """Zero hogs: nothing is started."""
        with hogging(0) as hogs:
            assert hogs == []
