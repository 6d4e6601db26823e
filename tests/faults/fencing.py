"""A protected resource that enforces fencing tokens, for the contention tests.

`FencingStore` is a tiny HTTP service in the test process. `POST /write` with
`{"writer", "token", "phase"}` is accepted unless its token is lower than the highest token the
store has accepted so far (the rule a real store applies to keep an expired holder's late write
out); every write is recorded, accepted or not, with the store's wall clock at the moment it
judged it. `GET /highest` tells the highest accepted token; `POST /hello` lets a contender say it
is ready.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self


@attrs.frozen
class Write:
    """One write as the store judged it."""

    seq: int
    """Its place in the order the store judged writes."""
    writer: str
    token: int
    phase: str
    """begin (right after acquiring), end (after the work), late (after a simulated pause)."""
    accepted: bool
    at_us: int
    """The store's wall clock when it judged the write, in microseconds since the epoch."""


class FencingStore:
    """The fencing-token store, served on 127.0.0.1 from a thread; a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._highest = 0
        self._writes: list[Write] = []
        self._hellos: set[str] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fencing-store", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def writes(self) -> list[Write]:
        with self._lock:
            return list(self._writes)

    @property
    def highest(self) -> int:
        with self._lock:
            return self._highest

    @property
    def hellos(self) -> set[str]:
        with self._lock:
            return set(self._hellos)

    def write(self, writer: str, token: int, phase: str) -> bool:
        """Judge one write: accepted unless `token` is below the highest accepted so far."""
        with self._lock:
            accepted = token >= self._highest
            if accepted:
                self._highest = token
            self._writes.append(
                Write(len(self._writes), writer, token, phase, accepted, time.time_ns() // 1000)
            )
            return accepted

    def hello(self, writer: str) -> None:
        with self._lock:
            self._hellos.add(writer)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _handler(store: FencingStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path != "/highest":
                self._reply(404, {})
                return
            self._reply(200, {"highest": store.highest})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/hello":
                store.hello(body["writer"])
                self._reply(200, {})
            elif self.path == "/write":
                accepted = store.write(body["writer"], body["token"], body["phase"])
                self._reply(200, {"accepted": accepted})
            else:
                self._reply(404, {})

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
