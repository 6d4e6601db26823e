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
- A cap on open connections: past `max_connections` a new connection gets 503 and is closed at
  once, and the admitted ones are served as before.
- The API's JSON error shape where uvicorn would answer a request it cannot parse with
  plain-text "Invalid HTTP request received.".

Each of those answers is followed by a lingering close: the server stops writing and, for a
second or 64 KiB, whichever comes first, reads and discards what the client is still sending
before it closes. Closing at once with unread bytes would make the kernel reset the connection,
and the reset often destroys the answer before the client reads it; a client that keeps sending
past the cap is reset all the same (it is not listening).

It relies on these uvicorn internals (0.54), each pinned by tests/integration/server/
test_protocol.py: the parser callbacks `on_message_begin`, `on_headers_complete` and
`on_message_complete`; `on_header`; `on_response_complete`; `send_400_response`; `self.cycle` (its
`response_complete`, `response_started` and `more_body`), `self.pipeline`, `self.connections`;
and the constructor's keyword arguments.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, ClassVar

import attrs
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from ._accesslog import RequestRecord
from ._config import Limits
from ._errors import ApiError

__all__ = ["LimitedProtocol", "Phase", "Policy", "protocol_class"]


@attrs.frozen
class Policy:
    """The limits a protocol class enforces, and whom it tells about what it refused."""

    limits: Limits
    report: Callable[[RequestRecord], None]  # each answer the protocol gives itself
    on_refused: Callable[[], None] = lambda: None  # each connection refused over the cap


class Phase(enum.Enum):
    """What a connection waits for from its client."""

    HEAD = "head"  # a request's head (nothing yet, or part of it)
    BODY = "body"  # the rest of a request's body
    DONE = "done"  # nothing: the request arrived whole (it is being answered, or was)
    CLOSING = "closing"  # nothing: the protocol answered and is about to close


# How long, and how much, a refused connection is drained before it is closed (see above).
LINGER_SECONDS = 1.0
LINGER_BYTES = 65_536


class _Answered(Exception):
    """Raised in a parser callback to stop the parser: the protocol has answered already."""


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
        self._phase = Phase.HEAD
        self._since = 0.0  # loop time when the current phase began
        self._head_bytes = 0  # bytes of the current request's head fed to the parser
        self._header_fields = 0  # header fields of the current request parsed so far
        self._deadline: asyncio.TimerHandle | None = None

    # uvicorn's connection events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.policy.on_refused()
            self._refuse(ApiError.unavailable("the server has too many open connections"))
            return
        self._enter(Phase.HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is Phase.CLOSING:
            self._head_bytes += len(data)  # counts what is discarded while lingering
            if self._head_bytes > LINGER_BYTES:
                self.transport.close()
            return
        while data and self._reading():
            if self._phase is Phase.BODY:
                super().data_received(data)
                return
            # Feed the head no further than the limit: if the parser has not seen its end by
            # then, the head is too large. (Bytes that follow a body in the same read count
            # from the next read on: the cap is exact to within one read.)
            room = self.limits.max_header_bytes - self._head_bytes
            if room <= 0:
                self._refuse(ApiError.headers_too_large(self.limits.max_header_bytes))
                return
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)
            super().data_received(piece)

    def _reading(self) -> bool:
        """Whether what arrives is still parsed (not after an answer of the protocol's own)."""
        return self._phase is not Phase.CLOSING and not self.transport.is_closing()

    def send_400_response(self, msg: str) -> None:
        """The request could not be parsed: the API's JSON 400, then close.

        (Also called when a callback of ours stopped the parser after answering: then it has
        nothing to add.)
        """
        if self._phase is not Phase.CLOSING:
            self._refuse(ApiError.invalid_request("the request is not valid HTTP/1.1"))

    # httptools parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_fields = 0
        if self._phase is not Phase.HEAD:  # a new request: its head's clock starts now
            self._enter(Phase.HEAD)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_fields += 1
        if self._header_fields > self.limits.max_header_fields:
            self._refuse(ApiError.too_many_headers(self.limits.max_header_fields))
            raise _Answered  # stops the parser: the rest is never parsed
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._head_bytes = 0
        self._enter(Phase.BODY)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._enter(Phase.DONE)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._deadline is None and not self.transport.is_closing():
            # Whatever the client sent meanwhile waited on this answer: its clock starts now.
            self._enter(self._phase)

    # deadlines

    def _enter(self, phase: Phase) -> None:
        """Move to `phase` and arm its deadline (none while a whole request awaits its answer)."""
        self._phase = phase
        self._since = self.loop.time()
        self._disarm()
        timeout = {Phase.HEAD: self.limits.header_timeout, Phase.BODY: self.limits.body_timeout}
        if phase in timeout and not self._answering():
            self._deadline = self.loop.call_at(self._since + timeout[phase], self._expire)

    def _answering(self) -> bool:
        """Whether a request that arrived whole is waiting for its answer."""
        cycle = self.cycle
        waiting = cycle is not None and not cycle.more_body and not cycle.response_complete
        return waiting or bool(self.pipeline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._phase is Phase.HEAD and self._head_bytes == 0:
            self.transport.close()  # nothing was asked: nothing to answer
        elif self._phase is Phase.BODY and self.cycle.response_started:
            self.transport.close()  # answered early (413, say): stop waiting for the rest
        elif self._phase is Phase.HEAD:
            self._refuse(ApiError.request_timeout("headers", self.limits.header_timeout))
        else:
            self._refuse(ApiError.request_timeout("body", self.limits.body_timeout))

    # answers of the protocol itself

    def _refuse(self, error: ApiError) -> None:
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
        known = self._phase is Phase.BODY  # past the head, the method and path are known
        method = self.scope["method"] if known else "-"
        path = self.scope["raw_path"].decode("latin-1") if known else "-"
        self.transport.write("\r\n".join([*lines, "", ""]).encode("latin-1") + body)
        self._linger()
        self.policy.report(RequestRecord(method, path, error.status, request_id, "none", None))

    def _linger(self) -> None:
        """Stop writing, discard what still arrives, and close in a moment (see above)."""
        self._disarm()
        self._phase = Phase.CLOSING
        self._head_bytes = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._deadline = self.loop.call_later(LINGER_SECONDS, self.transport.close)
