"""volcano/_coalesce.py: the SDK's own httpx client sends each request in one write.

Against a real HTTP server on loopback (the standard library's, in a thread), through real
sockets: the writes that reach the socket stream are counted under the coalescing one.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import pytest

import volcano
from volcano._coalesce import HOLD_BYTES, _AsyncBackend, _Backend, coalescing, default_http


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = str(len(body)).encode() + b":" + body[:8] + body[-8:]
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Counting(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, writes: list[int]) -> None:
        self._stream, self._writes = stream, writes

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._writes.append(len(buffer))
        self._stream.write(buffer, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, timeout)

    def close(self) -> None:
        self._stream.close()

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CountingBackend(httpcore.SyncBackend):
    def __init__(self) -> None:
        self.writes: list[int] = []

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Counting(super().connect_tcp(*args, **kwargs), self.writes)


def _client(backend: httpcore.NetworkBackend) -> httpx.Client:
    client = httpx.Client()
    client._transport._pool._network_backend = backend  # type: ignore[attr-defined]
    return client


def test_a_request_reaches_the_socket_in_one_write(url: str) -> None:
    plain, joined = _CountingBackend(), _CountingBackend()
    with _client(plain) as a, _client(_Backend(joined)) as b:
        for client in (a, b):
            for _ in range(3):
                answer = client.post(url, content=b"x" * 100)
                assert answer.text == "100:" + "x" * 16
    sent = [size for size in plain.writes if size]  # httpx also writes b"" to end a request
    assert len(sent) == 6  # httpx alone: the head, then the body
    assert len(joined.writes) == 3
    assert sum(joined.writes) == sum(plain.writes)


def test_a_streamed_body_goes_in_pieces_and_arrives_whole(url: str) -> None:
    counted = _CountingBackend()
    piece = 16 * 1024
    body = bytes(range(256)) * (3 * HOLD_BYTES // 256 + 64)
    pieces = (body[i : i + piece] for i in range(0, len(body), piece))
    with _client(_Backend(counted)) as client:
        answer = client.post(url, content=pieces, headers={"Content-Length": str(len(body))})
    assert answer.content == f"{len(body)}:".encode() + body[:8] + body[-8:]
    assert len(counted.writes) >= 3  # sent once HOLD_BYTES were held, not held whole
    assert max(counted.writes) <= HOLD_BYTES + piece + 1024


def test_the_async_client_sends_through_the_same(url: str) -> None:
    async def post() -> str:
        async with default_http(httpx.AsyncClient) as client:
            assert isinstance(client._transport._pool._network_backend, _AsyncBackend)  # type: ignore[attr-defined]
            return (await client.post(url, content=b"y" * 50)).text

    assert asyncio.run(post()) == "50:" + "y" * 16


def test_only_the_sdks_own_client_is_changed() -> None:
    with volcano.Client(anon_key="a", service_key="s", api_url="http://127.0.0.1:1") as client:
        assert coalescing(client._http)
    mine = httpx.Client()
    with volcano.Client(
        anon_key="a", service_key="s", api_url="http://127.0.0.1:1", http_client=mine
    ) as client:
        assert client._http is mine
        assert not coalescing(mine)
    mine.close()
