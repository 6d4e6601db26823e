"""HTTP/1.1 on one connection, as the SDK's own transport (`_transport.py`) speaks it.

A request goes out in one write, head and body together (the server wakes once for it). An
answer is read whole: the status line, the header fields, and the body by the chunked coding,
by Content-Length, or until the connection closes (RFC 9112 section 6), after any interim 1xx
answer. Whatever breaks the protocol, a connection closed early included, is an
`httpx.RemoteProtocolError`; a timeout or a socket error is httpx's exception for it too, so
the SDK maps every failure as it maps httpx's own transport's.

Made for the answers of a JSON API, and as strict as http.client about them: lines of at most
64 KiB, at most 100 header fields, no obsolete line folding. Its whole point is speed: reading
the head with bytes.find and partition costs about a third of http.client's email parser (33
against 82 us per GET, bench/README.md).
"""

from __future__ import annotations

import re
import select
from typing import TYPE_CHECKING, Any

import httpx

from ._pool import seconds

if TYPE_CHECKING:
    import socket

__all__ = ["MAX_FIELDS", "MAX_LINE", "Broken", "Connection", "NeedMore", "head_of"]

MAX_LINE = 65536
"""The longest status line, header field or chunk size line read (http.client's limit)."""
MAX_FIELDS = 100
"""The most header fields an answer may have (http.client's limit)."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_UNSAFE = re.compile(rb"[\r\n\x00]")
_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")
_HEX = re.compile(rb"[0-9A-Fa-f]+")


class Connection:
    """One connection to a server: its socket, and what was read from it but not used yet.

    Args:
        sock: A connected socket (TLS wrapped, for https).
    """

    __slots__ = ("_buffer", "reusable", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()
        self.reusable = False
        """Whether the last answer left the connection fit for another request."""

    def close(self) -> None:
        self.sock.close()

    def idle(self) -> bool:
        """Whether nothing came since the last answer, neither data nor the server's close.

        Such a connection may carry another request (httpcore checks one so before reuse).
        """
        pending = getattr(self.sock, "pending", None)  # TLS: bytes decrypted, not yet read
        if self._buffer or (pending is not None and pending()):
            return False
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable

    def exchange(self, request: httpx.Request, timeouts: dict[str, Any]) -> httpx.Response:
        """Send `request` (its body read whole) and read its answer whole."""
        self.reusable = False
        head = head_of(request, body := request.read())
        try:
            self.sock.settimeout(seconds(timeouts.get("write")))
            self.sock.sendall(head + body)
        except TimeoutError as exc:
            raise httpx.WriteTimeout(str(exc) or "timed out", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc), request=request) from exc
        try:
            self.sock.settimeout(seconds(timeouts.get("read")))
            return self.answer(request)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
        except Broken as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=request) from exc

    def answer(self, request: httpx.Request) -> httpx.Response:
        """Read the answer to `request` whole (after any interim 1xx answers)."""
        while True:
            version, status, reason = self._status_line()
            fields = self._fields()
            if status == 101:
                raise Broken("the server switched protocols (101)")
            if status >= 200:
                break  # an interim 1xx answer: the real one follows
        body, framed = self._body(request.method, status, fields)
        closes = any(
            name.lower() == b"connection" and b"close" in value.lower() for name, value in fields
        )
        self.reusable = framed and version == b"HTTP/1.1" and not closes and not self._buffer
        return httpx.Response(
            status,
            headers=fields,
            content=body,
            request=request,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    def _status_line(self) -> tuple[bytes, int, bytes]:
        line = self._line()
        if not line:
            raise Broken("Server disconnected without sending a response.")
        version, _, rest = line.rstrip(b"\r\n").partition(b" ")
        code, _, reason = rest.partition(b" ")
        if version not in _VERSIONS or len(code) != 3 or not code.isdigit():
            raise Broken(f"not an HTTP/1.1 status line: {line[:80]!r}")
        return version, int(code), reason

    def _fields(self) -> list[tuple[bytes, bytes]]:
        fields: list[tuple[bytes, bytes]] = []
        while (line := self._line()) not in (b"\r\n", b"\n"):
            if not line:
                raise Broken("the connection closed in the answer's head")
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):  # folding, a space before the colon
                raise Broken(f"not a header field: {line[:80]!r}")
            fields.append((name, value.strip(b" \t\r\n")))
            if len(fields) > MAX_FIELDS:
                raise Broken(f"more than {MAX_FIELDS} header fields")
        return fields

    def _body(
        self, method: str, status: int, fields: list[tuple[bytes, bytes]]
    ) -> tuple[bytes, bool]:
        """The body, and whether it was framed (False: it ran until the connection closed)."""
        if method == "HEAD" or status in (204, 304):
            return b"", True
        codings = [v for n, v in fields if n.lower() == b"transfer-encoding"]
        if codings:
            if b",".join(codings).lower().rsplit(b",", 1)[-1].strip() != b"chunked":
                raise Broken("a transfer coding other than chunked comes last")
            return self._chunked(), True
        lengths = {
            v.strip()
            for n, value in fields
            if n.lower() == b"content-length"
            for v in value.split(b",")
        }
        if lengths:
            (length,) = lengths if len(lengths) == 1 else (b"",)
            if not length.isdigit():
                raise Broken(f"a Content-Length that is not one length: {sorted(lengths)}")
            return self._exactly(int(length)), True
        return self._rest(), False

    def _chunked(self) -> bytes:
        parts = []
        while True:
            size = self._line().split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size):
                raise Broken(f"not a chunk size: {size[:80]!r}")
            if int(size, 16) == 0:
                break
            parts.append(self._exactly(int(size, 16)))
            if self._exactly(2) != b"\r\n":
                raise Broken("a chunk not ended by CRLF")
        while self._line() not in (b"\r\n", b"\n", b""):  # trailer fields: not used
            pass
        return b"".join(parts)

    def _line(self) -> bytes:
        """The next line, with its end; what is left when the connection closed; b"" at its end."""
        start = 0
        while (end := self._buffer.find(b"\n", start)) < 0:
            if len(self._buffer) > MAX_LINE:
                raise Broken(f"a line longer than {MAX_LINE} bytes")
            start = len(self._buffer)
            if not self._fill():
                return self._take(len(self._buffer))
        if end >= MAX_LINE:
            raise Broken(f"a line longer than {MAX_LINE} bytes")
        return self._take(end + 1)

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise Broken(
                    "peer closed connection without sending complete message body"
                    f" ({len(self._buffer)} of {size} bytes)"
                )
        return self._take(size)

    def _rest(self) -> bytes:
        while self._fill():
            pass
        return self._take(len(self._buffer))

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self._buffer += chunk
        return bool(chunk)

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken


class Broken(Exception):
    """The answer breaks HTTP/1.1 (or stops short): an httpx.RemoteProtocolError."""


class NeedMore(Exception):
    """More of the answer must arrive before it can be read (`_async_transport`)."""


def head_of(request: httpx.Request, body: bytes) -> bytes:
    """The request line and header fields; a body goes whole, with its length."""
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    length_given = False
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            continue
        length_given = length_given or lowered == b"content-length"
        if not _TOKEN.fullmatch(name) or _UNSAFE.search(value):
            raise httpx.LocalProtocolError(f"a header field volcano will not send: {name!r}")
        lines.append(name + b": " + value)
    if body and not length_given:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"
