"""uvicorn's httptools protocol, bounded against clients that misbehave on purpose.

Left alone, uvicorn reads whatever a client sends for as long as it sends it. This subclass adds,
per connection:

- A cap on the request line and headers, counted before httptools sees the bytes (httptools
  joins a header value piece by piece, so its time grows with the square of the header's size).
  Past `max_header_bytes` the client gets 431 and the rest is never parsed.
- A cap on the number of header fields: httptools calls into Python once per field, and every
  header lookup reads them all, so 3,000 tiny fields in 16 KiB cost milliseconds of the event
  loop per request. Past `max_header_fields` the client gets 431 and parsing stops there.
- Deadlines for the client: a request's head must arrive within `header_timeout` (from the
  connection's start, or from the first byte of a later request on it), its body within
  `body_timeout` (from the end of the head); else 408 and the connection is closed. A connection
  that sent nothing is closed without an answer. No deadline runs while a request that has fully
  arrived waits for its answer (a waiting acquire may take a minute); between requests,
  uvicorn's keep-alive timer closes an idle connection.
- Bounded pipelining: uvicorn parses every request a read holds (a read of 256 KiB can hold
  7,000 `GET /healthz`), queues them all and resumes reading whenever the running request reads
  its body, so a client that pipelines is given memory without end. Here the parser is fed one
  head at a time; once `MAX_PIPELINED` requests wait behind the running one, or a waiting
  request's body would be parsed before it runs, the rest stays unparsed and reading stops
  until an answer is done. A connection holds at most one read it has not parsed.
- A write deadline: answers the client does not read (the transport's buffer over its
  high-water mark, or anything still unsent once the connection is closing) are given
  `write_timeout`; then the connection is aborted. Without it a client that pipelines and never
  reads holds its connection, and the answers, for as long as it likes.
- Seats (see `_seats`): past `max_connections` a new connection may still ask for a health
  probe, which is answered; anything else gets 503, and the admitted ones are served as before.
  Past the spare seats too, a new connection gets 503 and is closed at once, so the server
  never runs out of file descriptors (and libuv never closes connections unanswered).
- Keyless connections give way (see `_seats`): while every serving seat is taken, a newcomer
  on a spare seat asking for more than a health probe takes the seat of a connection that has
  sent no request with valid keys and is idle (or slow with its head), which is closed. The
  app says that a request had valid keys by calling the "mark" of the ASGI scope extension
  `KEYED`. With `max_connections_per_address`, an address past its share gets 503 at once.
- Bursts paced (see `_pacing`): new connections are admitted, and client deadlines acted on,
  `BURST_PER_TURN` per turn of the event loop, so requests under way are not held up behind a
  burst of thousands. A connection whose first bytes are a health probe's request line is
  admitted at once.
- The API's JSON error shape where uvicorn would answer a request it cannot parse with
  plain-text "Invalid HTTP request received.".
- Lease-keeping first: a request that reads (`GET`: a key's state, a watch, a list, a fence
  check) is started through a `Pacer`, at most `BURST_PER_TURN` per turn of the loop, while
  acquires, renewals and releases start at once. A thousand watchers woken by one change
  re-poll together; their requests then run a few dozen per turn instead of all in one, and a
  renewal or an acquire arriving among them, or a health probe, waits a turn, not the lot.
- `GET /healthz` answered here, as soon as its head is parsed, when nothing else is being
  answered on its connection: the same answer as the API's `getHealth` (and the private
  listener's), counted and logged alike, but without a task, the app or the router. A load
  balancer's probes, or ten thousand kept-alive connections asking for nothing else, then cost
  the event loop tens of microseconds each rather than the whole request path's hundreds.

Each of those answers is followed by a lingering close: the server stops writing and, for a
second or 64 KiB, whichever comes first, reads and discards what the client is still sending
before it closes. Closing at once with unread bytes would make the kernel reset the connection,
and the reset often destroys the answer before the client reads it; a client that keeps sending
past the cap is reset all the same (it is not listening).

It relies on these uvicorn internals (0.54), each pinned by name in tests/unit/server/
test_uvicorn_internals.py and in use by tests/integration/server/test_protocol.py and
test_hostile.py: the constructor's arguments; the overrides of `connection_made`,
`connection_lost`, `data_received`, `pause_writing` and `resume_writing`; the parser callbacks
`on_message_begin`, `on_header`, `on_headers_complete` and `on_message_complete`;
`on_response_complete`; `send_400_response`; `timeout_keep_alive_handler`; `self.url` and
`self.parser` before the headers are complete; `self.scope`, `self.transport`, `self.loop`;
`self.cycle` (its `response_complete`, `response_started`, `more_body`, `keep_alive`,
`disconnected` and `message_event`), `self.pipeline`; `self.flow` (a `FlowControl` made in
`connection_made`, replaced here by a subclass, which each cycle is handed);
`_start_asgi_task(cycle, app)`, for pacing reads; and, for the health answer, `on_body`,
`self.headers`, `self.server_state` (`default_headers`, the `date` header, and
`total_requests`), `self.timeout_keep_alive`, `timeout_keep_alive_task` and
`_unset_keepalive_if_required`.
"""

