"""Raw HTTP/1.1 over a loopback socket, for what no well-behaved client sends: oversized or
duplicated headers, requests that never finish, connections that say nothing. Every wait is
bounded by a timeout."""

from __future__ import annotations

import collections
import contextlib
import json
import selectors
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

__all__ = [
    "Reply",
    "burst",
    "closed_url",
    "connect",
    "read_reply",
    "request_bytes",
    "send_quietly",
]


@attrs.frozen
class Reply:
    """What a server sent back on one connection before it closed it (or the timeout passed)."""

    raw: bytes
    closed: bool  # the server closed the connection

    @property
    def status(self) -> int | None:
        """The first answer's status code, None when nothing came."""
        if not self.raw.startswith(b"HTTP/1.1 "):
            return None
        return int(self.raw[9:12])

    @property
    def status_text(self) -> str:
        """The first answer's status code as text, or "no answer"."""
        return "no answer" if self.status is None else str(self.status)

    @property
    def headers(self) -> dict[str, str]:
        """The first answer's header fields (lower-case names)."""
        head = self.raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
        return {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in head)}

    def json(self) -> Any:
        """The first answer's body, parsed."""
        body = self.raw.split(b"\r\n\r\n", 1)[1]
        return json.loads(body[: int(self.headers["content-length"])])


def closed_url() -> str:
    """The URL of a loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def connect(port: int, timeout: float = 10.0) -> Iterator[socket.socket]:
    """A TCP connection to 127.0.0.1:`port`, closed afterwards."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        yield sock
    finally:
        sock.close()


def send_quietly(sock: socket.socket, data: bytes, chunk: int = 65_536) -> int:
    """Send `data` in chunks until done or the server stops reading; returns the bytes sent."""
    sent = 0
    try:
        for start in range(0, len(data), chunk):
            sock.sendall(data[start : start + chunk])
            sent += min(chunk, len(data) - start)
    except OSError:  # reset or broken pipe: the server closed the connection
        pass
    return sent


def read_reply(sock: socket.socket, timeout: float = 10.0, until: bytes | None = None) -> Reply:
    """Read until the server closes the connection, `until` arrives, or `timeout` passes."""
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline and (until is None or until not in data):
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65_536)
        except TimeoutError:
            break
        except OSError:
            return Reply(data, closed=True)
        if not chunk:
            return Reply(data, closed=True)
        data += chunk
    return Reply(data, closed=False)


def request_bytes(
    method: str, path: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b""
) -> bytes:
    """One request, byte for byte as given (no header is added but Host and Content-Length)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def burst(port: int, count: int, request: bytes, timeout: float = 20.0) -> collections.Counter[str]:
    """Open `count` connections at once, send `request` on each as soon as it is up, and read
    until the server closes or resets it; how many ended with each status ("503"), or with
    "no answer". Every socket stays open until all have ended (or `timeout` passes, "unended"),
    so no client gives the server back a descriptor early."""
    selector = selectors.DefaultSelector()
    received: dict[socket.socket, bytes] = {}
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE)
        received[sock] = b""
    outcomes: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + timeout
    try:
        while selector.get_map() and time.monotonic() < deadline:
            for key, events in selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if events & selectors.EVENT_WRITE:
                        sock.send(request)
                        selector.modify(sock, selectors.EVENT_READ)
                        continue
                    chunk = sock.recv(65_536)
                except OSError:
                    chunk = b""  # reset: what arrived before it counts
                if chunk:
                    received[sock] += chunk
                    continue
                selector.unregister(sock)
                outcomes[Reply(received[sock], closed=True).status_text] += 1
        outcomes["unended"] += len(selector.get_map())
    finally:
        selector.close()
        for sock in received:
            sock.close()
    return +outcomes
