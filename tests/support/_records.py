"""What FaultProxy records: each request as received, and the upstream's response to it."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from tests.support._http11 import find_header, wants_close

__all__ = ["HeaderList", "Outcome", "RecordedRequest", "RecordedResponse"]

Outcome = Literal["pending", "responded", "closed", "held"]
HeaderList = list[tuple[str, str]]


@dataclass(frozen=True, eq=False)
class RecordedResponse:
    """A response as the upstream sent it."""

    version: str
    status: int
    reason: str
    headers: HeaderList
    body: bytes
    """The payload, with any chunked framing removed."""
    head: bytes = field(repr=False)
    raw_body: bytes = field(repr=False)
    interim: bytes = field(default=b"", repr=False)
    """Any 1xx responses that came before this one, exactly as received."""
    closes: bool = field(default=False, repr=False)
    """Whether the upstream closes the connection after this response."""

    @property
    def raw(self) -> bytes:
        """Every byte the upstream sent for this request (interim responses included)."""
        return self.interim + self.head + self.raw_body

    def header(self, name: str) -> str | None:
        """The first value of header `name` (any letter case), or None."""
        return find_header(self.headers, name)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass(eq=False)
class RecordedRequest:
    """One request as the proxy received it, and what the proxy did with it.

    Attributes past `raw_body` change while the proxy handles the request; `done` is set once
    it has finished (response sent, connection closed, or a held connection released).
    """

    seq: int
    """Position in `FaultProxy.requests`, from 0."""
    connection_id: int
    """Which client connection it came on (connections are numbered from 1 as accepted)."""
    method: str
    target: str
    """The request-target exactly as received (path and query)."""
    version: str
    headers: HeaderList
    """Header fields in the order received, names spelled as received."""
    body: bytes
    """The payload, with any chunked framing removed."""
    head: bytes = field(repr=False)
    """The request line and header section exactly as received, CRLFCRLF included."""
    raw_body: bytes = field(repr=False)
    """The body exactly as received (chunk framing included)."""
    action: str = "pending"
    """Name of the action applied: forward, drop_response, reset_before_forward, respond,
    error_response, html_error, delay, delay_response, blackhole, or partition."""
    upstream_response: RecordedResponse | None = field(default=None, repr=False)
    client_status: int | None = None
    """Status of the response the client was sent (the upstream's or the proxy's own), if any."""
    outcome: Outcome = "pending"
    """responded: a response was written to the client; closed: the connection was closed
    without one; held: blackholed right now; pending: still being handled."""
    partitioned: bool = False
    """Whether a partition held this request or its response."""
    error: str | None = None
    """What went wrong with the upstream or the client connection, if anything."""
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def path(self) -> str:
        """The path part of the request-target, without the query."""
        return urlsplit(self.target).path if "://" in self.target else self.target.split("?")[0]

    @property
    def raw(self) -> bytes:
        """Every byte of the request exactly as received (and forwarded)."""
        return self.head + self.raw_body

    @property
    def upstream_status(self) -> int | None:
        """Status of the upstream's response, or None if there was none."""
        return self.upstream_response.status if self.upstream_response else None

    @property
    def wants_close(self) -> bool:
        """Whether the client asked to close the connection after this request."""
        return wants_close(self.version, self.headers)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (any letter case), or None."""
        return find_header(self.headers, name)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)
