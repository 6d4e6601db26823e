"""Clients that attack the server over real sockets: oversized heads, connections that never
finish a request, floods of connections, forged log lines. Each attack is bounded in size and
time and aimed at a server process on loopback; the server must refuse it cheaply and go on
answering everyone else."""

from __future__ import annotations

import contextlib
import json
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.raw import Locks, Waiter, new_id, wait_for
from tests.support.server import Project, ServerProcess, create_project
from tests.support.sockets import burst, connect, read_reply, request_bytes, send_quietly
from volcano_server.telemetry._logs import CONTINUATION

pytestmark = pytest.mark.slow

MAX_HEAD = 8192
PROBE_PATHS = ("/healthz", "/readyz")
# How every line the server writes begins (a forged line would not).
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: ")
QUICK = (
    *("--header-timeout", "0.5", "--body-timeout", "0.5", "--keepalive-timeout", "1"),
    *("--write-timeout", "0.5"),
)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'volcano.db'}"


@pytest.fixture(scope="module")
def project(database: str) -> Project:
    return create_project(database, "hostile")


@pytest.fixture(scope="module")
def server(database: str, project: Project) -> Iterator[ServerProcess]:
    """A server with short client deadlines and an 8 KiB head limit, logging each request."""
    with ServerProcess(database, "--max-header-bytes", str(MAX_HEAD), *QUICK) as running:
        yield running


def rss_bytes(server: ServerProcess) -> int:
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def head_of(size: int) -> bytes:
    """The start of a request whose apikey header alone is `size` bytes (never finished)."""
    return b"GET /v1/locks/k HTTP/1.1\r\nHost: 127.0.0.1\r\napikey: " + b"a" * size


def endless_head(port: int, megabytes: int, stop: threading.Event) -> None:
    """Send one header value of up to `megabytes` MB, until the server cuts the connection."""
    with contextlib.suppress(OSError), connect(port) as sock:
        sock.sendall(head_of(0))
        chunk = b"a" * 65_536
        for _ in range(megabytes * 16):
            if stop.is_set():
                return
            sock.sendall(chunk)


@contextlib.contextmanager
def keyed(port: int, project: Project) -> Iterator[socket.socket]:
    """A kept-alive connection that has sent one request with valid keys: its seat is its own."""
    with connect(port) as sock:
        sock.sendall(request_bytes("GET", "/v1/locks/k", [*project.headers().items()]))
        assert read_reply(sock, until=b"}", timeout=5).status == 200
        yield sock


@contextlib.contextmanager
def keyless(port: int) -> Iterator[socket.socket]:
    """A kept-alive connection that has asked for /healthz once, without keys, and idles."""
    with connect(port) as sock:
        sock.sendall(request_bytes("GET", "/healthz"))
        assert read_reply(sock, until=b"}", timeout=5).status == 200
        yield sock


def lock_calls_answer(server: ServerProcess, project: Project, times: int = 5) -> None:
    """/healthz, /readyz and an acquire/release each answer, `times` over (5 s bound each)."""
    key = f"under-attack-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=server.url, headers=project.headers(), timeout=5) as http:
        for _ in range(times):
            assert http.get("/healthz").status_code == 200
            assert http.get("/readyz").status_code == 200
            owner = new_id()
            lease = http.post(
                f"/v1/locks/{key}/acquire", json={"owner_token": owner, "ttl_seconds": 30}
            )
            assert lease.status_code == 200, lease.text
            body = {"owner_token": owner, "fencing_token": lease.json()["fencing_token"]}
            assert http.post(f"/v1/locks/{key}/release", json=body).status_code == 204