from __future__ import annotations

import asyncio
import enum
import re
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, ClassVar

import attrs
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from .._config import Limits
from ..telemetry._accesslog import RequestRecord
from ..wire._errors import ApiError
from ..wire._wire import HEALTH_BODY
from ._pacing import Pacer
from ._seats import KEYED, Arrival, Seats

__all__ = ["Awaiting", "LimitedProtocol", "Policy", "Seat", "protocol_class"]


@attrs.frozen
class Policy:
    """The limits a protocol class enforces, and whom it tells about what it refused.

    `seats` and `pacer` hold the state its connections share (one event loop's worth).
    """

    limits: Limits
    report: Callable[[RequestRecord], None]  # each answer the protocol gives itself
    on_refused: Callable[[], None] = lambda: None  # each connection refused over the cap
    seats: Seats = attrs.field(
        default=attrs.Factory(lambda self: seats_for(self.limits), takes_self=True)
    )
    pacer: Pacer = attrs.field(factory=lambda: Pacer(BURST_PER_TURN))
    reads: Pacer = attrs.field(factory=lambda: Pacer(BURST_PER_TURN))  # GETs started per turn


class Awaiting(enum.Enum):
    """What a connection waits for from its client."""

    HEAD = "head"  # a request's head (nothing yet, or part of it)
    BODY = "body"  # the rest of a request's body
    DONE = "done"  # nothing: the request arrived whole (it is being answered, or was)
    CLOSING = "closing"  # nothing: the protocol answered and is about to close


