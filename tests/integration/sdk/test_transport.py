"""volcano/_transport.py and _http11.py: the client the SDK makes for itself, and its transport.

`Scripted` is a loopback HTTP/1.1 server in a thread that answers each request with the next of
the replies a test gives it, recording what arrived and on which connection, so a test sees what
went over the wire. The SDK's own client also runs against the reference server, through a
FaultProxy where the network misbehaves (tests that take `client_kind` run with both clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trustme
import uvloop

import volcano
from tests.conftest import LiveServer
from tests.support.proxy import FaultProxy
from tests.support.sdk import Sdk, SdkTarget
from tests.support.sockets import closed_url
from volcano import _async_transport, _pool
from volcano._async_transport import AsyncOwnClient, AsyncTransport
from volcano._http11 import Connection
from volcano._transport import OwnClient, Transport, default_http, direct

WAIT = 10.0
"""Upper bound (seconds) on waiting for what a working system does far sooner."""

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


@attrs.frozen
class Reply:
    """What the scripted server does with one request: send `data` (nothing: close without
    a word), then close the connection if `close`; `hold` first waits until it is set."""

    data: bytes
    close: bool = False
    hold: threading.Event | None = None


def reply(
    status: int = 200,
    body: bytes = b"{}",
    *headers: str,
    close: bool = False,
    hold: threading.Event | None = None,
) -> Reply:
    """An answer with a Content-Length; `close`: the server closes the connection after it,
    without saying so first; `hold`: sent once that is set."""
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *headers]
    return Reply(("\r\n".join(lines) + "\r\n\r\n").encode() + body, close=close, hold=hold)


SILENCE = Reply(b"", close=True)
"""Close the connection instead of answering."""


@attrs.frozen
class Arrived:
    """A request as it reached the scripted server, and on which of its connections."""

    connection: int
    head: tuple[str, ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header `name`, or None."""
        for line in self.head[1:]:
            field, _, value = line.partition(":")
            if field.lower() == name.lower():
                return value.strip()
        return None