class TestBodiesOfStrangers:
    @pytest.mark.parametrize(
        ("path", "size"), [("/v1/leases/renew", 200_000), ("/v1/locks/k/acquire", 10_000)]
    )
    def test_a_caller_without_keys_is_refused_before_its_body_is_read(
        self, server: ServerProcess, path: str, size: int
    ) -> None:
        """A head with no credentials announcing a body under the limit (a batch may send 256
        KiB) is answered 401 from the head alone: the server never waits for, or holds, the
        body of someone without keys (before: it waited for it, and answered 408)."""
        head = request_bytes("POST", path, [("Content-Type", "application/json")])
        head = head.replace(b"\r\n\r\n", f"\r\nContent-Length: {size}\r\n\r\n".encode())
        with connect(server.port) as sock:
            sock.sendall(head)
            reply = read_reply(sock, until=b"}")
            assert reply.status == 401
            # The body that follows is skipped, not taken for the next request.
            send_quietly(sock, b"{" + b" " * (size - 2) + b"}")
            sock.sendall(request_bytes("GET", "/healthz"))
            assert read_reply(sock, until=b"\r\n\r\n").status == 200


class TestHeadLimit:
    def test_oversized_head_gets_431_and_is_never_read_whole(self, server: ServerProcess) -> None:
        """A 4 MB header is cut at the limit: 431 in the API's error shape, then the server
        closes the connection."""
        with connect(server.port) as sock:
            send_quietly(sock, head_of(4_000_000))
            reply = read_reply(sock)
        assert reply.status == 431
        assert reply.json()["error"]["code"] == "request_headers_too_large"
        assert reply.headers["x-request-id"] == reply.json()["error"]["request_id"]
        assert reply.closed

    def test_head_under_the_limit_is_served(self, server: ServerProcess) -> None:
        """A head just under the limit is an ordinary request (here: an unknown apikey, 401)."""
        request = request_bytes("GET", "/v1/locks/k", [("apikey", "a" * (MAX_HEAD - 200))])
        assert len(request) < MAX_HEAD
        with connect(server.port) as sock:
            sock.sendall(request)
            reply = read_reply(sock, timeout=3)
        assert reply.status == 401

    def test_many_tiny_header_fields_get_431(self, server: ServerProcess) -> None:
        """1,200 fields of `a: b` in 7.2 KB, under the byte limit: 431 in the API's error shape
        once past the field limit (100), then the server closes the connection."""
        request = request_bytes("GET", "/healthz", [("a", "b")] * 1_200)
        assert len(request) < MAX_HEAD
        with connect(server.port) as sock:
            sock.sendall(request)
            reply = read_reply(sock)
        assert reply.status == 431
        assert reply.json()["error"]["code"] == "request_headers_too_large"
        assert "100 header fields" in reply.json()["error"]["message"]
        assert reply.closed

    def test_header_fields_up_to_the_limit_are_served(self, server: ServerProcess) -> None:
        """A request with exactly 100 header fields (Host among them) is served."""
        with connect(server.port) as sock:
            sock.sendall(request_bytes("GET", "/healthz", [("a", "b")] * 99))
            reply = read_reply(sock, timeout=3)
        assert reply.status == 200

    def test_ten_concurrent_50_mb_heads_cost_little(
        self, server: ServerProcess, project: Project
    ) -> None:
        """Ten clients each sending a 50 MB header at once: the server keeps answering lock
        calls, and its memory grows by far less than what they sent."""
        before = rss_bytes(server)
        stop = threading.Event()
        senders = [
            threading.Thread(target=endless_head, args=(server.port, 50, stop)) for _ in range(10)
        ]
        for sender in senders:
            sender.start()
        try:
            lock_calls_answer(server, project)
        finally:
            stop.set()
            for sender in senders:
                sender.join(timeout=30)
        assert rss_bytes(server) - before < 32 * 2**20


def pipelined_flood(port: int, requests: int, stop: threading.Event) -> None:
    """Send `requests` pipelined GET /healthz at once and never read an answer."""
    with contextlib.suppress(OSError), connect(port) as sock:
        sock.sendall(request_bytes("GET", "/healthz") * requests)
        stop.wait(30)


def reset_by_server(sock: socket.socket) -> bool:
    """Whether the server has reset (aborted) the connection."""
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0


