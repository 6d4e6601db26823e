"""Just enough HTTP/1.1 for the fault proxy: read one message off a stream, keep its exact bytes.

Every reader returns the bytes exactly as they came off the wire (so the proxy can forward them
unchanged) next to a parsed view (so rules can match on them). Message framing follows RFC 9112
section 6: `Transfer-Encoding: chunked`, then `Content-Length`, then (responses only) read until
the connection closes.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Literal

__all__ = [
    "Head",
    "ProtocolError",
    "build_response",
    "find_header",
    "find_headers",
    "read_body",
    "read_head",
    "request_framing",
    "response_framing",
    "wants_close",
]

Framing = tuple[Literal["none", "length", "chunked", "until_close"], int]

_CRLF = b"\r\n"
_END_OF_HEAD = b"\r\n\r\n"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_DIGITS = re.compile(r"[0-9]+")


class ProtocolError(Exception):
    """The peer sent something this proxy does not understand as HTTP/1.1."""


@dataclass(frozen=True)
class Head:
    """The start line and header fields of one message, and its exact bytes (CRLFCRLF included)."""

    start_line: str
    headers: list[tuple[str, str]]
    raw: bytes


def find_headers(headers: list[tuple[str, str]], name: str) -> list[str]:
    """Every value of the header field `name` (any letter case), in the order received."""
    wanted = name.lower()
    return [value for key, value in headers if key.lower() == wanted]


def find_header(headers: list[tuple[str, str]], name: str) -> str | None:
    """The first value of the header field `name` (any letter case), or None."""
    values = find_headers(headers, name)
    return values[0] if values else None


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """Read one message head, or return None when the peer closed cleanly between messages.

    Raises:
        ProtocolError: malformed head, or the peer closed in the middle of one.
    """
    while True:
        try:
            raw = await reader.readuntil(_END_OF_HEAD)
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip(_CRLF):
                raise ProtocolError("connection closed in the middle of a message head") from exc
            return None
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError("message head too large") from exc
        # RFC 9112 2.2: ignore empty lines received before a request line.
        raw = raw.lstrip(_CRLF)
        if raw:
            return _parse_head(raw)


def _parse_head(raw: bytes) -> Head:
    lines = raw[: -len(_END_OF_HEAD)].decode("latin-1").split("\r\n")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise ProtocolError(f"malformed header line {line!r}")
        headers.append((name, value.strip(" \t")))
    return Head(start_line=lines[0], headers=headers, raw=raw)


def wants_close(version: str, headers: list[tuple[str, str]]) -> bool:
    """Whether a message asks for its connection to close after it (RFC 9112 section 9.3)."""
    tokens = {
        token.strip().lower()
        for value in find_headers(headers, "Connection")
        for token in value.split(",")
    }
    if "close" in tokens:
        return True
    return version == "HTTP/1.0" and "keep-alive" not in tokens


def _content_length(headers: list[tuple[str, str]]) -> int | None:
    values = {
        item.strip()
        for value in find_headers(headers, "Content-Length")
        for item in value.split(",")
    }
    if not values:
        return None
    if len(values) != 1 or not _DIGITS.fullmatch(next(iter(values))):
        raise ProtocolError(f"bad Content-Length {sorted(values)!r}")
    return int(values.pop())


def _is_chunked(headers: list[tuple[str, str]]) -> bool | None:
    """True for chunked, False for another transfer coding, None without Transfer-Encoding."""
    codings = [
        item.strip().lower()
        for value in find_headers(headers, "Transfer-Encoding")
        for item in value.split(",")
        if item.strip()
    ]
    if not codings:
        return None
    return codings[-1] == "chunked"


def request_framing(headers: list[tuple[str, str]]) -> Framing:
    """How the body of a request with these headers is delimited."""
    chunked = _is_chunked(headers)
    if chunked is False:
        raise ProtocolError("a request's last transfer coding must be chunked")
    if chunked:
        return ("chunked", 0)
    length = _content_length(headers)
    return ("length", length) if length else ("none", 0)


def response_framing(request_method: str, status: int, headers: list[tuple[str, str]]) -> Framing:
    """How the body of a response with this status and these headers is delimited."""
    if request_method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return ("none", 0)
    chunked = _is_chunked(headers)
    if chunked is not None:
        return ("chunked", 0) if chunked else ("until_close", 0)
    length = _content_length(headers)
    if length is None:
        return ("until_close", 0)
    return ("length", length) if length else ("none", 0)


async def read_body(reader: asyncio.StreamReader, framing: Framing) -> tuple[bytes, bytes]:
    """Read a message body; return (its exact bytes, the payload with any chunk framing removed).

    Raises:
        ProtocolError: bad chunk framing.
        asyncio.IncompleteReadError: the peer closed before the end of the body.
    """
    kind, length = framing
    if kind == "length":
        data = await reader.readexactly(length)
        return data, data
    if kind == "until_close":
        data = await reader.read()
        return data, data
    if kind == "chunked":
        return await _read_chunked(reader)
    return b"", b""


async def _read_chunked(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    raw = bytearray()
    payload = bytearray()
    while True:
        line = await _read_line(reader)
        raw += line
        size_text = line[:-2].split(b";", 1)[0].strip(b" \t")
        if not _HEX.fullmatch(size_text):
            raise ProtocolError(f"bad chunk size line {bytes(line)!r}")
        size = int(size_text, 16)
        if size == 0:
            break
        chunk = await reader.readexactly(size + 2)
        if not chunk.endswith(_CRLF):
            raise ProtocolError("chunk data not followed by CRLF")
        raw += chunk
        payload += chunk[:-2]
    while True:  # trailer section, ended by an empty line
        line = await _read_line(reader)
        raw += line
        if line == _CRLF:
            return bytes(raw), bytes(payload)


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(_CRLF)
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError("line too long in chunked body") from exc


def build_response(
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    *,
    close: bool,
    head_only: bool = False,
) -> bytes:
    """The bytes of an HTTP/1.1 response; adds Content-Length, and Connection: close if `close`.

    `head_only` leaves the body out (the answer to a HEAD request) but keeps its Content-Length.
    """
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    names = {name.lower() for name, _ in headers}
    fields = list(headers)
    if "content-length" not in names and not (100 <= status < 200 or status in (204, 304)):
        fields.append(("Content-Length", str(len(body))))
    if close and "connection" not in names:
        fields.append(("Connection", "close"))
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{name}: {value}" for name, value in fields]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body
