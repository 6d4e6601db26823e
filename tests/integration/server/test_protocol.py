"""The connection limits rest on uvicorn internals (see volcano_server/transport/_protocol.py);
these tests pin each one, over real sockets, so an upgrade of uvicorn that changes them fails here.

They run a tiny app with a slow endpoint under the server's protocol, with deadlines far
shorter than the endpoint's delay.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.server import serve_in_thread
from tests.support.sockets import connect, read_reply, request_bytes
from volcano_server import ServerConfig
from volcano_server._config import Limits
from volcano_server.telemetry._accesslog import AccessLog
from volcano_server.telemetry._metrics import Metrics

SLOW = 1.0  # seconds the slow endpoint takes: several times every deadline below
LIMITS = Limits(header_timeout=0.3, body_timeout=0.5, keepalive_timeout=3)


def slow_app() -> Starlette:
    """POST /slow echoes its body after SLOW seconds; GET /fast answers at once."""

    async def slow(request: Request) -> Response:
        body = await request.body()
        await anyio.sleep(SLOW)
        return Response(body, media_type="text/plain")

    async def fast(_request: Request) -> Response:
        return Response(b"fast", media_type="text/plain")

    app = Starlette(
        routes=[Route("/slow", slow, methods=["POST"]), Route("/fast", fast, methods=["GET"])]
    )
    app.state.metrics = Metrics()
    app.state.access_log = AccessLog(app.state.metrics.observe, enabled=False)
    return app


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with serve_in_thread(slow_app(), config=ServerConfig(limits=LIMITS)) as url:
        port = urlsplit(url).port
        assert port is not None
        yield port


def answers(raw: bytes) -> list[bytes]:
    """The bodies of the answers in `raw`, in order (bodies here are short text)."""
    bodies = []
    for part in raw.split(b"HTTP/1.1 ")[1:]:
        head, _, rest = part.partition(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.startswith(b"content-length")).split(
                b":"
            )[1]
        )
        bodies.append(rest[:length])
    return bodies


class TestDeadlinesNeverCutAnAnswer:
    def test_request_waiting_for_its_answer_is_not_cut(self, port: int) -> None:
        """A request that arrived whole is answered however long its answer takes (uses
        cycle.more_body and cycle.response_complete)."""
        with connect(port) as sock:
            sock.sendall(request_bytes("POST", "/slow", body=b"hello"))
            reply = read_reply(sock, timeout=SLOW + 1)
        assert reply.status == 200
        assert answers(reply.raw) == [b"hello"]

    def test_pipelined_request_waits_without_a_deadline(self, port: int) -> None:
        """A second request pipelined behind a slow one, its body one byte short, is not cut
        while it waits in uvicorn's pipeline; its body deadline starts when it runs (uses
        self.pipeline and on_response_complete)."""
        first = request_bytes("POST", "/slow", body=b"one")
        second = request_bytes("POST", "/slow", body=b"two")
        with connect(port) as sock:
            sock.sendall(first + second[:-1])
            reply = read_reply(sock, timeout=SLOW + 1, until=b"one")
            assert answers(reply.raw) == [b"one"]
            sock.sendall(second[-1:])
            reply = read_reply(sock, timeout=SLOW + 1)
        assert answers(reply.raw) == [b"two"]


class TestKeepAlive:
    def test_next_request_head_has_its_own_clock(self, port: int) -> None:
        """On a kept-alive connection the head deadline starts at the next request's first
        byte, not at the end of the last answer (uses on_message_begin)."""
        with connect(port) as sock:
            sock.sendall(request_bytes("GET", "/fast"))
            read_reply(sock, timeout=2 * LIMITS.header_timeout)  # idle past the head deadline
            sock.sendall(request_bytes("GET", "/fast"))
            reply = read_reply(sock, timeout=1)
        assert answers(reply.raw) == [b"fast"]


class TestParserErrors:
    @pytest.mark.parametrize(
        "garbage",
        [
            b"\x00\x01\x02\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"GET /fast HTTP/1.1\r\nbad header\r\n\r\n",
        ],
    )
    def test_unparseable_request_gets_the_json_error(self, port: int, garbage: bytes) -> None:
        """What httptools cannot parse gets 400 invalid_request in the API's shape, not
        uvicorn's plain text (uses send_400_response)."""
        with connect(port) as sock:
            sock.sendall(garbage)
            reply = read_reply(sock, timeout=3)
        assert reply.status == 400
        assert reply.json()["error"]["code"] == "invalid_request"
        assert reply.closed


def test_uvicorn_version_is_the_one_these_tests_pin() -> None:
    """The protocol subclasses uvicorn's httptools protocol; pyproject.toml allows only the
    uvicorn minor version these tests ran against, so an upgrade is a deliberate change."""
    from importlib.metadata import version

    assert version("uvicorn").startswith("0.54.")