class TestPipelining:
    def test_pipelined_requests_are_answered_in_order(self, server: ServerProcess) -> None:
        """Forty requests in one write, each with its own request id, are all answered, in the
        order sent (the server parses a few at a time, pausing and resuming its reads)."""
        ids = [new_id() for _ in range(40)]
        requests = b"".join(request_bytes("GET", "/healthz", [("X-Request-Id", i)]) for i in ids)
        with connect(server.port) as sock:
            sock.sendall(requests)
            reply = read_reply(sock, timeout=5, until=ids[-1].encode())
        echoed = re.findall(rb"x-request-id: ([0-9a-f-]{36})", reply.raw)
        assert [i.decode() for i in echoed] == ids

    def test_probes_answered_by_the_protocol_keep_their_place(
        self, database: str, project: Project
    ) -> None:
        """The protocol answers /healthz itself, but only in its turn: pipelined behind a watch
        that waits, a probe is answered after the watch; and a probe's answer does not start
        the keep-alive clock (1 s here) for a watch (2 s) parsed in the same read."""
        with ServerProcess(database, "--keepalive-timeout", "1") as server:
            key = f"held-{uuid.uuid4().hex[:8]}"
            with httpx.Client(base_url=server.url, headers=project.headers()) as http:
                assert Locks(http).acquire(key, new_id()).status_code == 200
                version = http.get(f"/v1/locks/{key}").json()["version"]
            keys = list(project.headers().items())

            def watch(seconds: int, request_id: str) -> bytes:
                path = f"/v1/locks/{key}?after_version={version}&wait_seconds={seconds}"
                return request_bytes("GET", path, [*keys, ("X-Request-Id", request_id)])

            def probe(request_id: str) -> bytes:
                return request_bytes("GET", "/healthz", [("X-Request-Id", request_id)])

            first, second = new_id(), new_id()
            # A probe short enough that the parser is fed it and the watch's head in one piece.
            for requests, ids in [
                (request_bytes("GET", "/healthz") + watch(2, first), [first]),
                (watch(1, first) + probe(second), [first, second]),
            ]:
                with connect(server.port) as sock:
                    sock.sendall(requests)
                    reply = read_reply(sock, timeout=10, until=ids[-1].encode())
                echoed = re.findall(rb"x-request-id: ([0-9a-f-]{36})", reply.raw)
                assert [i.decode() for i in echoed[-len(ids) :]] == ids, reply.raw
                assert re.findall(rb"HTTP/1.1 (\d+)", reply.raw) == [b"200", b"200"], reply.raw

    def test_pipelining_flood_costs_little(self, server: ServerProcess, project: Project) -> None:
        """Four clients each pipelining 20,000 GET /healthz at once (720 KB each) and never
        reading: lock calls keep answering, and the server's memory grows by far less than the
        requests would take if parsed ahead (about 2.4 KB each)."""
        before = rss_bytes(server)
        stop = threading.Event()
        floods = [
            threading.Thread(target=pipelined_flood, args=(server.port, 20_000, stop))
            for _ in range(4)
        ]
        for flood in floods:
            flood.start()
        try:
            lock_calls_answer(server, project)
            assert rss_bytes(server) - before < 32 * 2**20
        finally:
            stop.set()
            for flood in floods:
                flood.join(timeout=30)

    def test_client_that_never_reads_its_answers_is_cut(self, server: ServerProcess) -> None:
        """A client that pipelines requests for 10 MB of answers and reads none is reset once
        its answers have waited past the write timeout (0.5 s here), though a request of its
        own is still being answered (no client deadline runs then)."""
        with connect(server.port) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            send_quietly(sock, request_bytes("GET", "/openapi.yaml") * 250)
            wait_for(lambda: reset_by_server(sock), "the server resets the connection")
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        assert "Traceback" not in server.log  # the request it was answering ended quietly


