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
- beyond both: 503 at once, and the connection is closed as soon as its request has been read
  (closing with unread bytes would make the kernel reset it, and the reset can destroy the
  answer); past half the accept queue's allowance as well, closed at once;

plus a full accept queue (`backlog`: libuv may accept that many before the server sees any of
them), the private listener's own seats and queue, and `RESERVED_FILES` for everything else
the process opens.
"""

from __future__ import annotations

import enum

__all__ = [
    "PRIVATE_BACKLOG",
    "PRIVATE_SEATS",
    "RESERVED_FILES",
    "Arrival",
    "Seats",
    "files_needed",
    "max_connections_within",
]

# Files a process needs besides client connections: database connections, logs, the listeners.
RESERVED_FILES = 256
# The private listener (--metrics-port: metrics and health probes) has seats and a queue of its
# own, so no flood on the public port can take them.
PRIVATE_SEATS = 16
PRIVATE_BACKLOG = 64
# Spare seats are a quarter of the serving ones, and never fewer than this.
_MIN_SPARE = 16


def _spare(serving: int) -> int:
    return max(_MIN_SPARE, serving // 4)


def files_needed(max_connections: int, backlog: int) -> int:
    """The open-files limit a server with these limits needs, whatever clients do."""
    private = PRIVATE_SEATS + _spare(PRIVATE_SEATS) + PRIVATE_BACKLOG
    return max_connections + _spare(max_connections) + backlog + private + RESERVED_FILES


def max_connections_within(files: int, backlog: int) -> int:
    """The most serving seats an open-files limit of `files` leaves room for (at least 1)."""
    room = files - files_needed(0, backlog) + _MIN_SPARE  # for serving and spare seats
    serving = max(1, room * 4 // 5 if room >= 5 * _MIN_SPARE else room - _MIN_SPARE)
    while files_needed(serving + 1, backlog) <= files:  # rounding left a seat or two
        serving += 1
    return serving


class Arrival(enum.Enum):
    """What becomes of a new connection, by the connections already open."""

    SEATED = "seated"  # a serving or a spare seat waits for it
    REFUSED = "refused"  # no seat: 503, then closed once its request has been read
    DROPPED = "dropped"  # not even that: 503 and closed at once


class Seats:
    """The serving and spare seats of one listener, and the connections it holds now.

    Connections refused for want of a seat may use half of the accept queue's allowance in
    the budget while they are answered; past it they are dropped (the other half is kept for
    connections accepted but not yet seen).
    """

    def __init__(self, serving: int, backlog: int) -> None:
        if serving < 1:
            raise ValueError(f"a server needs at least one seat, got {serving}")
        self.serving = serving
        self.spare = _spare(serving)
        self._refusing = backlog // 2
        self._open = 0  # connections open, whatever their seat
        self._taken = 0  # serving seats taken

    @property
    def taken(self) -> int:
        """Serving seats taken now."""
        return self._taken

    def arrive(self) -> Arrival:
        """Count a new connection, and say what becomes of it."""
        self._open += 1
        seats = self.serving + self.spare
        if self._open <= seats:
            return Arrival.SEATED
        return Arrival.REFUSED if self._open <= seats + self._refusing else Arrival.DROPPED

    def take(self) -> bool:
        """Take a serving seat if one is free; False means the connection gets a spare one."""
        if self._taken >= self.serving:
            return False
        self._taken += 1
        return True

    def leave(self, *, serving: bool) -> None:
        """A connection has closed (`serving`: it held a serving seat)."""
        self._open -= 1
        if serving:
            self._taken -= 1