class Scripted:
    """A loopback HTTP/1.1 server answering from a script of `Reply`s (then 500s)."""

    def __init__(self, *replies: Reply, context: ssl.SSLContext | None = None) -> None:
        self.replies = list(replies)
        self.arrived: list[Arrived] = []
        self.ended = threading.Semaphore(0)  # released as each connection ends
        self._context = context
        self._connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        scheme = "https" if self._context else "http"
        return f"{scheme}://localhost:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        """Stop accepting, end every connection, and wait for the threads."""
        with self._lock:
            for sock in [self._listener, *self._sockets]:  # shutdown wakes a blocked accept
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(WAIT)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(sock)
            self._connections += 1
            thread = threading.Thread(target=self._serve, args=(sock, self._connections))
            thread.start()
            self._threads.append(thread)

    def _serve(self, sock: socket.socket, number: int) -> None:
        try:
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_side=True)
            with sock.makefile("rb") as stream:
                self._answer(sock, stream, number)
        except OSError:  # the client closed or reset it
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the client sees the end now, not when collected
            sock.close()
            self.ended.release()

    def _answer(self, sock: socket.socket, stream: Any, number: int) -> None:
        while head := self._head(stream):
            length = int(Arrived(number, head, b"").header("Content-Length") or 0)
            with self._lock:
                self.arrived.append(Arrived(number, head, stream.read(length)))
                step = self.replies.pop(0) if self.replies else reply(500)
            if step.hold is not None:
                step.hold.wait(WAIT)
            sock.sendall(step.data)
            if step.close:
                return

    @staticmethod
    def _head(stream: Any) -> tuple[str, ...]:
        lines = []
        while (line := stream.readline()) not in (b"\r\n", b""):
            lines.append(line.decode("latin-1").rstrip("\r\n"))
        return tuple(lines)


class Counting(socket.socket):
    """A socket that counts its sends."""

    sends = 0

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.sends += 1
        super().sendall(data, flags)


@pytest.fixture
def servers() -> Iterator[list[Scripted]]:
    """The scripted servers a test starts (`serve`), closed after it."""
    made: list[Scripted] = []
    yield made
    for server in made:
        server.close()


def serve(servers: list[Scripted], *replies: Reply) -> Scripted:
    server = Scripted(*replies)
    servers.append(server)
    return server


class OnLoop:
    """The asyncio client's transport (`AsyncTransport`) driven from the test's thread, on one
    event loop for its whole life, as `Transport` is: each test runs with both."""

    def __init__(self, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
        self._runner = asyncio.Runner(loop_factory=loop_factory)
        self.inner = AsyncTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._runner.run(self.inner.handle_async_request(request))

    def close(self) -> None:
        self._runner.run(self.inner.aclose())

    def __enter__(self) -> OnLoop:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
        # Let the loop finish closing what the transport closed (uvloop runs a failed TLS
        # handshake's shutdown a few callbacks later, and refuses to close a busy loop).
        self._runner.run(asyncio.sleep(0.05))
        self._runner.close()


AnyTransport = Transport | OnLoop


@pytest.fixture(params=["threads", "asyncio", "uvloop"])
def make_transport(request: pytest.FixtureRequest) -> Callable[[], AnyTransport]:
    """Makes the threaded transport, or the asyncio one driven from the test's thread, on
    asyncio's own loop or uvloop's (uvicorn's, whose transports are no asyncio.Transport)."""
    if request.param == "threads":
        return Transport
    if request.param == "uvloop":
        return lambda: OnLoop(uvloop.new_event_loop)
    return OnLoop


@pytest.fixture
def transport(make_transport: Callable[[], AnyTransport]) -> Iterator[AnyTransport]:
    with make_transport() as made:
        yield made


def post(transport: AnyTransport, url: str, *, timeout: float = WAIT) -> httpx.Response:
    """A POST of a small JSON body, as the SDK sends one, with `timeout` for each phase."""
    request = httpx.Request(
        "POST",
        f"{url}/v1/locks/k/acquire?x=1",
        json={"owner_token": "t", "ttl_seconds": 30},
        headers={"X-Request-Id": "r"},
        extensions={"timeout": httpx.Timeout(timeout).as_dict()},
    )
    return transport.handle_request(request)


class TestTransport:
    def test_a_request_and_its_answer(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """Method, target with its query, headers (Host once) and body reach the server as
        httpx built them; status, headers, body and HTTP version come back."""
        server = serve(servers, reply(201, b'{"a": 1}', "X-Thing: one", "X-Thing: two"))
        response = post(transport, server.url)
        (arrived,) = server.arrived
        assert arrived.head[0] == "POST /v1/locks/k/acquire?x=1 HTTP/1.1"
        assert [h for h in arrived.head if h.lower().startswith("host:")] == [
            "Host: " + server.url.removeprefix("http://")
        ]
        assert arrived.header("X-Request-Id") == "r"
        assert arrived.header("Content-Type") == "application/json"
        assert json.loads(arrived.body) == {"owner_token": "t", "ttl_seconds": 30}
        assert arrived.header("Content-Length") == str(len(arrived.body))
        assert response.status_code == 201
        assert response.json() == {"a": 1}
        assert response.headers.get_list("X-Thing") == ["one", "two"]
        assert response.extensions["http_version"] == b"HTTP/1.1"
        assert response.request.url.path == "/v1/locks/k/acquire"

    def test_keeps_the_connection_alive(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """Requests one after another share one connection."""
        server = serve(servers, reply(), reply(), reply())
        for _ in range(3):
            assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 1, 1]

    @pytest.mark.parametrize(
        "last",
        [
            reply(200, b"{}", "Connection: close", close=True),
            Reply(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", close=True),
            Reply(b"HTTP/1.1 200 OK\r\n\r\n{}", close=True),
        ],
        ids=["connection-close", "http-1.0", "until-closed"],
    )
    def test_a_connection_closed_by_its_answer_is_not_reused(
        self, transport: AnyTransport, servers: list[Scripted], last: Reply
    ) -> None:
        """After an answer with `Connection: close`, an HTTP/1.0 answer, or one whose body runs
        until the connection closes, the next request takes a new connection."""
        server = serve(servers, last, reply())
        assert post(transport, server.url).content == b"{}"
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_an_interim_answer_is_skipped(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """A 100 Continue before the answer is read past; the connection is kept."""
        interim = b"HTTP/1.1 100 Continue\r\nX-Early: yes\r\n\r\n"
        server = serve(servers, Reply(interim + reply(201).data), reply())
        response = post(transport, server.url)
        assert (response.status_code, response.headers.get("X-Early")) == (201, None)
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 1]

    def test_bytes_after_an_answer_make_its_connection_unfit(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """A server that sends more than the answer it was asked for: the connection is not
        reused, so the extra bytes never pass for the next answer."""
        server = serve(servers, Reply(reply().data + b"HTTP/1.1 200 OK\r\n"), reply())
        assert post(transport, server.url).status_code == 200
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_an_idle_connection_the_server_closed_is_not_reused(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """A connection the server closed while it was idle is seen closed before reuse (as
        httpcore checks), and the next request goes on a new one."""
        server = serve(servers, reply(close=True), reply())
        assert post(transport, server.url).status_code == 200
        assert server.ended.acquire(timeout=WAIT)  # the server has closed it
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_an_expired_idle_connection_is_closed(
        self, transport: AnyTransport, servers: list[Scripted], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A connection idle for KEEPALIVE_EXPIRY seconds is closed, not reused."""
        server = serve(servers, reply(), reply())
        assert post(transport, server.url).status_code == 200
        monkeypatch.setattr(_pool, "KEEPALIVE_EXPIRY", 0.0)
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]
        assert server.ended.acquire(timeout=WAIT)

    def test_a_chunked_gzipped_answer_is_read_whole(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """The transport undoes the chunked transfer coding, httpx the gzip content coding; the
        connection is kept."""
        packed = gzip.compress(b'{"ok": true}')
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (packed[:5], packed[5:]))
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
        server = serve(servers, Reply(head + chunks + b"0\r\n\r\n"), reply())
        assert post(transport, server.url).json() == {"ok": True}
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 1]

    @pytest.mark.parametrize(
        "broken",
        [
            SILENCE,
            Reply(b"NOT HTTP\r\n\r\n", close=True),
            Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", close=True),
            Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
            Reply(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n"),
            Reply(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n"),
            Reply(b"HTTP/1.1 200 OK\r\n" + b"X-F: 1\r\n" * 101 + b"Content-Length: 0\r\n\r\n"),
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Reply(b"HTTP/1.1 101 Switching Protocols\r\n\r\n"),
        ],
        ids=[
            "closed",
            "malformed",
            "cut-short",
            "two-lengths",
            "folded",
            "line-too-long",
            "too-many-fields",
            "not-chunked",
            "bad-chunk",
            "switching",
        ],
    )
    def test_a_broken_answer_is_a_remote_protocol_error(
        self, transport: AnyTransport, servers: list[Scripted], broken: Reply
    ) -> None:
        """A connection closed instead of an answer, or an answer that breaks HTTP/1.1 (a body
        cut short, two lengths, a folded or overlong line, too many fields, a transfer coding
        not ending in chunked, a malformed chunk, a switch of protocols): httpx.
        RemoteProtocolError, as httpx's own transport raises, naming the request; the
        connection is not kept."""
        server = serve(servers, broken, reply())
        with pytest.raises(httpx.RemoteProtocolError) as raised:
            post(transport, server.url)
        assert raised.value.request.url.path == "/v1/locks/k/acquire"
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_a_request_goes_out_in_one_write(self) -> None:
        """Head and body leave in one send, so that the server wakes once for a request."""
        client, server = socket.socketpair()
        counted = Counting(fileno=client.detach())
        server.sendall(reply().data)
        connection = Connection(counted)
        request = httpx.Request("POST", "http://volcano.test/v1/locks/k/acquire", json={"a": 1})
        assert connection.exchange(request, httpx.Timeout(WAIT).as_dict()).status_code == 200
        assert counted.sends == 1
        assert server.recv(65536).endswith(b'\r\n\r\n{"a":1}')
        connection.close()
        server.close()

    def test_a_header_it_would_not_send_is_a_local_protocol_error(self) -> None:
        """A header value with a line break (an injected field) is refused before sending."""
        client, server = socket.socketpair()
        connection = Connection(client)
        request = httpx.Request("GET", "http://volcano.test/", headers={"X-A": "1\r\nX-B: 2"})
        with pytest.raises(httpx.LocalProtocolError):
            connection.exchange(request, httpx.Timeout(WAIT).as_dict())
        connection.close()
        server.close()

    def test_a_refused_connection_is_a_connect_error(self, transport: AnyTransport) -> None:
        """Nothing listening: httpx.ConnectError."""
        with pytest.raises(httpx.ConnectError):
            post(transport, closed_url())

    def test_no_answer_within_the_read_timeout(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """A server that does not answer within the request's read timeout: httpx.ReadTimeout,
        and that connection is closed."""
        answered = threading.Event()
        server = serve(servers, Reply(b"", close=True, hold=answered), reply())
        with pytest.raises(httpx.ReadTimeout):
            post(transport, server.url, timeout=0.05)
        answered.set()
        assert post(transport, server.url).status_code == 200
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_at_most_max_connections_at_once(
        self, servers: list[Scripted], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With MAX_CONNECTIONS requests under way, one more waits up to its pool timeout,
        then raises httpx.PoolTimeout; once one ends, the next goes."""
        monkeypatch.setattr(_pool, "MAX_CONNECTIONS", 1)
        free = threading.Event()
        server = serve(servers, reply(hold=free), reply())
        with Transport() as made:
            first = threading.Thread(target=post, args=(made, server.url))
            first.start()
            with pytest.raises(httpx.PoolTimeout):
                post(made, server.url, timeout=0)
            free.set()
            first.join(WAIT)
            assert post(made, server.url).status_code == 200

    def test_at_most_max_connections_at_once_on_asyncio(
        self, servers: list[Scripted], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The asyncio transport too: with MAX_CONNECTIONS requests under way, one more waits
        up to its pool timeout, then raises httpx.PoolTimeout; once one ends, the next goes."""
        monkeypatch.setattr(_pool, "MAX_CONNECTIONS", 1)
        free = threading.Event()
        server = serve(servers, reply(hold=free), reply())

        def request(timeout: float) -> httpx.Request:
            return httpx.Request(
                "GET", f"{server.url}/", extensions={"timeout": httpx.Timeout(timeout).as_dict()}
            )

        async def main() -> None:
            made = AsyncTransport()
            first = asyncio.ensure_future(made.handle_async_request(request(WAIT)))
            await asyncio.sleep(0)  # the first takes the one slot before it first waits
            with pytest.raises(httpx.PoolTimeout):
                await made.handle_async_request(request(0.05))
            free.set()
            assert (await first).status_code == 200
            assert (await made.handle_async_request(request(WAIT))).status_code == 200
            await made.aclose()

        asyncio.run(main())

    def test_cancelled_mid_answer_the_connection_is_not_reused(
        self, servers: list[Scripted]
    ) -> None:
        """A request cancelled while its answer is awaited (a task cancelled, a timeout of the
        caller's) closes its connection: the late answer never passes for the next one's."""
        free = threading.Event()
        server = serve(servers, reply(201, hold=free), reply(202))

        async def main() -> None:
            made = AsyncTransport()
            ask = httpx.Request("GET", f"{server.url}/")
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await made.handle_async_request(ask)
            free.set()
            assert (await made.handle_async_request(ask)).status_code == 202
            await made.aclose()

        asyncio.run(main())
        assert [a.connection for a in server.arrived] == [1, 2]

    def test_under_another_async_library_httpx_own_transport_serves(
        self, servers: list[Scripted], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where sniffio names another async library than asyncio (trio, through anyio), the
        requests go through httpx's own async transport, which speaks them all."""
        monkeypatch.setattr(_async_transport, "current_async_library", lambda: "trio")
        used: list[httpx.Request] = []
        real = httpx.AsyncHTTPTransport.handle_async_request

        async def spied(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
            used.append(request)
            return await real(self, request)

        monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", spied)
        server = serve(servers, reply(201))

        async def main() -> int:
            made = AsyncTransport()
            try:
                answer = await made.handle_async_request(httpx.Request("GET", f"{server.url}/"))
                return answer.status_code
            finally:
                await made.aclose()

        assert asyncio.run(main()) == 201
        assert len(used) == 1

    def test_tls_against_httpx_default_certificates(
        self,
        make_transport: Callable[[], AnyTransport],
        servers: list[Scripted],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """https checks the server against what `httpx.create_ssl_context()` trusts, as httpx's
        own client does (SSL_CERT_FILE here): an unknown CA is a ConnectError."""
        ca = trustme.CA()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(context)
        server = Scripted(reply(), context=context)
        servers.append(server)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        with make_transport() as untrusting, pytest.raises(httpx.ConnectError):
            post(untrusting, server.url)
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
        with make_transport() as trusting:
            assert post(trusting, server.url).status_code == 200

    def test_close_closes_idle_connections(
        self, transport: AnyTransport, servers: list[Scripted]
    ) -> None:
        """close() closes the connections kept for reuse."""
        server = serve(servers, reply())
        post(transport, server.url)
        transport.close()
        assert server.ended.acquire(timeout=WAIT)


class TestDefaultClient:
    def test_made_for_itself(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without proxy variables the SDK's own clients are an OwnClient on a `Transport` and
        an AsyncOwnClient on httpx's, whose transports it sends to itself (`direct`)."""
        for name in PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        with default_http(httpx.Client) as client:
            assert isinstance(client, OwnClient)
            assert isinstance(direct(client), Transport)
        made = default_http(httpx.AsyncClient)
        assert isinstance(made, AsyncOwnClient)
        assert isinstance(direct(made), AsyncTransport)
        with httpx.Client() as theirs:
            assert direct(theirs) is None

    @pytest.mark.parametrize("variable", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
    def test_proxy_variables_leave_it_to_httpx(
        self, monkeypatch: pytest.MonkeyPatch, variable: str
    ) -> None:
        """Where a proxy variable is set, the SDK's own client is httpx's default, which
        applies proxies (and NO_PROXY) as httpx does, through its `send`."""
        monkeypatch.setenv(variable, "http://127.0.0.1:3128")
        with default_http(httpx.Client) as client:
            assert type(client) is httpx.Client
            assert direct(client) is None
        assert type(default_http(httpx.AsyncClient)) is httpx.AsyncClient


@pytest.fixture
def proxy(sqlite_server: LiveServer) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the reference server (on SQLite: the backend does not matter)."""
    with FaultProxy(upstream=sqlite_server.url) as made:
        yield made
        assert made.errors == []


@pytest.fixture
def sdk_target(sqlite_server: LiveServer, proxy: FaultProxy) -> SdkTarget:
    """`make_sdk`'s clients (tests/conftest.py) send through `proxy` on the HTTP client each
    makes for itself."""
    return SdkTarget({**sqlite_server.project.client_args(proxy.url), "timeout": WAIT}, own=True)


class TestOwnClientAgainstTheServer:
    def test_every_lock_call(self, make_sdk: Callable[..., Sdk], key: str) -> None:
        """acquire, renew, get, check, release and force_release work through it."""
        own = make_sdk()
        lease = own.acquire(key, ttl=30)
        lease = own.renew(key, lease, ttl=20)
        assert own.get(key).fencing_token == lease.fencing_token
        assert own.check(key, lease.fencing_token)
        own.release(key, lease)
        assert own.get(key).held is False
        assert own.force_release(key).released is False

    def test_a_lost_answer_is_retried_with_the_same_request(
        self, make_sdk: Callable[..., Sdk], proxy: FaultProxy, key: str
    ) -> None:
        """The server grants, the answer is lost (the connection closed): the acquisition is
        sent again, byte for byte, and gets the lease granted the first time."""
        own = make_sdk()
        proxy.on("POST", r"/acquire$").drop_response()
        lease = own.acquire(key, ttl=30)
        first, retry = proxy.wait_until(lambda records: len(records) >= 2)
        assert retry.raw == first.raw
        state = own.get(key)
        assert (state.fencing_token, len(state.holders)) == (lease.fencing_token, 1)

    def test_a_slow_answer_times_out(
        self, make_sdk: Callable[..., Sdk], proxy: FaultProxy, key: str
    ) -> None:
        """No answer within the client's timeout: APITimeoutError."""
        own = make_sdk(timeout=0.3)
        proxy.on("GET", r"/v1/locks/").delay_response(2.0)
        with pytest.raises(volcano.APITimeoutError):
            own.get(key)

    def test_a_proxy_page_is_its_status_error(
        self, make_sdk: Callable[..., Sdk], proxy: FaultProxy, key: str
    ) -> None:
        """A load balancer's HTML 503 is a ServiceUnavailableError, its status read from the
        response the SDK keeps though the generated parse refused the body."""
        own = make_sdk()
        proxy.on("GET", r"/v1/locks/").html_error(503)
        with pytest.raises(volcano.ServiceUnavailableError):
            own.get(key)
