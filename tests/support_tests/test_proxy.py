"""FaultProxy between a real httpx client and a real HTTP server (http.server, in a thread)."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support.proxy import FaultProxy, RecordedRequest

if TYPE_CHECKING:
    from collections.abc import Iterator

# Upper bounds only: a working proxy answers far sooner, a broken one fails instead of hanging.
PATIENCE = 10.0
# Short client timeouts for requests the proxy must never answer.
GIVE_UP = 0.2

BINARY = bytes(range(256))
UPPER_ID = "0F8FAD5B-D9CB-469F-A165-70867728950E"


# --------------------------------------------------------------------------------------------
# The real upstream: http.server with taps on its socket files, so tests see exact bytes.


class _Tap:
    """Wraps a handler's rfile or wfile and keeps a copy of every byte that passes."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._data = bytearray()

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def readline(self, size: int = -1) -> bytes:
        line: bytes = self._stream.readline(size)
        self._data += line
        return line

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._stream.read(size)
        self._data += data
        return data

    def write(self, data: bytes) -> int:
        written: int = self._stream.write(data)
        self._data += data
        return written

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def take(self) -> bytes:
        data = bytes(self._data)
        self._data.clear()
        return data


class Seen:
    """One request as the upstream received it, and the bytes it answered with."""

    def __init__(self, method: str, path: str, raw: bytes, body: bytes, port: int) -> None:
        self.method = method
        self.path = path
        self.raw = raw
        self.body = body
        self.client_port = port
        self.response = b""
        self.responded = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = PATIENCE * 3  # a stuck connection thread ends eventually
    server: Upstream
    rfile: Any
    wfile: Any

    def setup(self) -> None:
        super().setup()
        self.rfile = _Tap(self.rfile)
        self.wfile = _Tap(self.wfile)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self) -> None:
        self.wfile.take()
        body = self._read_body()
        seen = Seen(self.command, self.path, self.rfile.take(), body, self.client_address[1])
        self.server.record(seen)
        self._respond(body)
        seen.response = self.wfile.take()
        seen.responded.set()

    # http.server dispatches on these names.
    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer  # noqa: N815

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size + 2)[:-2]
            while self.rfile.readline() != b"\r\n":
                pass
            return body
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _respond(self, body: bytes) -> None:
        if self.path == "/gate":
            self.server.gate.wait(PATIENCE)
        if self.path == "/binary":
            self._send(200, BINARY, (("X-Odd-CASE", "Mixed Value"), ("x-dup", "1"), ("X-Dup", "2")))
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"7\r\nhello, \r\n5;ext=1\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n")
        elif self.path == "/no-length":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
        elif self.path == "/close":
            self._send(200, b"bye", (("Connection", "close"),))
            self.close_connection = True
        elif self.path == "/close-silently":  # closes the connection without saying so
            self._send(200, b"bye")
            self.close_connection = True
        else:
            answer = {"method": self.command, "path": self.path, "body": body.decode("latin-1")}
            self._send(200, json.dumps(answer).encode(), (("Content-Type", "application/json"),))

    def _send(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class Upstream(ThreadingHTTPServer):
    """Counts and keeps every request; joins its connection threads when closed."""

    daemon_threads = False
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.gate = threading.Event()
        self._changed = threading.Condition()
        self._seen: list[Seen] = []
        self._closed_connections = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def seen(self) -> list[Seen]:
        with self._changed:
            return list(self._seen)

    def record(self, seen: Seen) -> None:
        with self._changed:
            self._seen.append(seen)
            self._changed.notify_all()

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._changed:
            self._closed_connections += 1
            self._changed.notify_all()

    def wait_for(self, n: int) -> list[Seen]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self._seen) >= n, PATIENCE)
            return list(self._seen)

    def wait_for_closed_connections(self, n: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self._closed_connections >= n, PATIENCE)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.gate.set()
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=upstream.url) as fault_proxy:
        yield fault_proxy
    assert fault_proxy.errors == []


@pytest.fixture
def client(proxy: FaultProxy) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.url, timeout=PATIENCE, trust_env=False) as http:
        yield http