class TestSlowClients:
    def test_silent_connection_is_closed_without_an_answer(self, server: ServerProcess) -> None:
        """A connection that never sends a byte is closed after the header timeout."""
        with connect(server.port) as sock:
            reply = read_reply(sock)
        assert reply.closed
        assert reply.raw == b""

    def test_partial_head_gets_408(self, server: ServerProcess) -> None:
        """Half a request head, then silence: 408 request_timeout and the connection closed."""
        with connect(server.port) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            reply = read_reply(sock)
        assert reply.status == 408
        assert reply.json()["error"]["code"] == "request_timeout"
        assert "headers" in reply.json()["error"]["message"]
        assert reply.closed

    def test_trickled_head_is_cut_at_the_deadline(self, server: ServerProcess) -> None:
        """A head sent a byte at a time keeps no connection alive: the deadline counts from the
        start of the head, not from the last byte."""
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nx-slow: " + b"s" * 200
        with connect(server.port) as sock:
            for byte in head:  # at most 200 x 0.05 s
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    break
                with contextlib.suppress(OSError):
                    sock.send(bytes([byte]))
            reply = read_reply(sock)
        assert reply.status == 408

    def test_unfinished_body_gets_408(self, server: ServerProcess, project: Project) -> None:
        """A Content-Length body that never completes: 408 naming the body, connection closed."""
        headers = [*project.headers().items(), ("Content-Type", "application/json")]
        head = request_bytes("POST", "/v1/locks/k/acquire", [*headers, ("Content-Length", "100")])
        with connect(server.port) as sock:
            sock.sendall(head + b'{"owner_token"')
            reply = read_reply(sock)
        assert reply.status == 408
        assert "body" in reply.json()["error"]["message"]
        assert reply.closed

    def test_endless_chunked_body_gets_408(self, server: ServerProcess, project: Project) -> None:
        """A chunked body that never ends, however steadily it trickles, is cut."""
        headers = [*project.headers().items(), ("Transfer-Encoding", "chunked")]
        with connect(server.port) as sock:
            sock.sendall(request_bytes("POST", "/v1/locks/k/acquire", headers))
            for _ in range(200):  # at most 200 x 0.05 s
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable:
                    break
                with contextlib.suppress(OSError):
                    sock.sendall(b"1\r\n \r\n")
            reply = read_reply(sock)
        assert reply.status == 408
        assert reply.closed

    def test_idle_kept_alive_connection_is_closed(self, server: ServerProcess) -> None:
        """After an answer, a connection left idle is closed by the keep-alive timeout."""
        with connect(server.port) as sock:
            sock.sendall(request_bytes("GET", "/healthz"))
            reply = read_reply(sock)
        assert reply.status == 200
        assert reply.closed

    def test_head_sent_in_pieces_in_time_is_served(self, server: ServerProcess) -> None:
        """The deadlines leave ordinary clients alone: a head in two quick pieces is served."""
        request = request_bytes("GET", "/healthz")
        with connect(server.port) as sock:
            sock.sendall(request[:10])
            sock.sendall(request[10:])
            reply = read_reply(sock, timeout=3)
        assert reply.status == 200


