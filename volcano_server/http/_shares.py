"""What one project may hold of a server process at once: waiting requests and other requests.

Connections, worker threads and database connections are shared by every project. A waiting
acquire holds its connection open for up to a minute, and so does a watch of a key (a long
poll), so without a cap one project's waiters fill `--max-connections` and every other
project, and the health probes, get 503 (issue 20: 10,600 waiters of one project did). Requests
in flight hold a worker thread or a database connection each, and every other project's
requests queue behind them. So each project may hold at most `max_waiters` waiting requests
(acquires and watches together) and `max_requests` other requests open at once in one process;
one more gets 429 `rate_limited` with `Retry-After`, and only that project is refused.

Requests are counted on the event loop only, so the counts need no lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..wire._errors import ApiError

__all__ = ["ProjectShares"]


class ProjectShares:
    """Counts each project's waiting acquires and other requests in flight, within caps."""

    def __init__(self, max_waiters: int, max_requests: int, max_body_bytes: int = 2**21) -> None:
        if max_waiters < 1 or max_requests < 1:
            raise ValueError(
                f"each project needs room for at least one waiter and one request,"
                f" got {max_waiters} and {max_requests}"
            )
        self._caps = {True: max_waiters, False: max_requests}
        self._open: dict[tuple[int, bool], int] = {}  # (project, waiting) -> requests open
        self._max_body = max_body_bytes
        self._bodies: dict[int, int] = {}  # project -> bytes of bodies being read or judged

    @contextlib.contextmanager
    def hold_body(self, project_id: int, size: int) -> Iterator[None]:
        """Count `size` bytes of `project_id`'s request bodies while the block reads and judges.

        Raises:
            ApiError: 429 when the project's bodies in flight would pass the cap (a body
            that is empty, or alone, always fits).
        """
        held = self._bodies.get(project_id, 0)
        if held and held + size > self._max_body:
            raise ApiError.over_share("bytes of request bodies in flight", self._max_body)
        self._bodies[project_id] = held + size
        try:
            yield
        finally:
            left = self._bodies[project_id] - size
            if left:
                self._bodies[project_id] = left
            else:
                del self._bodies[project_id]

    @contextlib.contextmanager
    def hold(self, project_id: int, *, waiting: bool) -> Iterator[None]:
        """Count one request of `project_id` while the block runs.

        Raises:
            ApiError: 429 when the project already has its share of this kind open.
        """
        share = (project_id, waiting)
        held = self._open.get(share, 0)
        if held >= self._caps[waiting]:
            what = "waiting requests (acquires and watches)" if waiting else "requests in flight"
            raise ApiError.over_share(what, self._caps[waiting])
        self._open[share] = held + 1
        try:
            yield
        finally:
            left = self._open[share] - 1
            if left:
                self._open[share] = left
            else:
                del self._open[share]