def raw_exchange(proxy: FaultProxy, data: bytes) -> bytes:
    """Send raw bytes to the proxy and return everything it sends back until it closes."""
    with socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE) as sock:
        sock.sendall(data)
        return read_until_closed(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def bind_free_port(sock: socket.socket) -> str:
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    return f"http://{host}:{port}"


def first_is_held(records: list[RecordedRequest]) -> bool:
    return bool(records) and records[0].outcome == "held"


def only(records: list[RecordedRequest]) -> RecordedRequest:
    [record] = records
    return record


# --------------------------------------------------------------------------------------------


class TestForwarding:
    def test_request_reaches_upstream_byte_for_byte(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """Request line, header names, order, duplicates and a binary body arrive unchanged."""
        headers = [("X-Odd-CASE", "Mixed Value"), ("x-dup", "1"), ("X-Dup", "2")]
        response = client.post("/echo?q=1", content=BINARY, headers=headers)
        assert response.status_code == 200
        record = only(proxy.requests)
        [seen] = upstream.seen
        assert seen.raw == record.raw
        assert record.body == seen.body == BINARY
        assert record.raw.startswith(b"POST /echo?q=1 HTTP/1.1\r\n")
        assert [pair for pair in record.headers if pair[0].lower().startswith("x-")] == headers

    def test_response_reaches_client_byte_for_byte(
        self, proxy: FaultProxy, upstream: Upstream
    ) -> None:
        """The client receives exactly the bytes the upstream sent, header spelling included."""
        received = raw_exchange(
            proxy, b"GET /binary HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        [seen] = upstream.seen
        assert seen.responded.wait(PATIENCE)
        response = only(proxy.requests).upstream_response
        assert response is not None
        assert received == seen.response == response.raw
        assert b"\r\nX-Odd-CASE: Mixed Value\r\nx-dup: 1\r\nX-Dup: 2\r\n" in received
        assert received.endswith(BINARY)

    def test_response_headers_reach_httpx_in_order(self, client: httpx.Client) -> None:
        """httpx sees the upstream's header spelling, order and duplicates."""
        response = client.get("/binary")
        odd = [(k, v) for k, v in response.headers.raw if k.lower().startswith(b"x-")]
        assert odd == [(b"X-Odd-CASE", b"Mixed Value"), (b"x-dup", b"1"), (b"X-Dup", b"2")]
        assert response.content == BINARY

    def test_chunked_response_is_forwarded(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A chunked response, extensions and trailers included, reaches the client intact."""
        assert client.get("/chunked").content == b"hello, world"
        response = only(proxy.requests).upstream_response
        assert response is not None
        assert response.body == b"hello, world"
        assert response.raw_body.endswith(b"0\r\nX-Trailer: t\r\n\r\n")

    def test_chunked_request_is_forwarded(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """A chunked request body is forwarded with its framing and recorded decoded."""
        response = client.post("/echo", content=iter([b"ab", b"cd"]))
        assert response.json()["body"] == "abcd"
        record = only(proxy.requests)
        assert record.header("Transfer-Encoding") == "chunked"
        assert record.body == b"abcd"
        assert upstream.seen[0].raw == record.raw

    def test_head_response_has_no_body(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A HEAD response's Content-Length is not read as a body; the connection stays usable."""
        head = client.head("/binary")
        assert head.headers["Content-Length"] == "256"
        assert head.content == b""
        assert client.get("/binary").content == BINARY
        assert len({record.connection_id for record in proxy.requests}) == 1

    def test_response_delimited_by_close(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A response without Content-Length is read until the upstream closes."""
        assert client.get("/no-length").content == b"until the end"
        assert client.get("/after").status_code == 200
        first, second = proxy.requests
        assert first.connection_id != second.connection_id

    def test_upstream_connection_close_is_passed_on(
        self, proxy: FaultProxy, client: httpx.Client
    ) -> None:
        """The upstream's Connection: close reaches the client, which then reconnects."""
        response = client.get("/close")
        assert response.headers["Connection"] == "close"
        assert client.get("/after").status_code == 200
        first, second = proxy.requests
        assert first.connection_id != second.connection_id

    def test_upstream_unreachable_resets_client(self) -> None:
        """With nothing listening upstream the client gets a transport error, not a status."""
        # Bound but not listening: connections are refused, and no one else can take the port.
        with (
            socket.socket() as placeholder,
            FaultProxy(upstream=bind_free_port(placeholder)) as proxy,
            httpx.Client(base_url=proxy.url, timeout=PATIENCE, trust_env=False) as client,
        ):
            with pytest.raises(httpx.TransportError) as caught:
                client.get("/")
            assert not isinstance(caught.value, httpx.TimeoutException)
            record = only(proxy.requests)
            assert record.error is not None
            assert record.error.startswith("upstream")
            assert record.upstream_status is None

    def test_malformed_request_gets_400(self, upstream: Upstream) -> None:
        """A request that is not HTTP/1.1 gets a 400 from the proxy and is not forwarded."""
        with FaultProxy(upstream=upstream.url) as proxy:
            received = raw_exchange(proxy, b"NONSENSE\r\n\r\n")
            assert received.startswith(b"HTTP/1.1 400 ")
            assert proxy.requests == []
            assert len(proxy.errors) == 1
        assert upstream.seen == []


class TestKeepAlive:
    def test_several_requests_share_one_connection(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """Requests on one client connection reuse one proxy and one upstream connection."""
        for i in range(5):
            assert client.get(f"/n/{i}").json()["path"] == f"/n/{i}"
        assert [record.target for record in proxy.requests] == [f"/n/{i}" for i in range(5)]
        assert len({record.connection_id for record in proxy.requests}) == 1
        assert len({seen.client_port for seen in upstream.seen}) == 1

    def test_client_connection_close_ends_connection(
        self, proxy: FaultProxy, client: httpx.Client
    ) -> None:
        """Connection: close from the client closes the connection after the response."""
        client.get("/one", headers={"Connection": "close"})
        client.get("/two")
        first, second = proxy.requests
        assert first.connection_id != second.connection_id

    def test_pipelined_requests_are_answered_in_order(
        self, proxy: FaultProxy, upstream: Upstream
    ) -> None:
        """Two requests written at once get two responses, in order, on one connection."""
        received = raw_exchange(
            proxy,
            b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        assert received.count(b"HTTP/1.1 200 ") == 2
        assert received.index(b'"/first"') < received.index(b'"/second"')
        assert [seen.path for seen in upstream.seen] == ["/first", "/second"]

    def test_upstream_closing_idle_connection_is_survived(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """When the upstream silently closes an idle connection the next request reconnects."""
        assert client.get("/close-silently").content == b"bye"
        upstream.wait_for_closed_connections(1)
        assert client.get("/after").status_code == 200
        first, second = proxy.requests
        assert first.connection_id == second.connection_id
        assert upstream.seen[0].client_port != upstream.seen[1].client_port


class TestDropResponse:
    def test_upstream_commits_and_client_hears_nothing(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """The upstream answers in full, the client sees the connection close with no response."""
        proxy.on().drop_response()
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/acquire", content=b"{}")
        assert [seen.path for seen in upstream.seen] == ["/acquire"]
        record = only(proxy.requests)
        assert (record.action, record.upstream_status) == ("drop_response", 200)
        assert (record.client_status, record.outcome) == (None, "closed")

    def test_rst_variant_gives_read_error(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """drop_response(rst=True) resets the client connection after the upstream answered."""
        proxy.on().drop_response(rst=True)
        with pytest.raises(httpx.ReadError):
            client.get("/x")
        assert len(upstream.seen) == 1

    def test_next_request_passes(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """After the dropped response the client's next request gets through."""
        proxy.on().drop_response()
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/lost")
        assert client.get("/next").status_code == 200


class TestResetBeforeForward:
    def test_upstream_never_sees_request(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """The client connection is reset and the upstream never sees the request."""
        proxy.on("POST").reset_before_forward()
        with pytest.raises(httpx.ReadError):
            client.post("/acquire", content=b"{}")
        assert client.get("/next").status_code == 200
        assert [seen.path for seen in upstream.seen] == ["/next"]
        record = proxy.requests[0]
        assert (record.action, record.upstream_status, record.outcome) == (
            "reset_before_forward",
            None,
            "closed",
        )

    def test_fin_variant(self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream) -> None:
        """rst=False closes the connection cleanly instead, still without forwarding."""
        proxy.on().reset_before_forward(rst=False)
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/x")
        assert upstream.seen == []


class TestErrorResponse:
    def test_echoes_a_uuid_request_id_as_sent(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """A 503 in the contract's shape echoes X-Request-Id byte for byte, with Retry-After."""
        proxy.on("POST", r"/acquire$").error_response(503)
        response = client.post("/v1/locks/k/acquire", headers={"X-Request-Id": UPPER_ID})
        assert response.status_code == 503
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["X-Request-Id"] == UPPER_ID
        assert response.headers["Retry-After"] == "1"
        error = response.json()["error"]
        assert set(error) == {"code", "message", "request_id"}
        assert (error["code"], error["request_id"]) == ("unavailable", UPPER_ID)
        assert isinstance(error["message"], str)
        assert upstream.seen == []
        record = only(proxy.requests)
        assert (record.action, record.client_status, record.upstream_status) == (
            "error_response",
            503,
            None,
        )

    def test_connection_stays_open(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """After answering, the proxy keeps the connection for the client's next request."""
        proxy.on().error_response(409)
        assert client.get("/x").status_code == 409
        assert client.get("/y").status_code == 200
        assert len({record.connection_id for record in proxy.requests}) == 1

    def test_head_request_gets_no_body(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A proxy answer to HEAD carries Content-Length but no body; the connection survives."""
        proxy.on().error_response(503)
        response = client.head("/x")
        assert int(response.headers["Content-Length"]) > 0
        assert response.content == b""
        assert client.get("/y").status_code == 200

    @pytest.mark.parametrize("sent", [None, "not-a-uuid"])
    def test_fresh_request_id_otherwise(
        self, client: httpx.Client, proxy: FaultProxy, sent: str | None
    ) -> None:
        """Without a UUID X-Request-Id the body and header carry the same fresh uuid4."""
        proxy.on().error_response(500)
        headers = {"X-Request-Id": sent} if sent else {}
        response = client.get("/x", headers=headers)
        request_id = response.headers["X-Request-Id"]
        assert response.json()["error"]["request_id"] == request_id
        assert uuid.UUID(request_id).version == 4
        assert request_id != sent

    @pytest.mark.parametrize(
        ("status", "code", "retry_after"),
        [(409, "lock_held", "1"), (429, "rate_limited", "1"), (500, "internal", None)],
    )
    def test_default_codes_and_retry_after(
        self,
        proxy: FaultProxy,
        client: httpx.Client,
        status: int,
        code: str,
        retry_after: str | None,
    ) -> None:
        """Each status gets the contract's code, and Retry-After where the contract has one."""
        proxy.on().error_response(status)
        response = client.get("/x")
        assert response.status_code == status
        assert response.json()["error"]["code"] == code
        assert response.headers.get("Retry-After") == retry_after

    def test_retry_after_none_omits_the_header(
        self, proxy: FaultProxy, client: httpx.Client
    ) -> None:
        """retry_after=None sends no Retry-After, even for a 503."""
        proxy.on().error_response(503, retry_after=None)
        assert "Retry-After" not in client.get("/x").headers

    def test_html_error_is_not_json(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """html_error answers like a load balancer: text/html that does not parse as JSON."""
        proxy.on().html_error(503)
        response = client.get("/x")
        assert response.status_code == 503
        assert response.headers["Content-Type"] == "text/html"
        with pytest.raises(json.JSONDecodeError):
            response.json()


class TestDelay:
    def test_short_delay_forwards(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """A delay shorter than the client's patience still forwards and answers."""
        proxy.on().delay(0.05)
        assert client.get("/slow").status_code == 200
        assert len(upstream.seen) == 1
        assert only(proxy.requests).action == "delay"

    def test_client_timeout_and_proxy_survives(
        self, proxy: FaultProxy, client: httpx.Client
    ) -> None:
        """A client that gives up during a delay gets ReadTimeout; the proxy serves the next."""
        proxy.on().delay(PATIENCE)
        with pytest.raises(httpx.ReadTimeout):
            client.get("/slow", timeout=GIVE_UP)
        assert client.get("/next").status_code == 200

    def test_request_still_reaches_upstream_after_client_gave_up(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """The delayed request was on the wire: the upstream gets it after the client left."""
        proxy.on().delay(0.5)
        with pytest.raises(httpx.ReadTimeout):
            client.post("/acquire", content=b"{}", timeout=0.05)
        [seen] = upstream.wait_for(1)
        assert seen.path == "/acquire"
        record = only(proxy.requests)
        assert record.done.wait(PATIENCE)
        assert record.upstream_status == 200


class TestDelayResponse:
    def test_upstream_commits_while_client_times_out(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """The upstream answers at once, the response is held, the client times out."""
        proxy.on().delay_response(PATIENCE)
        with pytest.raises(httpx.ReadTimeout):
            client.post("/acquire", content=b"{}", timeout=GIVE_UP)
        assert [seen.path for seen in upstream.wait_for(1)] == ["/acquire"]
        assert client.get("/next").status_code == 200
        assert proxy.requests[0].upstream_status == 200

    def test_response_arrives_late(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A patient client gets the held response."""
        proxy.on().delay_response(0.05)
        assert client.get("/x").json()["path"] == "/x"


class TestBlackhole:
    def test_request_is_held_and_never_forwarded(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """The client times out, the upstream never sees the request, later ones pass."""
        proxy.on().blackhole()
        with pytest.raises(httpx.ReadTimeout):
            client.get("/void", timeout=GIVE_UP)
        assert client.get("/next").status_code == 200
        assert [seen.path for seen in upstream.seen] == ["/next"]
        assert proxy.requests[0].action == "blackhole"

    def test_release_closes_held_connection(self, proxy: FaultProxy, upstream: Upstream) -> None:
        """release_held() closes a held connection without a response."""
        proxy.on().blackhole()
        with socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE) as sock:
            sock.sendall(b"GET /void HTTP/1.1\r\nHost: x\r\n\r\n")
            proxy.wait_until(first_is_held)
            proxy.release_held()
            assert read_until_closed(sock) == b""
        record = only(proxy.requests)
        assert record.done.wait(PATIENCE)
        assert (record.outcome, record.partitioned) == ("closed", False)
        assert upstream.seen == []

    def test_client_leaving_ends_hold(self, proxy: FaultProxy) -> None:
        """A held request is finished once its client closes the connection."""
        proxy.on().blackhole()
        with socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE) as sock:
            sock.sendall(b"GET /void HTTP/1.1\r\nHost: x\r\n\r\n")
            proxy.wait_until(first_is_held)
        assert only(proxy.requests).done.wait(PATIENCE)


class TestPartition:
    def test_new_requests_time_out(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """While partitioned a request is read but never forwarded nor answered."""
        proxy.partition()
        assert proxy.partitioned
        with pytest.raises(httpx.ReadTimeout):
            client.get("/x", timeout=GIVE_UP)
        assert upstream.seen == []
        record = only(proxy.requests)
        assert (record.action, record.partitioned) == ("partition", True)

    def test_heal_restores_traffic(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """After heal() requests pass again."""
        proxy.partition()
        with pytest.raises(httpx.ReadTimeout):
            client.get("/x", timeout=GIVE_UP)
        proxy.heal()
        assert not proxy.partitioned
        assert client.get("/y").status_code == 200

    def test_existing_connection_stops_passing_traffic(
        self, proxy: FaultProxy, client: httpx.Client, upstream: Upstream
    ) -> None:
        """A kept-alive connection carries nothing once the partition starts."""
        assert client.get("/before").status_code == 200
        proxy.partition()
        with pytest.raises(httpx.ReadTimeout):
            client.get("/during", timeout=GIVE_UP)
        before, during = proxy.requests
        assert before.connection_id == during.connection_id
        assert during.action == "partition"
        assert [seen.path for seen in upstream.seen] == ["/before"]

    def test_response_arriving_during_partition_is_withheld(
        self, proxy: FaultProxy, upstream: Upstream
    ) -> None:
        """The upstream commits, the partition starts, the response never reaches the client."""
        with socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE) as sock:
            sock.sendall(b"POST /gate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            upstream.wait_for(1)
            proxy.partition()
            upstream.gate.set()
            proxy.wait_until(first_is_held)
            proxy.heal()
            assert read_until_closed(sock) == b""
        record = only(proxy.requests)
        assert (record.action, record.upstream_status, record.client_status) == (
            "forward",
            200,
            None,
        )
        assert record.partitioned

    def test_rules_wait_out_the_partition(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A partitioned request does not use up a rule; the rule applies after heal()."""
        rule = proxy.on().error_response(500)
        proxy.partition()
        with pytest.raises(httpx.ReadTimeout):
            client.get("/x", timeout=GIVE_UP)
        assert rule.hits == 0
        proxy.heal()
        assert client.get("/y").status_code == 500
        assert rule.hits == 1


class TestRules:
    def test_times_limits_applications(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """A rule with times=2 applies to two matching requests, then forwarding resumes."""
        rule = proxy.on().error_response(503, times=2)
        statuses = [client.get("/x").status_code for _ in range(3)]
        assert statuses == [503, 503, 200]
        assert (rule.hits, rule.exhausted) == (2, True)

    def test_times_none_applies_forever(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """times=None never runs out."""
        rule = proxy.on().error_response(503, times=None)
        assert {client.get("/x").status_code for _ in range(5)} == {503}
        assert (rule.hits, rule.exhausted) == (5, False)

    def test_first_matching_rule_wins(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """Rules are tried in the order added; the first that matches applies."""
        proxy.on("GET", r"^/a$").error_response(500, times=None)
        proxy.on().error_response(404, times=None)
        assert client.get("/a").status_code == 500
        assert client.get("/b").status_code == 404
        assert client.post("/a").status_code == 404

    def test_exhausted_rule_lets_later_rules_apply(
        self, proxy: FaultProxy, client: httpx.Client
    ) -> None:
        """A used-up rule is skipped in favour of the next matching one."""
        proxy.on().error_response(500)
        proxy.on().error_response(404, times=None)
        assert [client.get("/x").status_code for _ in range(3)] == [500, 404, 404]

    def test_match_on_method_and_path(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """Method (any case) and path regex (query excluded) must both hold."""
        proxy.on("post", r"/acquire$").error_response(429, times=None)
        assert client.post("/v1/locks/k/acquire?x=1").status_code == 429
        assert client.get("/v1/locks/k/acquire").status_code == 200
        assert client.post("/v1/locks/k/renew").status_code == 200

    def test_invalid_times_rejected(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """times must be positive or None."""
        with pytest.raises(ValueError, match="times"):
            proxy.on().error_response(500, times=0)
        assert client.get("/x").status_code == 200


class TestRecording:
    def test_records_request_and_outcome(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """Each record holds the parsed request, the action and both sides' status."""
        client.post("/v1/locks/k/acquire?x=1", json={"ttl_seconds": 5}, headers={"X-A": "b"})
        record = only(proxy.requests)
        assert record.done.wait(PATIENCE)
        assert (record.seq, record.method, record.version) == (0, "POST", "HTTP/1.1")
        assert (record.target, record.path) == ("/v1/locks/k/acquire?x=1", "/v1/locks/k/acquire")
        assert record.header("x-a") == record.header("X-A") == "b"
        assert record.json() == {"ttl_seconds": 5}
        assert (record.action, record.outcome) == ("forward", "responded")
        assert (record.upstream_status, record.client_status) == (200, 200)
        assert record.upstream_response is not None
        assert record.upstream_response.json()["path"] == "/v1/locks/k/acquire?x=1"

    def test_requests_is_a_snapshot(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """proxy.requests returns a copy that later traffic does not change."""
        client.get("/a")
        snapshot = proxy.requests
        client.get("/b")
        assert len(snapshot) == 1
        assert len(proxy.requests) == 2

    def test_wait_until(self, proxy: FaultProxy, client: httpx.Client) -> None:
        """wait_until returns once requests sent from another thread have arrived."""
        errors: list[BaseException] = []

        def send() -> None:
            try:
                for path in ("/a", "/b", "/c"):
                    client.get(path)
            except BaseException as exc:
                errors.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        try:
            records = proxy.wait_until(lambda records: len(records) >= 3, PATIENCE)
        finally:
            sender.join()
        assert [record.path for record in records[:3]] == ["/a", "/b", "/c"]
        assert errors == []

    def test_wait_until_times_out(self, proxy: FaultProxy) -> None:
        """wait_until raises TimeoutError, naming what it waited for, when it does not hold."""
        with pytest.raises(TimeoutError, match="one request"):
            proxy.wait_until(lambda records: len(records) >= 1, 0.01, "one request")

    def test_concurrent_requests_are_all_recorded(
        self, proxy: FaultProxy, upstream: Upstream
    ) -> None:
        """Requests from several threads and connections are each recorded exactly once."""
        errors: list[BaseException] = []

        def send(worker: int) -> None:
            try:
                with httpx.Client(base_url=proxy.url, timeout=PATIENCE, trust_env=False) as own:
                    for i in range(5):
                        own.get(f"/w{worker}/{i}")
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=send, args=(n,)) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        records = proxy.requests
        assert sorted(record.seq for record in records) == list(range(40))
        assert len({record.target for record in records}) == 40
        assert len(upstream.seen) == 40


class TestLifecycle:
    def test_url(self, proxy: FaultProxy, upstream: Upstream) -> None:
        """The proxy listens on a free loopback port and says where."""
        assert proxy.port > 0
        assert proxy.url == f"http://127.0.0.1:{proxy.port}"
        assert f"{proxy.upstream[0]}:{proxy.upstream[1]}" in upstream.url
        assert proxy.url in repr(proxy)

    def test_stop_closes_listener(self, upstream: Upstream) -> None:
        """After stop() nothing listens on the proxy's port; stopping again is harmless."""
        proxy = FaultProxy(upstream=upstream.url).start()
        proxy.stop()
        proxy.stop()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE).close()

    def test_stop_closes_held_and_delayed_connections(self, upstream: Upstream) -> None:
        """stop() closes connections that are held or delayed, forwarding nothing."""
        with FaultProxy(upstream=upstream.url) as proxy:
            proxy.on("GET").blackhole()
            proxy.on("POST").delay(PATIENCE * 10)
            held = socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE)
            delayed = socket.create_connection((proxy.host, proxy.port), timeout=PATIENCE)
            with held, delayed:
                held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                delayed.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                proxy.wait_until(lambda records: len(records) >= 2)
                proxy.stop()
                assert read_until_closed(held) == b""
                assert read_until_closed(delayed) == b""
        assert all(record.done.is_set() for record in proxy.requests)
        assert upstream.seen == []

    def test_start_twice_rejected(self, proxy: FaultProxy) -> None:
        """A proxy starts once."""
        with pytest.raises(RuntimeError, match="already started"):
            proxy.start()

    @pytest.mark.parametrize(
        ("given", "parsed"),
        [("http://localhost:81", ("localhost", 81)), ("http://[::1]:9", ("::1", 9))],
    )
    def test_upstream_url(self, given: str, parsed: tuple[str, int]) -> None:
        """The upstream is an http://host:port URL."""
        assert FaultProxy(upstream=given).upstream == parsed

    @pytest.mark.parametrize(
        "given", ["nowhere", "127.0.0.1:8787", "https://secure.test:1", "http://no-port.test"]
    )
    def test_bad_upstream_rejected(self, given: str) -> None:
        """Anything else is a ValueError."""
        with pytest.raises(ValueError, match="upstream"):
            FaultProxy(upstream=given)
