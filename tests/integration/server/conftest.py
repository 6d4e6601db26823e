"""Helpers for the server's HTTP tests: the lock operations as raw requests."""

from __future__ import annotations

import httpx
import pytest

from tests.support.raw import Locks, new_id

__all__ = ["Locks", "locks", "new_id"]


@pytest.fixture
def locks(api: httpx.Client) -> Locks:
    return Locks(api)