# New connections admitted, and client deadlines acted on, per turn of the event loop.
BURST_PER_TURN = 32
# How long a connection on a spare seat has to send its head (a health probe sends it at once).
SPARE_SECONDS = 1.0
# What a connection on a spare seat may ask (method and path, the query string ignored).
PROBES = frozenset({(b"GET", b"/healthz"), (b"GET", b"/readyz")})
# The probe answered by the protocol itself (as the API's `getHealth` would: `HEALTH_BODY`).
HEALTH = (b"GET", b"/healthz")
# A client's X-Request-Id, echoed when it is one UUID (the spec's `RequestId`), else made anew.
_UUID = re.compile(rb"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
# How a probe's request line starts (a probe is admitted at once, not in its turn).
_PROBE_LINES = tuple(
    method + b" " + path + end for method, path in sorted(PROBES) for end in (b" ", b"?")
)
# How long, and how much, a refused connection is drained before it is closed (see above).
LINGER_SECONDS = 1.0
LINGER_BYTES = 65_536
# How long a connection refused for want of a seat waits for its request to be read.
BRIEF_SECONDS = 0.25
# A keyless connection counts as idle once it has waited this long for its client (a new one,
# one between requests, or one whose head is still arriving: clients send a head in one piece):
# its seat may then go to a newcomer. Not at once: a connection just opened has yet to send.
IDLE_SECONDS = 1.0

# Requests parsed and queued behind the running one: no piece is fed once there are this many
# (one piece may add up to four, so at most seven are ever queued).
MAX_PIPELINED = 4
# The parser is fed pieces ending at the end of a head at least this long: a piece holds at
# most four whole requests (none is shorter than 18 bytes), and a client gets no more than one
# call of the parser per 64 bytes however it packs its ends of heads.
PIECE_BYTES = 64
_END_OF_HEAD = b"\r\n\r\n"


class _Flow(FlowControl):
    """uvicorn's flow control, where reading stays paused while the protocol holds bytes.

    (uvicorn resumes reading whenever a request reads its body or an answer ends.)
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__(transport)
        self._holding = False

    def hold(self, holding: bool) -> None:
        """Pause reading while `holding`; resume once it stops, if it paused."""
        if holding:
            self._holding = True
            self.pause_reading()
        elif self._holding:
            self._holding = False
            self.resume_reading()

    def resume_reading(self) -> None:
        if not self._holding:
            super().resume_reading()


class Closing(enum.Enum):
    """How a connection is closed after an answer of the protocol's own."""

    DRAINED = "drained"  # what the client still sends is read, for LINGER_SECONDS or bytes
    BRIEF = "brief"  # at the client's next bytes (its request, read) or after BRIEF_SECONDS
    AT_ONCE = "at once"  # the kernel may reset a client that had sent more


class Seat(enum.Enum):
    """What a connection was admitted to (see `_seats`)."""

    SERVING = "serving"  # served as usual
    SPARE = "spare"  # over the cap: a health probe is answered, anything else gets 503
    REAPED = "reaped"  # it had no key and was idle: its seat went to a newcomer, it is closing
    GONE = "gone"  # closed


def _path(target: bytes) -> bytes:
    """The path of a request target, without its query string."""
    return target.split(b"?", 1)[0]


class _Answered(Exception):
    """Raised in a parser callback to stop the parser: the protocol has answered already."""


def seats_for(limits: Limits) -> Seats:
    """The seats a listener with `limits` has."""
    return Seats(
        limits.max_connections, limits.backlog, per_address=limits.max_connections_per_address
    )


def protocol_class(policy: Policy) -> type[LimitedProtocol]:
    """A protocol class for uvicorn's `http=`, bound to `policy`."""

    class Bound(LimitedProtocol):
        pass

    Bound.policy = policy
    return Bound


class LimitedProtocol(HttpToolsProtocol):
    """One client connection, with the limits above. Use `protocol_class` to bind a policy."""

    policy: ClassVar[Policy]

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = self.policy.limits
        self._awaiting = Awaiting.HEAD
        self._since = 0.0  # loop time when it began to await what it awaits
        self._head_bytes = 0  # bytes of the current request's head fed to the parser
        self._header_fields = 0  # header fields of the current request parsed so far
        self._deadline: asyncio.TimerHandle | None = None  # the client's, or the linger's end
        self._write_deadline: asyncio.TimerHandle | None = None  # for answers not yet read
        self._unparsed = b""  # arrived, not yet fed to the parser
        self._unanswered: deque[RequestResponseCycle] = deque()  # parsed, in order
        self._seat: Seat | None = None  # None until admitted
        self._armed = 0  # counts deadlines armed, so a paced expiry knows it is still due
        self._closing = Closing.DRAINED  # how it closes once the protocol has answered
        self._address: str | None = None  # the client's, for the per-address cap
        self._health: float | None = None  # a health probe being read: when its head began
        self._inline = 0  # health probes answered in the current parse
        self._began = 0.0  # perf_counter when the current request's head began

    # uvicorn's connection events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = self._flow = _Flow(transport)
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else None
        arrival = self.policy.seats.arrive(self._address)
        if arrival is Arrival.SEATED:
            self.policy.pacer.submit(self._admit)
        elif arrival is Arrival.REFUSED:
            self._refuse_full(Closing.BRIEF)  # no seat: its descriptor is given back soon
        elif arrival is Arrival.CROWDED:
            self.policy.on_refused()
            limit = self.limits.max_connections_per_address
            self._refuse(ApiError.crowded(limit), Closing.BRIEF)
        else:
            self._refuse_full(Closing.AT_ONCE)

    def _admit(self) -> None:
        """Its turn has come: take a seat, start the client's clock, parse what arrived."""
        if self._seat is not None or self.transport.is_closing():
            return  # admitted out of turn, refused, or the client left while it waited
        self._seat = Seat.SERVING if self.policy.seats.take(self) else Seat.SPARE
        self._enter(Awaiting.HEAD)
        self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        self.policy.seats.leave(
            serving=self._seat is Seat.SERVING, connection=self, address=self._address
        )
        self._seat = Seat.GONE
        self._disarm()
        self._unwatch_writes()
        self._unparsed = b""
        # uvicorn tells only the newest request: one running ahead of pipelined ones would go
        # on waiting for the client, or write to a closed transport (an error under uvloop).
        for cycle in self._unanswered:
            cycle.disconnected = True
            cycle.message_event.set()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting is Awaiting.CLOSING:
            self._head_bytes += len(data)  # counts what is discarded while lingering
            if self._closing is Closing.BRIEF or self._head_bytes > LINGER_BYTES:
                self._close()
            return
        self._unparsed = self._unparsed + data if self._unparsed else data
        if self._seat is None:
            if not self._unparsed.startswith(_PROBE_LINES):
                self._flow.hold(True)  # not admitted yet: parsed in its turn
                return
            self._admit()  # a health probe does not wait behind a burst
            return
        self._parse()

    def _parse(self) -> None:
        """Feed the parser what has arrived, piece by piece, while the pipeline has room.

        What cannot be parsed yet is held, and reading paused, until an answer is done.
        """
        data, start = self._unparsed, 0
        self._inline = 0
        while start < len(data) and self._reading() and not self._pipeline_full():
            end = self._piece_end(data, start)
            if end == start:
                self._refuse(ApiError.headers_too_large(self.limits.max_header_bytes))
                break
            if self._awaiting is not Awaiting.BODY:
                self._head_bytes += end - start
            super().data_received(data[start:end])
            start = end
        self._unparsed = data[start:] if self._reading() else b""
        self._flow.hold(bool(self._unparsed))
        if self._unparsed and self._inline >= MAX_PIPELINED and not self._flow.write_paused:
            self.loop.call_soon(self._parse_held)  # other connections' turn first

    def _parse_held(self) -> None:
        """Go on parsing what was held back after health probes answered in one turn."""
        self._inline = 0  # a new turn
        if self._unparsed and self._reading() and not self._pipeline_full():
            self._parse()

    def _piece_end(self, data: bytes, start: int) -> int:
        """Where the next piece fed to the parser ends.

        After the first end of a head at least `PIECE_BYTES` on (so one piece holds at most a
        few whole requests), else at the end of `data`; within a head, no further than its
        limit: if the parser has not seen its end by then, the head is too large. (Bytes that
        follow a body in the same piece count towards the next head from the next piece on:
        the cap is exact to within one piece.)
        """
        found = data.find(_END_OF_HEAD, start + PIECE_BYTES - len(_END_OF_HEAD))
        end = len(data) if found < 0 else found + len(_END_OF_HEAD)
        if self._awaiting is Awaiting.BODY:
            return end
        return min(end, start + max(self.limits.max_header_bytes - self._head_bytes, 0))

    def _pipeline_full(self) -> bool:
        """Whether parsing must wait for an answer.

        It must once `MAX_PIPELINED` requests are queued behind the running one, or when the
        body of a queued request would be parsed before it runs.
        """
        queued = len(self.pipeline)
        if queued >= MAX_PIPELINED or (queued > 0 and self._awaiting is Awaiting.BODY):
            return True
        # Health probes answered as they are parsed: a few per turn of the loop, and none
        # while the client leaves its answers unread.
        return self._inline >= MAX_PIPELINED or self._flow.write_paused

    def _reading(self) -> bool:
        """Whether what arrives is still parsed (not after an answer of the protocol's own)."""
        return self._awaiting is not Awaiting.CLOSING and not self.transport.is_closing()

    def send_400_response(self, msg: str) -> None:
        """The request could not be parsed: the API's JSON 400, then close.

        (Also called when a callback of ours stopped the parser after answering: then it has
        nothing to add.)
        """
        if self._awaiting is not Awaiting.CLOSING:
            self._refuse(ApiError.invalid_request("the request is not valid HTTP/1.1"))

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self._close()

    # httptools parser callbacks

    def on_message_begin(self) -> None:
        self._began = time.perf_counter()
        # A request has begun: the connection is not idle, even if the keep-alive timer was
        # armed by an answer given in the middle of this read (a health probe's, above).
        self._unset_keepalive_if_required()
        if self._seat is Seat.SERVING:
            self.policy.seats.asked(self)
        super().on_message_begin()
        self.scope["extensions"] = {KEYED: {"mark": self._keyed}}
        self._header_fields = 0
        if self._awaiting is not Awaiting.HEAD:  # a new request: its head's clock starts now
            self._enter(Awaiting.HEAD)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_fields += 1
        if self._header_fields > self.limits.max_header_fields:
            self._refuse(ApiError.too_many_headers(self.limits.max_header_fields))
            raise _Answered  # stops the parser: the rest is never parsed
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        asked = (self.parser.get_method(), _path(self.url))
        probe = asked in PROBES
        if self._seat is Seat.SPARE and not probe:
            if not self.policy.seats.take(self, reap=True):
                self._refuse_full()
                raise _Answered  # stops the parser: the request is never run
            self._seat = Seat.SERVING  # an idle connection without keys gave way
        if asked == HEALTH and not self._unanswered and not self.parser.should_upgrade():
            self._health = self._began  # answered once it has arrived (`_answer_health`)
            self._head_bytes = 0
            self._enter(Awaiting.BODY)
            return
        super().on_headers_complete()
        if self._seat is Seat.SPARE:
            self.cycle.keep_alive = False  # answered, then closed: the seat is only lent
        self._unanswered.append(self.cycle)
        self._head_bytes = 0
        self._enter(Awaiting.BODY)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if cycle.scope["method"] == "GET":
            start = super()._start_asgi_task
            self.policy.reads.submit(lambda: start(cycle, app))  # reads: a few per turn
        else:
            super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        if self._health is None:
            super().on_body(body)
        # a health probe's body (it should have none) is read and dropped

    def on_message_complete(self) -> None:
        if self._health is not None:
            self._enter(Awaiting.DONE)
            self._answer_health(self._health)
            return
        super().on_message_complete()
        self._enter(Awaiting.DONE)

    def on_response_complete(self) -> None:
        while self._unanswered and self._unanswered[0].response_complete:
            self._unanswered.popleft()
        super().on_response_complete()  # starts the next request queued, if any
        if self.transport.is_closing():
            self._watch_unsent()
            return
        self._parse()  # what was held for want of room in the pipeline
        if self._deadline is None and self._reading():
            # Whatever the client sent meanwhile waited on this answer: its clock starts now.
            self._enter(self._awaiting)

    # keyless connections giving way (`_seats`)

    def _keyed(self) -> None:
        """A request on this connection showed valid keys: its seat is its own from now on."""
        if self._seat is Seat.SERVING:
            self.policy.seats.keyed(self)

    def idle(self) -> bool:
        """Whether it has waited IDLE_SECONDS for its client (for a request, or its head)."""
        if self._answering() or self._unparsed or self.transport.is_closing():
            return False
        waiting = self._awaiting is Awaiting.DONE or self._awaiting is Awaiting.HEAD
        return waiting and self.loop.time() - self._since >= IDLE_SECONDS

    def reap(self) -> None:
        """Close it: it has no key and is idle, and its seat has gone to a newcomer."""
        self._seat = Seat.REAPED
        if self._awaiting is Awaiting.HEAD and self._head_bytes:
            self._refuse(ApiError.seat_taken(), Closing.AT_ONCE)  # in the middle of a head
        else:
            self._disarm()
            self.transport.close()  # between requests: a client reconnects, as on a timeout

    # answers the client does not read

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_writes()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.transport.is_closing():
            self._unwatch_writes()
            self._parse_held()  # probes held while their answers went unread

    def _close(self) -> None:
        """Close the connection, once what was written is sent (within the write deadline)."""
        self.transport.close()
        self._watch_unsent()

    def _watch_unsent(self) -> None:
        if self.transport.get_write_buffer_size():
            self._watch_writes()

    def _watch_writes(self) -> None:
        if self._write_deadline is None:
            self._write_deadline = self.loop.call_later(self.limits.write_timeout, self._reset)

    def _reset(self) -> None:
        """Abort with a reset: what the kernel still holds for the client is dropped too."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _unwatch_writes(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    # deadlines

    def _enter(self, awaiting: Awaiting) -> None:
        """Await `awaiting` and arm its deadline (none while a whole request awaits its answer)."""
        self._awaiting = awaiting
        self._since = self.loop.time()
        self._disarm()
        timeout = {
            Awaiting.HEAD: self.limits.header_timeout,
            Awaiting.BODY: self.limits.body_timeout,
        }
        if self._seat is Seat.SPARE:
            timeout[Awaiting.HEAD] = min(SPARE_SECONDS, self.limits.header_timeout)
        if awaiting in timeout and not self._answering():
            self._armed += 1
            self._deadline = self.loop.call_at(
                self._since + timeout[awaiting], self._due, self._armed
            )

    def _answering(self) -> bool:
        """Whether a request that arrived whole is waiting for its answer."""
        cycle = self.cycle
        waiting = cycle is not None and not cycle.more_body and not cycle.response_complete
        return waiting or bool(self.pipeline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _due(self, armed: int) -> None:
        self.policy.pacer.submit(lambda: self._expire(armed))

    def _expire(self, armed: int) -> None:
        if self._deadline is None or armed != self._armed:
            return  # disarmed or armed again while it waited for its turn
        self._deadline = None
        if self._seat is Seat.SPARE and self._awaiting is Awaiting.HEAD:
            self._refuse_full()  # no probe in time
        elif self._awaiting is Awaiting.HEAD and self._head_bytes == 0:
            self.transport.close()  # nothing was asked: nothing to answer
        elif self._awaiting is Awaiting.BODY and self.cycle.response_started:
            self.transport.close()  # answered early (413, say): stop waiting for the rest
        elif self._awaiting is Awaiting.HEAD:
            self._refuse(ApiError.request_timeout("headers", self.limits.header_timeout))
        else:
            self._refuse(ApiError.request_timeout("body", self.limits.body_timeout))

    # answers of the protocol itself

    def _answer_health(self, began: float) -> None:
        """`GET /healthz`, answered as the API would, with nothing else on the connection."""
        self._health = None
        self._inline += 1
        sent = [value for name, value in self.headers if name == b"x-request-id"]
        if len(sent) == 1 and _UUID.fullmatch(sent[0]):
            request_id = sent[0].decode("ascii")
        else:
            request_id = str(uuid.uuid4())
        keep_alive = (
            self._seat is Seat.SERVING
            and self.parser.get_http_version() == "1.1"
            and self.parser.should_keep_alive()
        )
        lines = [b"HTTP/1.1 200 OK"]
        lines.extend(name + b": " + value for name, value in self.server_state.default_headers)
        lines += [
            b"x-request-id: " + request_id.encode("ascii"),
            b"cache-control: no-store",
            b"content-type: application/json",
            b"content-length: %d" % len(HEALTH_BODY),
        ]
        if not keep_alive:
            lines.append(b"connection: close")
        self.transport.write(b"\r\n".join([*lines, b"", HEALTH_BODY]))
        path = _path(self.url).decode("latin-1")
        seconds = time.perf_counter() - began
        self.policy.report(RequestRecord("GET", path, 200, request_id, "getHealth", seconds))
        # What uvicorn does once an answer is complete, but from within the parser's callback:
        # the parse loop that called it goes on with whatever else has arrived.
        self.server_state.total_requests += 1
        if not keep_alive:
            self.transport.close()
            self._watch_unsent()
            return
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def _refuse_full(self, closing: Closing = Closing.DRAINED) -> None:
        """503: no seat for a request of this kind (counted as a refused connection)."""
        self.policy.on_refused()
        self._refuse(ApiError.unavailable("the server has too many open connections"), closing)

    def _refuse(self, error: ApiError, closing: Closing = Closing.DRAINED) -> None:
        """Answer `error` in the API's shape, close the connection and report the request."""
        request_id = str(uuid.uuid4())
        body = error.answer(request_id).body
        lines = [
            f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            f"x-request-id: {request_id}",
            "cache-control: no-store",
            "connection: close",
        ]
        if error.retry_after is not None:
            lines.append(f"retry-after: {error.retry_after}")
        known = self._awaiting is Awaiting.BODY  # past the head, the method and path are known
        method = self.scope["method"] if known else "-"
        path = self.scope["raw_path"].decode("latin-1") if known else "-"
        self.transport.write("\r\n".join([*lines, "", ""]).encode("latin-1") + body)
        self._linger(closing)
        self.policy.report(RequestRecord(method, path, error.status, request_id, "none", None))

    def _linger(self, closing: Closing) -> None:
        """Stop writing, discard what still arrives, and close in a moment (see above)."""
        self._disarm()
        self._awaiting = Awaiting.CLOSING
        self._closing = closing
        self._head_bytes = 0
        if closing is Closing.AT_ONCE:
            self._close()
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        seconds = LINGER_SECONDS if closing is Closing.DRAINED else BRIEF_SECONDS
        self._deadline = self.loop.call_later(seconds, self._close)
