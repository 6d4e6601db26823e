"""Seats for client connections, and the file descriptors they need.

Every client connection holds a file descriptor from the moment it is accepted, and uvloop
(libuv) accepts every pending connection in one go. When descriptors run out, libuv closes
pending connections without a word (its "EMFILE trick"), and the database may fail to open a
connection too. So the server budgets descriptors for every kind of connection it keeps:

- serving: up to `max_connections`, served as usual;
- spare: up to a quarter as many more, over the cap. Each has a second to send its head: a
  health probe (`GET /healthz` or `GET /readyz`) is answered, then the connection is closed;
  anything else gets 503. So probes are answered while the server is full, and a supervisor
  does not restart a server that is only busy;
- beyond both: 503 at once, and the connection is closed at once;

plus a full accept queue (`backlog`: libuv may accept that many before the server sees any of
them) and `RESERVED_FILES` for everything else the process opens.
"""

from __future__ import annotations

__all__ = ["RESERVED_FILES", "Seats", "files_needed", "max_connections_within"]

# Files a process needs besides client connections: database connections, logs, the listeners.
RESERVED_FILES = 256
# Spare seats are a quarter of the serving ones, and never fewer than this.
_MIN_SPARE = 16


def _spare(serving: int) -> int:
    return max(_MIN_SPARE, serving // 4)


def files_needed(max_connections: int, backlog: int) -> int:
    """The open-files limit a server with these limits needs, whatever clients do."""
    return max_connections + _spare(max_connections) + backlog + RESERVED_FILES


def max_connections_within(files: int, backlog: int) -> int:
    """The most serving seats an open-files limit of `files` leaves room for (at least 1)."""
    room = files - backlog - RESERVED_FILES  # for serving and spare seats
    serving = max(1, room * 4 // 5 if room >= 5 * _MIN_SPARE else room - _MIN_SPARE)
    while files_needed(serving + 1, backlog) <= files:  # rounding left a seat or two
        serving += 1
    return serving


class Seats:
    """The serving and spare seats of one server process, and how many are taken."""

    def __init__(self, serving: int) -> None:
        if serving < 1:
            raise ValueError(f"a server needs at least one seat, got {serving}")
        self.serving = serving
        self.spare = _spare(serving)
        self._taken = 0

    @property
    def taken(self) -> int:
        """Serving seats taken now."""
        return self._taken

    def over_budget(self, open_connections: int) -> bool:
        """Whether `open_connections` (this one included) leave no seat of either kind."""
        return open_connections > self.serving + self.spare

    def take(self) -> bool:
        """Take a serving seat if one is free; False means the connection gets a spare one."""
        if self._taken >= self.serving:
            return False
        self._taken += 1
        return True

    def give_back(self) -> None:
        """A connection that held a serving seat has closed."""
        self._taken -= 1
