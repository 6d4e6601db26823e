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

A connection without a key cannot keep a seat from one with a key: when the serving seats are
all taken, a newcomer on a spare seat that asks for anything but a health probe takes the seat
of a connection that has never sent a request with valid keys and is idle (between requests,
or slow to send a head), which is closed (`reap`), the one whose last request is oldest first
(not the one seated longest: clients that all ask at the same moment would have the longest
seated busy together, and a newcomer arriving then would find none to reap). (A probe
never takes one: reaped clients that reconnect only to probe cost nobody a seat.) So ten
thousand kept-alive connections that only ask for /healthz hold seats only while nobody else
needs them. `accepting` says whether a new connection would
be served: what `/readyz` reports. Optionally, `per_address` caps the connections one client
address holds (off by default: behind a proxy every client shares the proxy's address).
"""

from __future__ import annotations

import collections
import enum
from typing import Protocol

__all__ = [
    "KEYED",
    "PRIVATE_BACKLOG",
    "PRIVATE_SEATS",
    "RESERVED_FILES",
    "Arrival",
    "Reapable",
    "Seats",
    "files_needed",
    "max_connections_within",
]

KEYED = "volcano.keyed"
"""The ASGI scope extension whose "mark" the app calls once a request has shown valid keys."""

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
    CROWDED = "crowded"  # its address holds its share of connections: 503, then closed


class Reapable(Protocol):
    """A connection whose serving seat may go to a newcomer while it has no key."""

    def idle(self) -> bool:
        """Whether it waits for its client (between requests, or a head slow to come)."""
        ...

    def reap(self) -> None:
        """Close it: its seat has gone to a newcomer."""
        ...


class Seats:
    """The serving and spare seats of one listener, and the connections it holds now.

    Connections refused for want of a seat may use half of the accept queue's allowance in
    the budget while they are answered; past it they are dropped (the other half is kept for
    connections accepted but not yet seen).
    """

    def __init__(self, serving: int, backlog: int, *, per_address: int = 0) -> None:
        if serving < 1:
            raise ValueError(f"a server needs at least one seat, got {serving}")
        self.serving = serving
        self.spare = _spare(serving)
        self._refusing = backlog // 2
        self._per_address = per_address  # 0: no cap
        self._open = 0  # connections open, whatever their seat
        self._taken = 0  # serving seats taken
        self._keyless: dict[Reapable, None] = {}  # serving, no key yet: oldest request first
        self._addresses: collections.Counter[str] = collections.Counter()
        self.reaped = 0  # connections closed to give their seat to a newcomer

    @property
    def taken(self) -> int:
        """Serving seats taken now."""
        return self._taken

    def accepting(self) -> bool:
        """Whether a new connection would be served: a seat is free, or one can be reaped."""
        return self._taken < self.serving or bool(self._keyless)

    def arrive(self, address: str | None = None) -> Arrival:
        """Count a new connection (from `address`), and say what becomes of it.

        Every arrival must `leave` with the same address, whatever it became.
        """
        self._open += 1
        if address is not None:
            self._addresses[address] += 1
            if self._per_address and self._addresses[address] > self._per_address:
                return Arrival.CROWDED
        seats = self.serving + self.spare
        if self._open <= seats:
            return Arrival.SEATED
        return Arrival.REFUSED if self._open <= seats + self._refusing else Arrival.DROPPED

    def take(self, connection: Reapable | None = None, *, reap: bool = False) -> bool:
        """Take a serving seat for `connection` if one is free (or, with `reap`, can be freed).

        False: none is, and the connection has a spare seat. A connection seated keeps no key
        until `keyed` says it has one: until then, while it is idle, its seat may be reaped.
        """
        if self._taken >= self.serving and not (reap and self._reap_one()):
            return False
        self._taken += 1
        if connection is not None:
            self._keyless[connection] = None
        return True

    def asked(self, connection: Reapable) -> None:
        """`connection` has begun a request: while it has no key, it is the last to be reaped."""
        if connection in self._keyless:
            del self._keyless[connection]
            self._keyless[connection] = None

    def keyed(self, connection: Reapable) -> None:
        """`connection` sent a request with valid keys: its seat is its own from now on."""
        self._keyless.pop(connection, None)

    def leave(
        self, *, serving: bool, connection: Reapable | None = None, address: str | None = None
    ) -> None:
        """A connection has closed (`serving`: it held a serving seat)."""
        self._open -= 1
        if serving:
            self._taken -= 1
        if connection is not None:
            self._keyless.pop(connection, None)
        if address is not None:
            left = self._addresses[address] - 1
            if left:
                self._addresses[address] = left
            else:
                del self._addresses[address]

    def _reap_one(self, looks: int = 64) -> bool:
        """Close the idle keyless connection whose last request is oldest; its seat is free.

        Busy ones looked at go to the back of the line; at most `looks` are looked at.
        """
        for _ in range(min(looks, len(self._keyless))):
            connection = next(iter(self._keyless))
            del self._keyless[connection]
            if connection.idle():
                self._taken -= 1  # its seat is the newcomer's: it leaves holding none
                self.reaped += 1
                connection.reap()
                return True
            self._keyless[connection] = None
        return False