class TestConnectionCap:
    def test_past_the_cap_new_connections_get_503_and_admitted_ones_are_served(
        self, database: str, project: Project
    ) -> None:
        """With 20 connections open that have shown keys, the 21st gets 503 (within a second,
        though it sends nothing: it had a spare seat's second to ask for a health probe); the 20
        are still served."""
        with ServerProcess(database, "--max-connections", "20") as server:
            with contextlib.ExitStack() as held:
                admitted = [held.enter_context(keyed(server.port, project)) for _ in range(20)]
                with connect(server.port) as extra:
                    refused = read_reply(extra)
                admitted[0].sendall(request_bytes("GET", "/healthz"))
                served = read_reply(admitted[0], timeout=1)
            assert refused.status == 503
            assert refused.json()["error"]["code"] == "unavailable"
            assert refused.headers["retry-after"] == "1"
            assert refused.closed
            assert served.status == 200

            def healthy() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
                return False

            wait_for(healthy, "the server admits connections again once some close")
        assert "open-files limit" in server.log
        assert "at most 20 connections" in server.log

    def test_over_the_cap_health_probes_are_answered(self, database: str, project: Project) -> None:
        """With the 20 connections of the cap open (each has shown keys), GET /healthz on a new
        connection is answered 200 and closed, so a supervisor sees a full server as alive, and
        /readyz 503: the API has no seat for a new connection (before: 200); any other request
        over the cap gets 503."""
        with (
            ServerProcess(database, "--max-connections", "20") as server,
            contextlib.ExitStack() as held,
        ):
            for _ in range(20):
                held.enter_context(keyed(server.port, project))
            probes = []
            for path in ("/healthz", "/readyz"):
                with connect(server.port) as sock:
                    sock.sendall(request_bytes("GET", path))
                    probes.append(read_reply(sock))
            with connect(server.port) as sock:
                sock.sendall(request_bytes("GET", "/v1/locks/k", [*project.headers().items()]))
                refused = read_reply(sock)
        assert [probe.status for probe in probes] == [200, 503]
        assert "no seat for a new connection" in probes[1].json()["error"]["message"]
        assert all(probe.headers["connection"] == "close" and probe.closed for probe in probes)
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "unavailable"

    def test_the_private_listener_answers_probes_whatever_the_public_port_holds(
        self, database: str, project: Project
    ) -> None:
        """With every public seat taken (the cap of 20 held by connections with keys, and its
        16 spare seats by silent ones), the private listener (--metrics-port) answers: /healthz
        200 (the process is alive), /readyz 503 (the API cannot take a connection: before, 200,
        and a balancer kept sending clients to a closed door)."""
        options = ("--max-connections", "20", "--header-timeout", "30", "--metrics-port", "0")
        with ServerProcess(database, *options) as server, contextlib.ExitStack() as held:
            match = re.search(r"metrics on (http://\S+)/metrics", server.log)
            assert match is not None, server.log
            for _ in range(20):
                held.enter_context(keyed(server.port, project))
            for _ in range(16):
                held.enter_context(connect(server.port))
            with connect(server.port) as sock:
                public = read_reply(sock)
            private = [httpx.get(match.group(1) + path, timeout=5) for path in PROBE_PATHS]
        assert public.status == 503  # over every public seat: refused at once
        assert [probe.status_code for probe in private] == [200, 503]
        assert private[0].json() == {"status": "ok"}
        assert private[1].json()["error"]["code"] == "unavailable"

    def test_connections_without_keys_give_their_seats_to_newcomers(
        self, database: str, project: Project
    ) -> None:
        """B2 of issue 33: every seat held by kept-alive connections that asked /healthz without
        keys. A client with keys, on new connections, is served (before: 503 until the idle
        ones timed out); the connections reaped were the keyless ones, each closed between its
        requests; /readyz answers 200 throughout, as the API does take new connections."""
        options = ("--max-connections", "20", "--metrics-port", "0", "--keepalive-timeout", "60")
        with ServerProcess(database, *options) as server, contextlib.ExitStack() as held:
            match = re.search(r"metrics on (http://\S+)/metrics", server.log)
            assert match is not None, server.log
            idle = [held.enter_context(keyless(server.port)) for _ in range(20)]
            time.sleep(1.2)  # a connection is idle once it has waited a second for its client
            assert httpx.get(match.group(1) + "/readyz", timeout=5).status_code == 200
            for _ in range(5):  # each kept open: the next one needs a seat of its own
                sock = held.enter_context(connect(server.port))
                headers = [*project.headers().items(), ("Content-Type", "application/json")]
                body = json.dumps({"owner_token": new_id(), "ttl_seconds": 30}).encode()
                key = f"b2-{uuid.uuid4().hex[:8]}"
                sock.sendall(request_bytes("POST", f"/v1/locks/{key}/acquire", headers, body))
                assert read_reply(sock, until=b"}", timeout=5).status == 200

            def closed() -> int:
                readable, _, _ = select.select(idle, [], [], 0)
                return sum(sock.recv(1, socket.MSG_PEEK) == b"" for sock in readable)

            wait_for(lambda: closed() == 5, "five keyless connections closed")
            metrics = httpx.get(match.group(1) + "/metrics", timeout=5).text
        assert "volcano_reaped_connections_total 5.0" in metrics

    def test_one_address_holds_at_most_its_share(self, database: str, project: Project) -> None:
        """--max-connections-per-address 3: a fourth connection from 127.0.0.1 gets 503 naming
        the cap, while the three are served."""
        options = ("--max-connections-per-address", "3")
        with ServerProcess(database, *options) as server, contextlib.ExitStack() as held:
            three = [held.enter_context(keyed(server.port, project)) for _ in range(3)]
            with connect(server.port) as sock:
                sock.sendall(request_bytes("GET", "/healthz"))
                crowded = read_reply(sock)
            three[0].sendall(request_bytes("GET", "/healthz"))
            served = read_reply(three[0], until=b"}", timeout=5)
        assert crowded.status == 503
        assert "3 connections open, the most one address may" in crowded.json()["error"]["message"]
        assert served.status == 200

    def test_burst_past_every_seat_gets_503_never_silence(
        self, database: str, project: Project
    ) -> None:
        """With open files limited to 600, the cap (lowered to fit them) held by clients with keys
        and the rest of 100 connections silent, a burst of 600 connections that keep their
        sockets open each get a 503 answer; none is closed without one (libuv closes pending
        connections unanswered once descriptors run out)."""
        if shutil.which("prlimit") is None:
            pytest.skip("needs prlimit (util-linux) to lower the server's open-files limit")
        limit = ["prlimit", "--nofile=600:600", "--"]
        options = ("--max-connections", "100", "--header-timeout", "30", "--no-access-log")
        with (
            ServerProcess(database, *options, prefix=limit) as server,
            contextlib.ExitStack() as held,
        ):
            cap = int(re.findall(r"at most (\d+) connections", server.log)[-1])
            for _ in range(cap):
                held.enter_context(keyed(server.port, project))
            for _ in range(100 - cap):
                held.enter_context(connect(server.port))
            outcomes = burst(server.port, 600, request_bytes("GET", "/v1/locks/k"))
        assert outcomes == {"503": 600}

    def test_backlog_is_the_listening_sockets_accept_queue(self, database: str) -> None:
        """--backlog sets the kernel's accept queue of the listening socket."""
        if shutil.which("ss") is None:
            pytest.skip("needs ss (iproute2) to read a listening socket's queue")
        with ServerProcess(database, "--backlog", "77") as server:
            listing = subprocess.run(
                ["ss", "-Hltn", f"sport = :{server.port}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        assert listing.split()[:3] == ["LISTEN", "0", "77"]
        assert "accept queue 77" in server.log

    def test_slowloris_and_huge_heads_at_once_leave_lock_calls_answering(
        self, database: str, project: Project
    ) -> None:
        """200 connections holding half a head open, plus ten 50 MB headers, against default
        limits: /healthz, /readyz and lock calls keep answering (each within a 5 s bound)."""
        with ServerProcess(database, "--no-access-log") as server, contextlib.ExitStack() as held:
            for _ in range(200):
                sock = held.enter_context(connect(server.port))
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            stop = threading.Event()
            senders = [
                threading.Thread(target=endless_head, args=(server.port, 50, stop))
                for _ in range(10)
            ]
            for sender in senders:
                sender.start()
            try:
                lock_calls_answer(server, project, times=10)
            finally:
                stop.set()
                for sender in senders:
                    sender.join(timeout=30)


class TestOneProjectsShare:
    def test_one_projects_waiters_leave_room_for_everyone_else(self, database: str) -> None:
        """One project opening as many waiting acquires as the server has connections gets
        10 in line and 429 (with Retry-After) for the rest; another project's lock calls and
        the health probes, on new connections, are served meanwhile."""
        greedy, other = create_project(database, "greedy"), create_project(database, "other")
        options = ("--max-connections", "40", "--max-waiters-per-project", "10")
        with ServerProcess(database, "--no-access-log", *options) as server:
            key = f"contested-{uuid.uuid4().hex[:8]}"
            with httpx.Client(base_url=server.url, headers=greedy.headers(), timeout=5) as http:
                assert Locks(http).acquire(key, new_id(), ttl=60).status_code == 200
            waiters = [
                Waiter(httpx.Client(base_url=server.url, headers=greedy.headers(), timeout=30), key)
                for _ in range(40)
            ]

            def refused() -> list[httpx.Response]:
                answers = [w.response for w in waiters if w.response is not None]
                return [a for a in answers if a.status_code == 429]

            wait_for(lambda: len(refused()) == 30, "30 of the greedy project's waits refused")
            lock_calls_answer(server, other)
        assert all(a.headers["retry-after"] == "1" for a in refused())
        assert "10 waiting requests" in refused()[0].json()["error"]["message"]


class TestAccessLog:
    @pytest.mark.parametrize(
        "path",
        [
            "/v1/locks/a%0A2026-01-01%20INFO%20forged",
            "/v1/locks/a%0D%0Aforged",
            "/v1/locks/%1B[31mred",
            "/v1/locks/a%E2%80%A8b%00c",
            "/nowhere\\%0A",
        ],
    )
    def test_a_path_cannot_forge_or_color_a_line(self, server: ServerProcess, path: str) -> None:
        """Each request is one log line, printable ASCII only, whatever its path encodes."""
        marker = new_id()
        with connect(server.port) as sock:
            sock.sendall(request_bytes("GET", path, [("X-Request-Id", marker)]))
            read_reply(sock, timeout=3)
        wait_for(lambda: marker in server.log, "the access line")
        assert len([line for line in server.log.splitlines() if marker in line]) == 1
        for line in server.log.splitlines():
            assert LOG_LINE.match(line), repr(line)
            assert line.isascii(), repr(line)
            assert line.isprintable(), repr(line)

    def test_json_lines(self, database: str, project: Project) -> None:
        """--log-format json: every line is one JSON object; an access line has its fields,
        the path as sent and escaped, and no key."""
        with ServerProcess(database, "--log-format", "json") as server:
            httpx.get(f"{server.url}/v1/locks/a%0Ab", headers=project.headers(), timeout=5)
            wait_for(lambda: '"path"' in server.log, "the access line")
        entries = [json.loads(line) for line in server.log.splitlines()]
        access = next(entry for entry in entries if "path" in entry)
        assert access["path"] == "/v1/locks/a%0Ab"
        assert access["operation"] == "getLock"
        assert access["status"] == 422
        assert access["logger"] == "volcano_server.access"
        assert project.anon_key not in server.log
        assert project.service_key not in server.log


class TestBodiesThatAreNotUnicode:
    """B3/B4 of issue 33: a JSON escape of a lone surrogate (`\\ud800`) parses in Python, but no
    UTF-8 text can hold it."""

    @pytest.mark.parametrize(
        "path", ["/v1/locks/k/acquire", "/v1/locks/k/renew", "/v1/leases/renew"]
    )
    @pytest.mark.parametrize(
        "body", [b'{"\\ud800": 1}', b'{"owner_token": "\\udfff"}', b'{"leases": [{"\\ud800": 1}]}']
    )
    def test_a_lone_surrogate_gets_the_contracts_400(
        self, server: ServerProcess, project: Project, path: str, body: bytes
    ) -> None:
        """Anywhere in the body, field names included: 400 invalid_request in the API's JSON
        shape (before: a plain-text 500 from inside the error handler)."""
        headers = [*project.headers().items(), ("Content-Type", "application/json")]
        with connect(server.port) as sock:
            sock.sendall(request_bytes("POST", path, headers, body))
            reply = read_reply(sock, until=b"}}")
        assert reply.status == 400, reply.raw
        error = reply.json()["error"]
        assert error["code"] == "invalid_request"
        assert "surrogate" in error["message"]
        assert error["request_id"] == reply.headers["x-request-id"]

    def test_no_line_of_the_log_is_forged_and_every_answer_is_logged(
        self, server: ServerProcess, project: Project
    ) -> None:
        """A surrogate followed by a newline and a log line's start reaches no log line
        unescaped; each of the answers is one access line (before: none was, and the traceback
        printed a forged line of its own)."""
        forged = b'{"\\ud800\\n2026-01-01 00:00:00,000 INFO volcano_server.access: forged": 1}'
        headers = [*project.headers().items(), ("Content-Type", "application/json")]
        markers = [new_id() for _ in range(5)]
        for marker in markers:
            with connect(server.port) as sock:
                sock.sendall(
                    request_bytes(
                        "POST", "/v1/locks/k/acquire", [*headers, ("X-Request-Id", marker)], forged
                    )
                )
                assert read_reply(sock, until=b"}}").status == 400
        wait_for(lambda: all(marker in server.log for marker in markers), "the access lines")
        for marker in markers:
            (line,) = [line for line in server.log.splitlines() if marker in line]
            assert " 400 " in line
        for line in server.log.splitlines():
            assert LOG_LINE.match(line) or line.startswith(CONTINUATION), repr(line)
            assert line.isascii(), repr(line)
            assert line.isprintable(), repr(line)
